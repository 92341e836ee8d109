#include "validate.h"

#include <stdio.h>
#include <string.h>

#include "status.h"
#include "vars.h"

bool validate_email(const char *addr)
{
	size_t n = addr ? strlen(addr) : 0;
	const char *at;

	if (n < 3 || n > 254)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)addr[i];
		if (c <= 0x20 || c >= 0x7f || strchr("<>()[]\\,;:\"", c) != NULL)
			return false;
	}
	at = strchr(addr, '@');
	if (at == NULL || at == addr || strchr(at + 1, '@') != NULL || at[1] == '\0')
		return false;
	if (at - addr > 64)
		return false;
	/* local part and domain: dot-separated words, no empty one (no leading, trailing or
	 * consecutive dot); a quoted local part is refused with '"' above */
	if (addr[0] == '.' || at[-1] == '.' || at[1] == '.' || addr[n - 1] == '.' ||
	    strstr(addr, "..") != NULL)
		return false;
	return true;
}

enum rcs_err validate_mail_list(json_object *arr, const char *field, struct jsonu_err *e)
{
	for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
		const char *a = json_object_get_string(json_object_array_get_idx(arr, i));
		if (!validate_email(a)) {
			char f[128];
			snprintf(f, sizeof(f), "%s[%zu]", field, i);
			return jsonu_fail(e, f, "'%s' is not a valid e-mail address", f);
		}
	}
	return RCS_OK;
}

void validate_status_names(char *out, size_t len)
{
	size_t o = 0;

	out[0] = '\0';
	for (int i = 0; i < JS__COUNT && o < len; i++) {
		int n = snprintf(out + o, len - o, "%s%s", i ? ", " : "",
				 status_name((enum job_status)i));
		if (n < 0)
			break;
		o += (size_t)n;
	}
}

enum rcs_err validate_status_list(json_object *arr, const char *field, struct jsonu_err *e)
{
	for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(arr, i));
		enum job_status st;
		if (!status_parse(s, &st)) {
			char f[128], names[256];
			snprintf(f, sizeof(f), "%s[%zu]", field, i);
			validate_status_names(names, sizeof(names));
			return jsonu_fail(e, f, "'%s' must be one of: %s (not '%.64s')", f, names,
					  s ? s : "");
		}
	}
	return RCS_OK;
}

bool validate_tag(const char *tag)
{
	return vars_token_valid(tag, 64, "-.:/");
}

enum rcs_err validate_tags(json_object *arr, const char *field, struct jsonu_err *e)
{
	for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
		const char *t = json_object_get_string(json_object_array_get_idx(arr, i));
		if (!validate_tag(t)) {
			char f[128];
			snprintf(f, sizeof(f), "%s[%zu]", field, i);
			return jsonu_fail(e, f, "'%s' must be 1-64 letters, digits or any of _-.:/",
					  f);
		}
	}
	return RCS_OK;
}

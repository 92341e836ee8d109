/*
 * vars.c - task variables: declarations (variables_info) and values. See vars.h.
 */
#include "vars.h"

#include <stdio.h>
#include <string.h>

#define VARS_MAX_STRING 65536 /* bytes of one string variable */

bool vars_token_valid(const char *s, size_t max, const char *extra)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '_')
			continue;
		if (extra && strchr(extra, c) != NULL)
			continue;
		return false;
	}
	return true;
}

static const char *const var_types[] = {"string", "timestamp", "integer",
					"number", "boolean",   NULL};

enum rcs_err vars_info_validate(json_object *vi, struct jsonu_err *e)
{
	static const char *const desc_keys[] = {"type", "alias", "description", "optional", NULL};
	size_t n = 0;

	if (vi == NULL)
		return RCS_OK;
	json_object_object_foreach(vi, name, desc)
	{
		char field[128];
		const char *type = NULL, *s = NULL;
		bool b, ok = false;
		enum rcs_err err;

		snprintf(field, sizeof(field), "variables_info.%.60s", name);
		if (++n > VARS_MAX)
			return jsonu_fail(e, "variables_info", "more than %d variables", VARS_MAX);
		if (!vars_token_valid(name, 64, NULL))
			return jsonu_fail(e, field,
					  "variable names are 1-64 letters, digits or '_'");
		if (desc == NULL || !json_object_is_type(desc, json_type_object))
			return jsonu_fail(e, field, "'%s' must be an object", field);
		{
			struct jsonu_err sub;
			if (jsonu_check_keys(desc, desc_keys, &sub) != RCS_OK) {
				char f2[192];
				snprintf(f2, sizeof(f2), "%s.%.60s", field, sub.field);
				return jsonu_fail(e, f2,
						  "unknown descriptor field '%s' (type, alias,"
						  " description, optional)",
						  f2);
			}
		}
		snprintf(field, sizeof(field), "variables_info.%.60s.type", name);
		if (jsonu_get_string(desc, "type", true, 32, &type, NULL, NULL) != RCS_OK)
			return jsonu_fail(e, field, "'%s' is required and must be a string", field);
		for (size_t i = 0; var_types[i]; i++)
			if (strcmp(var_types[i], type) == 0)
				ok = true;
		if (!ok)
			return jsonu_fail(
			    e, field,
			    "unknown type '%.32s' (string, timestamp, integer, number,"
			    " boolean)",
			    type);
		snprintf(field, sizeof(field), "variables_info.%.60s.alias", name);
		err = jsonu_get_string(desc, "alias", false, 200, &s, NULL, NULL);
		if (err != RCS_OK)
			return jsonu_fail(e, field, "'%s' must be a string of at most 200 bytes",
					  field);
		snprintf(field, sizeof(field), "variables_info.%.60s.description", name);
		err = jsonu_get_string(desc, "description", false, 2000, &s, NULL, NULL);
		if (err != RCS_OK)
			return jsonu_fail(e, field, "'%s' must be a string of at most 2000 bytes",
					  field);
		snprintf(field, sizeof(field), "variables_info.%.60s.optional", name);
		if (jsonu_get_bool(desc, "optional", false, &b, NULL, NULL) != RCS_OK)
			return jsonu_fail(e, field, "'%s' must be a boolean", field);
	}
	return RCS_OK;
}

enum rcs_err vars_validate(json_object *vars, json_object *vi, struct jsonu_err *e)
{
	/* every given variable must be declared and of its type */
	if (vars) {
		json_object_object_foreach(vars, name, val)
		{
			char field[128];
			json_object *desc = NULL, *t = NULL;
			const char *type;
			bool ok;

			snprintf(field, sizeof(field), "variables.%.60s", name);
			if (vi == NULL || !json_object_object_get_ex(vi, name, &desc))
				return jsonu_fail(e, field, "unknown variable '%.60s'", name);
			json_object_object_get_ex(desc, "type", &t);
			type = json_object_get_string(t);
			if (type == NULL)
				return jsonu_fail(e, field, "variable '%.60s' has no declared type",
						  name);
			if (val == NULL) {
				ok = false;
			} else if (strcmp(type, "string") == 0) {
				ok = json_object_is_type(val, json_type_string);
				if (ok && json_object_get_string_len(val) > VARS_MAX_STRING)
					return jsonu_fail(e, field, "'%s' is longer than %d bytes",
							  field, VARS_MAX_STRING);
			} else if (strcmp(type, "timestamp") == 0 || strcmp(type, "integer") == 0) {
				ok = json_object_is_type(val, json_type_int);
				/* json-c keeps 2^63..2^64-1 as unsigned; get_int64 would clamp them
				 */
				if (ok && json_object_get_int64(val) == INT64_MAX &&
				    json_object_get_uint64(val) > (uint64_t)INT64_MAX)
					return jsonu_fail(e, field,
							  "'%s' is out of range (-2^63 to 2^63-1)",
							  field);
				if (ok && strcmp(type, "timestamp") == 0)
					ok = json_object_get_int64(val) >= 0 &&
					     json_object_get_int64(val) < INT64_MAX;
			} else if (strcmp(type, "number") == 0) {
				ok = json_object_is_type(val, json_type_int) ||
				     json_object_is_type(val, json_type_double);
			} else if (strcmp(type, "boolean") == 0) {
				ok = json_object_is_type(val, json_type_boolean);
			} else {
				ok = false;
			}
			if (!ok)
				return jsonu_fail(e, field, "'%s' must be of type %s", field, type);
		}
	}
	/* every declared variable is required unless optional */
	if (vi) {
		json_object_object_foreach(vi, name, desc)
		{
			json_object *opt = NULL;
			char field[128];

			if (vars && json_object_object_get_ex(vars, name, NULL))
				continue;
			if (json_object_object_get_ex(desc, "optional", &opt) &&
			    json_object_get_boolean(opt))
				continue;
			snprintf(field, sizeof(field), "variables.%.60s", name);
			return jsonu_fail(e, field, "variable '%.60s' is required", name);
		}
	}
	return RCS_OK;
}

/*
 * ui.c - the web dashboard's files: lookup and Content-Type. See ui.h.
 */
#include "ui.h"

#include <string.h>

/* Nothing but the coordinator's own files, no inline script or style, no frames, no form
 * posted anywhere: the dashboard's JavaScript talks to the REST API on the same origin. */
const char ui_csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
		      "connect-src 'self'; base-uri 'none'; form-action 'none'; "
		      "frame-ancestors 'none'";

static const struct {
	const char *ext;
	const char *type;
} ui_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".json", "application/json"},
    {".txt", "text/plain; charset=utf-8"},
};

const char *ui_content_type(const char *path)
{
	size_t n = strlen(path);

	for (size_t i = 0; i < sizeof(ui_types) / sizeof(ui_types[0]); i++) {
		size_t e = strlen(ui_types[i].ext);
		if (n > e && strcmp(path + n - e, ui_types[i].ext) == 0)
			return ui_types[i].type;
	}
	return "application/octet-stream";
}

const struct ui_file *ui_lookup(const char *path)
{
	if (path[0] == '\0')
		path = "index.html";
	if (path[0] == '/' || strstr(path, "..") || strstr(path, "//") ||
	    path[strspn(path,
			"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-")])
		return NULL;
	for (size_t i = 0; i < ui_n_files; i++)
		if (strcmp(ui_files[i].path, path) == 0)
			return &ui_files[i];
	return NULL;
}

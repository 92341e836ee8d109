/*
 * ui.h - the web dashboard's files (docs/dashboard.md), embedded in the binary.
 *
 * The files of ui/ are compiled into the coordinator (coordinator/embed_ui.cmake), so the
 * dashboard is always the one of the binary and nothing is read from disk: a path under
 * /ui/ is looked up in a fixed table, never joined to a directory, so no path can reach
 * another file. http_api.c serves them with the headers of ui_header_names/values.
 */
#ifndef RCS_UI_H
#define RCS_UI_H

#include <stddef.h>

struct ui_file {
	const char *path; /* under ui/, e.g. "index.html", "js/app.js" */
	const unsigned char *data;
	size_t len;
};

/* Generated (embed_ui.cmake): the files, sorted by path. */
extern const struct ui_file ui_files[];
extern const size_t ui_n_files;

/* The Content-Security-Policy of every answer under /ui/ (docs/dashboard.md). */
extern const char ui_csp[];

/* The file for a path under /ui/ ("" is index.html), or NULL: an unknown name, or one with
 * "..", "//", a leading "/" or a byte outside [A-Za-z0-9_./-], is never found. */
const struct ui_file *ui_lookup(const char *path);

/* The Content-Type of a file, from its name's extension (application/octet-stream for an
 * extension it doesn't know). */
const char *ui_content_type(const char *path);

#endif

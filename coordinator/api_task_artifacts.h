/*
 * api_task_artifacts.h - a task's artifacts, release and download_timeout (docs/api.md,
 * "Tasks"), read from a task's body and kept in the forms a version needs
 * (api_task_artifacts.c), for api_tasks.c.
 */
#ifndef RCS_API_TASK_ARTIFACTS_H
#define RCS_API_TASK_ARTIFACTS_H

#include <json-c/json.h>
#include <stddef.h>

#include "api.h"
#include "manifest.h"
#include "store_tasks.h"

#define API_TASK_MAX_ARTIFACTS    16
#define API_TASK_ARTIFACT_KEY_MAX 64
#define API_TASK_DOWNLOAD_TIMEOUT 86400 /* seconds, the default */

/* What one task version's artifacts are made of; zeroed by the caller, api_task_arts_free. */
struct api_task_arts {
	json_object *record;      /* {"<key>": {"ident","size","name"}} read from a body */
	json_object *signed_form; /* {"<key>": {"sha256","size"}} */
	json_object *release;
	struct task_artifact rows[API_TASK_MAX_ARTIFACTS];
	char key[API_TASK_MAX_ARTIFACTS][API_TASK_ARTIFACT_KEY_MAX + 1];
	char sha[API_TASK_MAX_ARTIFACTS][65];
	size_t n;
};

/*
 * Reads "artifacts" ({} or null: none; each ident one of the tenant's, w->client_root),
 * "release" (null: none; kept with all four members) and "download_timeout" (60-604800) of a
 * task's body onto w, where present; w's text points into ta. RCS_ERR_INVAL with e naming
 * the field (artifacts.<key> for an ident the tenant lacks; release when the task would
 * have a release without artifacts); a store error otherwise.
 */
enum rcs_err api_task_arts_read(struct api_req *req, json_object *body, struct task_write *w,
				struct api_task_arts *ta, struct jsonu_err *e);
/*
 * From w->artifacts (the record's form) and w->release: w->artifacts_signed, w->arts and
 * w->n_arts, and m->artifacts and m->release for manifest v2 (left NULL without artifacts:
 * manifest v1), all pointing into ta. RCS_ERR_INTERNAL for a stored text that does not
 * parse.
 */
enum rcs_err api_task_arts_derive(struct task_write *w, struct api_task_arts *ta,
				  struct manifest_in *m);
void api_task_arts_free(struct api_task_arts *ta);

#endif

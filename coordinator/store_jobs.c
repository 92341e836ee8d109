/*
 * store_jobs.c - the store's jobs, their history, their notification records and groups. See
 * store.h; store_int.h for what the store's files share.
 */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonu.h"
#include "log.h"

/* ---- jobs ---- */

#define JOB_COLS                                                                                   \
	"j.ident, j.task_version, j.task_ident, j.task_name, j.group_ident, g.name,"               \
	" j.client_root, j.entity_ident, j.comment, j.status, j.created_user, j.created_at,"       \
	" j.update_at, j.scheduled_time, j.response_time, j.ttl, j.response, j.mail_list,"         \
	" j.status_list, j.variables"
#define JOB_FROM "jobs j LEFT JOIN groups g ON g.ident = j.group_ident"

/*
 * The job record as JSON text, built by SQLite: the same members, in the same
 * order and with the same values as row_job() (tests compare the two). Used
 * where the record only goes out as text (events, bulk answers): no json-c
 * objects to build, dump and free per job.
 */
#define JOB_JSON                                                                                   \
	"json_object('ident', j.ident, 'task', json_object('version', j.task_version, 'ident',"    \
	" j.task_ident, 'name', j.task_name), 'group', CASE WHEN j.group_ident IS NULL THEN NULL"  \
	" ELSE json_object('ident', j.group_ident, 'name', g.name) END, 'client_root',"            \
	" j.client_root, 'entity_ident', j.entity_ident, 'target', NULL, 'comment', j.comment,"    \
	" 'status', j.status, 'created_user', j.created_user, 'created_at', j.created_at,"         \
	" 'update_at', j.update_at, 'scheduled_time', j.scheduled_time, 'response_time',"          \
	" j.response_time, 'ttl', j.ttl, 'payload', NULL, 'response', j.response,"                 \
	" 'notification_mail_list', json(j.mail_list), 'notification_status_list',"                \
	" json(j.status_list), 'variables', json(j.variables))"

static json_object *row_job(sqlite3_stmt *s)
{
	json_object *o = json_object_new_object();
	json_object *task = json_object_new_object();
	json_object *group = NULL;

	json_object_object_add(task, "version", store_col_int(s, 1));
	json_object_object_add(task, "ident", store_col_str(s, 2));
	json_object_object_add(task, "name", store_col_str(s, 3));
	if (sqlite3_column_type(s, 4) != SQLITE_NULL) {
		group = json_object_new_object();
		json_object_object_add(group, "ident", store_col_str(s, 4));
		json_object_object_add(group, "name", store_col_str(s, 5));
	}
	json_object_object_add(o, "ident", store_col_str(s, 0));
	json_object_object_add(o, "task", task);
	json_object_object_add(o, "group", group);
	json_object_object_add(o, "client_root", store_col_str(s, 6));
	json_object_object_add(o, "entity_ident", store_col_str(s, 7));
	json_object_object_add(o, "target", NULL);
	json_object_object_add(o, "comment", store_col_str(s, 8));
	json_object_object_add(o, "status", store_col_str(s, 9));
	json_object_object_add(o, "created_user", store_col_str(s, 10));
	json_object_object_add(o, "created_at", store_col_int(s, 11));
	json_object_object_add(o, "update_at", store_col_int(s, 12));
	json_object_object_add(o, "scheduled_time", store_col_int(s, 13));
	json_object_object_add(o, "response_time", store_col_int(s, 14));
	json_object_object_add(o, "ttl", store_col_int(s, 15));
	json_object_object_add(o, "payload", NULL);
	json_object_object_add(o, "response", store_col_str(s, 16));
	json_object_object_add(o, "notification_mail_list", store_col_json(s, 17));
	json_object_object_add(o, "notification_status_list", store_col_json(s, 18));
	json_object_object_add(o, "variables", store_col_json(s, 19));
	return o;
}

static enum rcs_err store_history_add(struct store *st, const char *job, long long n,
				      const char *status, int64_t at, const char *response,
				      long long response_time, long long seq)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = store_prepare(st,
			    "INSERT INTO job_history(job_ident, n, status, at, response,"
			    " response_time, seq) VALUES(?, ?, ?, ?, ?, ?, ?)",
			    &s);
	if (err != RCS_OK)
		return err;
	store_bind_text(s, 1, job);
	sqlite3_bind_int64(s, 2, n);
	store_bind_text(s, 3, status);
	sqlite3_bind_int64(s, 4, at);
	store_bind_text(s, 5, response);
	store_bind_opt_int(s, 6, response_time);
	sqlite3_bind_int64(s, 7, seq);
	err = store_rc(st->db, sqlite3_step(s), "history add");
	store_release(st, s);
	return err;
}

/*
 * Records the notifications a status change triggers, in the caller's
 * transaction: the task's addresses for the task's statuses, the job's
 * addresses for the job's statuses (seed rules 1-3); an address on both
 * levels gets one row.
 */
static enum rcs_err store_notify_record(struct store *st, const char *job, const char *status,
					int64_t now)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = store_prepare(
	    st,
	    "INSERT OR IGNORE INTO notifications(job_ident, client_root, status,"
	    " address, state, created_at, next_at)"
	    " SELECT j.ident, j.client_root, ?2, a.value, 'queued', ?3, ?3"
	    " FROM jobs j, json_each(j.task_mail_list) a WHERE j.ident = ?1 AND"
	    " EXISTS (SELECT 1 FROM json_each(j.task_status_list) x WHERE x.value = ?2)"
	    " UNION"
	    " SELECT j.ident, j.client_root, ?2, a.value, 'queued', ?3, ?3"
	    " FROM jobs j, json_each(j.mail_list) a WHERE j.ident = ?1 AND"
	    " EXISTS (SELECT 1 FROM json_each(j.status_list) x WHERE x.value = ?2)",
	    &s);
	if (err != RCS_OK)
		return err;
	store_bind_text(s, 1, job);
	store_bind_text(s, 2, status);
	sqlite3_bind_int64(s, 3, now);
	err = store_rc(st->db, sqlite3_step(s), "notification record");
	store_release(st, s);
	return err;
}

enum rcs_err store_jobs_create(struct store *st, const struct job_batch *b)
{
	sqlite3_stmt *ins = NULL, *hist = NULL;
	const char *vars = jsonu_dump(b->variables, NULL);
	const char *mails = b->mail_list ? jsonu_dump(b->mail_list, NULL) : "[]";
	const char *stats = b->status_list ? jsonu_dump(b->status_list, NULL) : "[]";
	const char *tmails = b->task_mail_list ? jsonu_dump(b->task_mail_list, NULL) : "[]";
	const char *tstats = b->task_status_list ? jsonu_dump(b->task_status_list, NULL) : "[]";
	bool notify = (strcmp(mails, "[]") != 0 && strcmp(stats, "[]") != 0) ||
		      (strcmp(tmails, "[]") != 0 && strcmp(tstats, "[]") != 0);
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	if (b->group_ident) {
		char ts[32];
		snprintf(ts, sizeof(ts), "%lld", (long long)b->now);
		err = store_write(
		    st,
		    "INSERT INTO groups(ident, client_root, name, task_ident, created_user,"
		    " created_at) VALUES(?, ?, ?, ?, ?, ?)",
		    NULL, 6, b->group_ident, b->client_root, b->group_name, b->task_ident,
		    b->created_user, ts);
		if (err != RCS_OK)
			goto out;
	}
	err = store_prepare(
	    st,
	    "INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name,"
	    " group_ident, entity_ident, status, comment, created_user, created_at,"
	    " update_at, scheduled_time, ttl, variables, mail_list, status_list,"
	    " task_mail_list, task_status_list, expires_at, n_history)"
	    " VALUES(?,?,?,?,?,?,?,'pending',?,?,?,?,?,?,?,?,?,?,?,?,2)",
	    &ins);
	if (err != RCS_OK)
		goto out;
	err = store_prepare(st,
			    "INSERT INTO job_history(job_ident, n, status, at) VALUES"
			    " (?1, 1, 'initial', ?2), (?1, 2, 'pending', ?2)",
			    &hist);
	if (err != RCS_OK)
		goto out;
	/* the constant parameters are bound once */
	store_bind_text(ins, 2, b->client_root);
	store_bind_text(ins, 3, b->task_ident);
	sqlite3_bind_int64(ins, 4, b->task_version);
	store_bind_text(ins, 5, b->task_name);
	store_bind_text(ins, 6, b->group_ident);
	store_bind_text(ins, 8, b->comment);
	store_bind_text(ins, 9, b->created_user);
	sqlite3_bind_int64(ins, 10, b->now);
	sqlite3_bind_int64(ins, 11, b->now);
	store_bind_opt_int(ins, 12, b->scheduled_time);
	store_bind_opt_int(ins, 13, b->ttl);
	sqlite3_bind_text(ins, 14, vars, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 15, mails, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 16, stats, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 17, tmails, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 18, tstats, -1, SQLITE_STATIC);
	store_bind_opt_int(ins, 19, store_job_expiry(b->now, b->scheduled_time, b->ttl));
	sqlite3_bind_int64(hist, 2, b->now);
	for (size_t i = 0; i < b->n; i++) {
		sqlite3_bind_text(ins, 1, b->jobs[i].ident, -1, SQLITE_STATIC);
		sqlite3_bind_text(ins, 7, b->jobs[i].entity_ident, -1, SQLITE_STATIC);
		err = store_rc(st->db, sqlite3_step(ins), "job insert");
		sqlite3_reset(ins);
		if (err != RCS_OK)
			goto out;
		sqlite3_bind_text(hist, 1, b->jobs[i].ident, -1, SQLITE_STATIC);
		err = store_rc(st->db, sqlite3_step(hist), "job history insert");
		sqlite3_reset(hist);
		if (err == RCS_OK && notify)
			err = store_notify_record(st, b->jobs[i].ident, "initial", b->now);
		if (err == RCS_OK && notify)
			err = store_notify_record(st, b->jobs[i].ident, "pending", b->now);
		if (err != RCS_OK)
			goto out;
	}
out:
	store_release(st, ins);
	store_release(st, hist);
	return store_sp_end(st, err);
}

/* A TEXT column, "" for NULL. */
static const char *rec_text(sqlite3_stmt *s, int i)
{
	const char *t = store_col_text(s, i);

	return t ? t : "";
}

enum rcs_err store_job_rec_get(struct store *st, const char *ident, struct job_rec *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_prepare(st,
			    "SELECT ident, client_root, entity_ident, task_ident, task_version,"
			    " task_name, status, variables, created_at, scheduled_time, ttl"
			    " FROM jobs WHERE ident = ?1",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, ident);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "job");
		goto out;
	}
	snprintf(out->ident, sizeof(out->ident), "%s", rec_text(s, 0));
	snprintf(out->client_root, sizeof(out->client_root), "%s", rec_text(s, 1));
	snprintf(out->entity_ident, sizeof(out->entity_ident), "%s", rec_text(s, 2));
	snprintf(out->task_ident, sizeof(out->task_ident), "%s", rec_text(s, 3));
	out->task_version = sqlite3_column_int64(s, 4);
	out->task_name = strdup(rec_text(s, 5));
	if (!status_parse(rec_text(s, 6), &out->status))
		out->status = JS_INITIAL;
	out->variables = store_col_json(s, 7);
	out->created_at = sqlite3_column_int64(s, 8);
	out->scheduled_time = sqlite3_column_int64(s, 9); /* NULL reads 0 */
	out->ttl = sqlite3_column_int64(s, 10);
	if (out->task_name == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	err = RCS_OK;
out:
	store_release(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_job_rec_free(out);
	return err;
}

void store_job_rec_free(struct job_rec *r)
{
	free(r->task_name);
	r->task_name = NULL;
	json_object_put(r->variables);
	r->variables = NULL;
}

enum rcs_err store_job_get(struct store *st, const char *client_root, const char *ident,
			   json_object **out)
{
	if (client_root == NULL)
		return store_get_row(st, "SELECT " JOB_COLS " FROM " JOB_FROM " WHERE j.ident = ?",
				     ident, NULL, NULL, row_job, out);
	return store_get_row(
	    st, "SELECT " JOB_COLS " FROM " JOB_FROM " WHERE j.ident = ? AND j.client_root = ?",
	    ident, client_root, NULL, row_job, out);
}

enum rcs_err store_job_json(struct store *st, const char *ident, char client_root[UUID_STR_LEN],
			    struct buf *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	store_lock(st);
	err = store_prepare(
	    st, "SELECT j.client_root, " JOB_JSON " FROM " JOB_FROM " WHERE j.ident = ?", &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, ident);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "job json");
		goto out;
	}
	snprintf(client_root, UUID_STR_LEN, "%s", store_col_text(s, 0) ? store_col_text(s, 0) : "");
	err = buf_append(out, sqlite3_column_text(s, 1), (size_t)sqlite3_column_bytes(s, 1));
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

/* One job's record as SQLite builds it (JOB_JSON), appended to out. */
static enum rcs_err store_job_json_step(struct store *st, sqlite3_stmt *s, const char *ident,
					struct buf *out)
{
	enum rcs_err err;
	int rc;

	sqlite3_bind_text(s, 1, ident, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		err =
		    buf_append(out, sqlite3_column_text(s, 0), (size_t)sqlite3_column_bytes(s, 0));
	else
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "jobs batch");
	sqlite3_reset(s);
	return err;
}

/*
 * Where a record made from the first job's can be patched for job i: both
 * idents are 36 characters, the job's at offset 10 ({"ident":"...), the
 * device's after the first "entity_ident":" (the only keys before it are
 * the task's and the group's; a quote inside a string value is escaped).
 * Returns that offset, or 0 when the record isn't such a template.
 */
static size_t store_job_template(const struct buf *rec, const struct job_new *first)
{
	static const char head[] = "{\"ident\":\"", key[] = "\"entity_ident\":\"";
	const char *at;

	if (rec->len < sizeof(head) - 1 + 2 * 36 ||
	    memcmp(rec->data, head, sizeof(head) - 1) != 0 ||
	    memcmp(rec->data + sizeof(head) - 1, first->ident, 36) != 0 ||
	    strlen(first->entity_ident) != 36)
		return 0;
	at = strstr(rec->data, key);
	if (at == NULL || (size_t)(at - rec->data) + sizeof(key) - 1 + 36 > rec->len ||
	    memcmp(at + sizeof(key) - 1, first->entity_ident, 36) != 0)
		return 0;
	return (size_t)(at - rec->data) + sizeof(key) - 1;
}

/*
 * The jobs of a batch share every value but their ident and device, so the
 * record SQLite builds for the first job is the others' template: at 10,000
 * jobs, building each record in SQL was a fifth of the request. The last
 * job's record is built in SQL as well and must equal its copy; if anything
 * differs, every record is built in SQL.
 */
enum rcs_err store_jobs_json_batch(struct store *st, const struct job_batch *b, struct buf *out)
{
	static const size_t ident_at = 10;
	struct buf tpl, last;
	sqlite3_stmt *s = NULL;
	size_t base = out->len, entity_at = 0;
	bool differs = false;
	enum rcs_err err;

	buf_init(&tpl, out->max);
	buf_init(&last, out->max);
	store_lock(st);
	err = store_prepare(st, "SELECT " JOB_JSON " FROM " JOB_FROM " WHERE j.ident = ?", &s);
	if (err == RCS_OK && b->n > 2)
		err = store_job_json_step(st, s, b->jobs[0].ident, &tpl);
	if (err == RCS_OK && b->n > 2)
		entity_at = store_job_template(&tpl, &b->jobs[0]);
	if (err == RCS_OK && entity_at > 0)
		err = store_job_json_step(st, s, b->jobs[b->n - 1].ident, &last);
	for (size_t i = 0; err == RCS_OK && entity_at > 0 && i < b->n; i++) {
		size_t at = out->len + (i > 0);

		if (strlen(b->jobs[i].entity_ident) != 36) {
			entity_at = 0;
			break;
		}
		err = i > 0 ? buf_append(out, ",", 1) : RCS_OK;
		if (err == RCS_OK)
			err = buf_append(out, tpl.data, tpl.len);
		if (err != RCS_OK)
			break;
		memcpy(out->data + at + ident_at, b->jobs[i].ident, 36);
		memcpy(out->data + at + entity_at, b->jobs[i].entity_ident, 36);
		differs = i + 1 == b->n && (out->len - at != last.len ||
					    memcmp(out->data + at, last.data, last.len) != 0);
		if (differs) {
			log_warnx("the records of a bulk send differ in more than their idents");
			entity_at = 0;
		}
	}
	if (err == RCS_OK && entity_at == 0) {
		/* one record at a time, each built in SQL */
		out->len = base;
		if (out->data)
			out->data[base] = '\0';
		for (size_t i = 0; err == RCS_OK && i < b->n; i++) {
			err = i > 0 ? buf_append(out, ",", 1) : RCS_OK;
			if (err == RCS_OK)
				err = store_job_json_step(st, s, b->jobs[i].ident, out);
		}
	}
	store_release(st, s);
	store_unlock(st);
	buf_free(&tpl);
	buf_free(&last);
	return err;
}

enum rcs_err store_job_history(struct store *st, const char *client_root, const char *ident,
			       const struct store_page *pg, json_object **out)
{
	json_object *job = NULL, *items = NULL;
	sqlite3_stmt *s = NULL;
	long long total = 0;
	enum rcs_err err;
	int rc;

	*out = NULL;
	store_lock(st);
	err = store_job_get(st, client_root, ident, &job);
	if (err != RCS_OK)
		goto out;
	err = store_prepare(st, "SELECT count(*) FROM job_history WHERE job_ident = ?", &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, ident);
	if (sqlite3_step(s) == SQLITE_ROW)
		total = sqlite3_column_int64(s, 0);
	store_release(st, s);
	s = NULL;
	/* newest first unless sort=update_at (oldest first); n is the order of the changes */
	err = store_prepare(st,
			    pg->desc ? "SELECT status, at, response, response_time FROM job_history"
				       " WHERE job_ident = ? ORDER BY n DESC LIMIT ? OFFSET ?"
				     : "SELECT status, at, response, response_time FROM job_history"
				       " WHERE job_ident = ? ORDER BY n ASC LIMIT ? OFFSET ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, ident);
	sqlite3_bind_int64(s, 2, pg->per_page);
	sqlite3_bind_int64(s, 3, (pg->page - 1) * pg->per_page);
	items = json_object_new_array();
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		/* a snapshot: the job record with the status, time and response it had */
		json_object *snap = NULL;
		json_object_deep_copy(job, &snap, NULL);
		json_object_object_add(snap, "status", store_col_str(s, 0));
		json_object_object_add(snap, "update_at", store_col_int(s, 1));
		json_object_object_add(snap, "response", store_col_str(s, 2));
		json_object_object_add(snap, "response_time", store_col_int(s, 3));
		json_object_array_add(items, snap);
	}
	err = store_rc(st->db, rc, "history");
	if (err != RCS_OK)
		goto out;
	*out = store_page_wrap(pg, total, items);
	items = NULL;
out:
	store_release(st, s);
	store_unlock(st);
	if (job)
		json_object_put(job);
	if (items)
		json_object_put(items);
	return err;
}

enum rcs_err store_jobs_list(struct store *st, const char *client_root, const struct job_filter *f,
			     const struct store_page *pg, struct buf *out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;

	q.where[0] = '\0';
	store_qb_add(&q, "j.client_root = ?", client_root);
	if (f->group_ident)
		store_qb_add(&q, "j.group_ident = ?", f->group_ident);
	if (f->task_ident)
		store_qb_add(&q, "j.task_ident = ?", f->task_ident);
	if (f->entity_ident)
		store_qb_add(&q, "j.entity_ident = ?", f->entity_ident);
	if (f->status && strcmp(f->status, "running") == 0)
		store_qb_add(&q, "j.status IN ('edge_started', 'edge_running')", NULL);
	else if (f->status)
		store_qb_add(&q, "j.status = ?", f->status);
	/* the jobs of a task the user may not see (not public, someone else's) are left out */
	if (f->only_visible_to)
		store_qb_add(
		    &q,
		    "j.task_ident NOT IN (SELECT t.ident FROM tasks t WHERE t.client_root ="
		    " j.client_root AND " STORE_TASK_HIDDEN("t", "?") ")",
		    f->only_visible_to);
	store_qb_list_opts(&q, pg, "j.", "ident", &o);
	return store_list_text(st, JOB_JSON, JOB_FROM, &q, o.order, pg, out);
}

enum rcs_err store_job_visible(struct store *st, const char *client_root, const char *ident,
			       const char *user)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	store_lock(st);
	err = store_prepare(
	    st,
	    "SELECT t.ident IS NULL OR NOT " STORE_TASK_HIDDEN("t", "?3") " FROM jobs j"
	    " LEFT JOIN tasks t ON t.ident = j.task_ident"
	    " WHERE j.ident = ?1 AND j.client_root = ?2",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, ident);
	store_bind_text(s, 2, client_root);
	store_bind_text(s, 3, user);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		err = sqlite3_column_int(s, 0) ? RCS_OK : RCS_ERR_NOTFOUND;
	else
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "job visible");
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_job_move(struct store *st, const struct job_move *m, enum store_move *result)
{
	sqlite3_stmt *s = NULL;
	enum job_status cur = JS_INITIAL;
	long long last_seq = 0, n_history = 0;
	char owner_root[UUID_STR_LEN], owner_dev[UUID_STR_LEN];
	bool notify = false;
	enum rcs_err err;
	int rc;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_prepare(st,
			    "SELECT status, last_seq, n_history, client_root, entity_ident,"
			    " (mail_list != '[]' AND status_list != '[]') OR"
			    " (task_mail_list != '[]' AND task_status_list != '[]') FROM jobs"
			    " WHERE ident = ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, m->ident);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "job move");
		goto out;
	}
	if (!status_parse(store_col_text(s, 0), &cur)) {
		err = RCS_ERR_INTERNAL;
		goto out;
	}
	if (m->prev)
		*m->prev = cur;
	last_seq = sqlite3_column_int64(s, 1);
	n_history = sqlite3_column_int64(s, 2);
	snprintf(owner_root, sizeof(owner_root), "%s", store_col_text(s, 3));
	snprintf(owner_dev, sizeof(owner_dev), "%s", store_col_text(s, 4));
	notify = sqlite3_column_int(s, 5) != 0; /* any notification list at all */
	store_release(st, s);
	s = NULL;
	if ((m->client_root && strcmp(m->client_root, owner_root) != 0) ||
	    (m->entity_ident && strcmp(m->entity_ident, owner_dev) != 0)) {
		err = RCS_ERR_NOTFOUND;
		goto out;
	}
	if (m->seq > 0 && m->seq <= last_seq) {
		*result = STORE_MOVE_DUPLICATE;
		goto out;
	}
	if (status_is_terminal(cur)) {
		if (m->seq > 0 && (cur == JS_CANCELLED || cur == JS_EXPIRED)) {
			/* what the device said after the coordinator ended the job */
			err = store_history_add(st, m->ident, n_history + 1, status_name(m->to),
						m->now, m->response,
						m->set_response_time ? m->now : 0, m->seq);
			if (err == RCS_OK) {
				char seq[32];
				snprintf(seq, sizeof(seq), "%lld", m->seq);
				err = store_write(st,
						  "UPDATE jobs SET n_history = n_history + 1,"
						  " last_seq = CAST(? AS INTEGER) WHERE ident = ?",
						  NULL, 2, seq, m->ident);
			}
			*result = STORE_MOVE_KEPT;
		} else {
			*result = m->seq > 0 ? STORE_MOVE_DUPLICATE : STORE_MOVE_TERMINAL;
		}
		goto out;
	}
	if (!status_can_move(cur, m->to)) {
		*result = STORE_MOVE_DUPLICATE;
		goto out;
	}
	err = store_prepare(st,
			    "UPDATE jobs SET status = ?1, update_at = ?2,"
			    " response = CASE WHEN ?3 IS NULL AND NOT ?7 THEN response ELSE ?3 END,"
			    " response_time = CASE WHEN ?4 THEN ?2 ELSE response_time END,"
			    " last_seq = max(last_seq, ?5), n_history = n_history + 1,"
			    " sent_at = CASE WHEN ?8 THEN ?2 ELSE sent_at END, sends = sends + ?8"
			    " WHERE ident = ?6",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, status_name(m->to));
	sqlite3_bind_int64(s, 2, m->now);
	store_bind_text(s, 3, m->response);
	sqlite3_bind_int(s, 4, m->set_response_time);
	sqlite3_bind_int64(s, 5, m->seq);
	store_bind_text(s, 6, m->ident);
	sqlite3_bind_int(s, 7, m->replace_response);
	sqlite3_bind_int(s, 8, m->mark_sent);
	err = store_rc(st->db, sqlite3_step(s), "job move");
	if (err != RCS_OK)
		goto out;
	store_release(st, s);
	s = NULL;
	/* the history item keeps the response the job had at that moment */
	err = store_prepare(st,
			    "INSERT INTO job_history(job_ident, n, status, at, response,"
			    " response_time, seq) SELECT ident, n_history, status, update_at,"
			    " response, response_time, ? FROM jobs WHERE ident = ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, m->seq);
	store_bind_text(s, 2, m->ident);
	err = store_rc(st->db, sqlite3_step(s), "history add");
	if (err == RCS_OK)
		err =
		    notify ? store_notify_record(st, m->ident, status_name(m->to), m->now) : RCS_OK;
	*result = STORE_MOVE_APPLIED;
out:
	store_release(st, s);
	return store_sp_end(st, err);
}

/* ---- notifications ---- */

static const struct store_col_map notification_cols[] = {
    {"address", STORE_COL_STR},    {"status", STORE_COL_STR},     {"state", STORE_COL_STR},
    {"attempts", STORE_COL_INT},   {"created_at", STORE_COL_INT}, {"sent_at", STORE_COL_INT},
    {"last_error", STORE_COL_STR}, {NULL, STORE_COL_STR},
};

static json_object *row_notification(sqlite3_stmt *s)
{
	return store_row_map(s, notification_cols);
}

enum rcs_err store_job_notifications(struct store *st, const char *client_root, const char *ident,
				     const struct store_page *pg, json_object **out)
{
	struct store_qb q = {.n = 0};
	json_object *job = NULL;
	enum rcs_err err;

	err = store_job_get(st, client_root, ident, &job);
	json_object_put(job);
	if (err != RCS_OK)
		return err;
	q.where[0] = '\0';
	store_qb_add(&q, "job_ident = ?", ident);
	return store_list(st, "address, status, state, attempts, created_at, sent_at, last_error",
			  "notifications", &q, "id", pg, row_notification, out);
}

/* ---- groups ---- */

#define GROUP_COLS "ident, name, created_user, created_at, task_ident"

static const struct store_col_map group_cols[] = {
    {"ident", STORE_COL_STR},      {"name", STORE_COL_STR},       {"created_user", STORE_COL_STR},
    {"created_at", STORE_COL_INT}, {"task_ident", STORE_COL_STR}, {NULL, STORE_COL_STR},
};

static json_object *row_group(sqlite3_stmt *s)
{
	return store_row_map(s, group_cols);
}

/* A group of a task the user may not see (not public, someone else's) is left out, like
 * the task and its jobs. */
#define GROUP_HIDDEN_FROM(user_param)                                                              \
	"EXISTS (SELECT 1 FROM tasks t WHERE t.ident = groups.task_ident"                          \
	" AND t.client_root = groups.client_root AND " STORE_TASK_HIDDEN("t", user_param) ")"

enum rcs_err store_group_get(struct store *st, const char *client_root, const char *ident,
			     const char *only_visible_to, json_object **out)
{
	json_object *g = NULL, *statuses = NULL;
	sqlite3_stmt *s = NULL;
	long long total = 0;
	enum rcs_err err;
	int rc;

	*out = NULL;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT " GROUP_COLS " FROM groups WHERE ident = ?1 AND client_root = ?2"
			  " AND (?3 IS NULL OR NOT " GROUP_HIDDEN_FROM("?3") ")",
			  &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, ident);
	store_bind_text(s, 2, client_root);
	store_bind_text(s, 3, only_visible_to);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		g = row_group(s);
	else
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "group get");
	store_release(st, s);
	s = NULL;
	if (err != RCS_OK)
		goto out;
	err =
	    store_prepare(st,
			  "SELECT status, count(*) FROM jobs WHERE group_ident = ? GROUP BY status"
			  " ORDER BY status",
			  &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, ident);
	statuses = json_object_new_object();
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		long long n = sqlite3_column_int64(s, 1);
		total += n;
		json_object_object_add(statuses, store_col_text(s, 0), json_object_new_int64(n));
	}
	err = store_rc(st->db, rc, "group statuses");
	if (err != RCS_OK)
		goto out;
	json_object_object_add(g, "total", json_object_new_int64(total));
	json_object_object_add(g, "statuses", statuses);
	statuses = NULL;
	*out = g;
	g = NULL;
out:
	store_release(st, s);
	store_unlock(st);
	if (g)
		json_object_put(g);
	if (statuses)
		json_object_put(statuses);
	return err;
}

enum rcs_err store_groups_list(struct store *st, const char *client_root,
			       const char *only_visible_to, const struct store_page *pg,
			       json_object **out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;

	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	if (only_visible_to)
		store_qb_add(&q, "NOT " GROUP_HIDDEN_FROM("?"), only_visible_to);
	store_qb_list_opts(&q, pg, "", "ident", &o);
	return store_list(st, GROUP_COLS, "groups", &q, o.order, pg, row_group, out);
}

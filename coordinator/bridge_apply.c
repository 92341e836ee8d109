/*
 * bridge_apply.c - how the MQTT bridge applies what devices report (bridge_int.h): status
 * reports move their jobs (lifecycle_move), state messages record presence, tags and the
 * agent's version; a device back online gets its jobs (bridge_catch_up). paho's threads
 * queue the messages (bridge_apply_queue, under the lock); the worker applies them in
 * batches, BRIDGE_BATCH a transaction. On PostgreSQL the reports whose jobs another
 * coordinator's transaction holds, or whose job's report before them is not applied yet,
 * wait, in order, for the worker's next round (held).
 */
#include "bridge_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "status.h"
#include "store_devices.h"
#include "store_queues.h"

#define BRIDGE_BATCH 1000 /* inbound messages per transaction */
/* bytes of queued inbound messages (their payloads and records) past which more are dropped */
#define BRIDGE_INBOUND_MAX_BYTES (512 * 1024 * 1024)
#define BRIDGE_DROP_WARN_MS      10000 /* the dropped messages' warning, at most this often */
/* queued inbound messages from which the reports no longer wait for the event feed */
#define BRIDGE_INBOUND_PRESSED 100000
#define BRIDGE_APPLY_TRIES     5    /* a device message's write, broken off by the database */
#define BRIDGE_HELD_RETRY_MS   10   /* reports held elsewhere: the next round at the latest */
#define BRIDGE_HELD_MAX_MS     1000 /* ... and after this, one by one, waiting for the rows */

struct in_msg {
	struct in_msg *next;
	int64_t held_at; /* when it was first held (ms, 0: never): its job's row held
			  * elsewhere, or its job's report before it not applied yet */
	bool held;       /* found so in this round: kept for the next */
	struct proto_topic topic;
	size_t len;
	char payload[];
};

struct bridge_apply {
	const struct bridge_link *link;
	struct bridge_send *send; /* a device's catch-up, a cancel told again */
	pthread_mutex_t lock;
	struct in_msg *head, *tail;
	size_t n;
	size_t bytes, max_bytes;    /* queued (bridge_apply_msg_bytes) and the ceiling */
	unsigned long long dropped; /* past the ceiling, since the last warning */
	int64_t warned_ms;          /* that warning's time (bridge_now_ms; 0: none yet) */
	/* the worker's: reports whose jobs another coordinator's transaction held, in order,
	 * applied again before any message queued since (docs/coordinator.md, "Reports as
	 * sets"); n_held is also read under the lock */
	struct in_msg *held, *held_tail;
	size_t n_held;
};

struct bridge_apply *bridge_apply_new(const struct bridge_link *l, struct bridge_send *s)
{
	struct bridge_apply *a = calloc(1, sizeof(*a));

	if (a == NULL)
		return NULL;
	a->link = l;
	a->send = s;
	a->max_bytes = BRIDGE_INBOUND_MAX_BYTES;
	pthread_mutex_init(&a->lock, NULL);
	return a;
}

void bridge_apply_limit(struct bridge_apply *a, size_t max_bytes)
{
	pthread_mutex_lock(&a->lock);
	a->max_bytes = max_bytes;
	pthread_mutex_unlock(&a->lock);
}

static void bridge_msgs_free(struct in_msg *m)
{
	while (m) {
		struct in_msg *next = m->next;
		free(m);
		m = next;
	}
}

void bridge_apply_free(struct bridge_apply *a)
{
	if (a == NULL)
		return;
	bridge_msgs_free(a->head);
	bridge_msgs_free(a->held);
	pthread_mutex_destroy(&a->lock);
	free(a);
}

/* ---- the queue ---- */

/* What a queued message takes: its record and payload. */
static size_t bridge_apply_msg_bytes(size_t len)
{
	return sizeof(struct in_msg) + len + 1;
}

/* Past the ceiling: the message is dropped, and said so at most every BRIDGE_DROP_WARN_MS.
 * Under a->lock. */
static void bridge_apply_drop(struct bridge_apply *a, const struct proto_topic *t)
{
	int64_t now = bridge_now_ms();

	a->dropped++;
	if (a->warned_ms != 0 && now - a->warned_ms < BRIDGE_DROP_WARN_MS)
		return;
	log_warnx("%llu device message(s) dropped, the last on job %s of device %s: %zu bytes"
		  " of them wait to be applied already; the re-send of jobs without news"
		  " (resend_after) asks their devices again",
		  a->dropped, t->job[0] ? t->job : "-", t->entity_ident, a->bytes);
	a->dropped = 0;
	a->warned_ms = now;
}

bool bridge_apply_queue(struct bridge_apply *a, const struct proto_topic *t, const void *payload,
			size_t len)
{
	size_t need = bridge_apply_msg_bytes(len);
	struct in_msg *m;
	bool full;

	/* never refused: paho acknowledged the message to the broker as it read it and reads on
	 * whatever this answers, so a message refused here would wait in paho's own list,
	 * which hands one back only as the next packet arrives on the connection (after a
	 * send's last report, until the re-send of jobs without news). Past the ceiling it is
	 * dropped instead, and that re-send asks its device again (docs/coordinator.md, "Bulk
	 * sends") */
	pthread_mutex_lock(&a->lock);
	full = a->bytes + need > a->max_bytes;
	if (full)
		bridge_apply_drop(a, t);
	pthread_mutex_unlock(&a->lock);
	if (full)
		return true;
	m = malloc(need);
	if (m == NULL)
		return false;
	m->next = NULL;
	m->held_at = 0;
	m->held = false;
	m->topic = *t;
	m->len = len;
	memcpy(m->payload, payload, len);
	m->payload[len] = '\0';
	pthread_mutex_lock(&a->lock);
	if (a->tail)
		a->tail->next = m;
	else
		a->head = m;
	a->tail = m;
	a->n++;
	a->bytes += need;
	pthread_mutex_unlock(&a->lock);
	if (t->kind == PROTO_STATUS)
		metrics_mqtt_report_in();
	bridge_kick(a->link);
	return true;
}

/* The reports held in the last round, then up to BRIDGE_BATCH messages in all off the queue,
 * in order (NULL: none). */
static struct in_msg *bridge_apply_take(struct bridge_apply *a)
{
	struct in_msg *batch, *last;
	size_t n = 0, room;

	pthread_mutex_lock(&a->lock);
	room = a->n_held < BRIDGE_BATCH ? BRIDGE_BATCH - a->n_held : 0;
	batch = room > 0 ? a->head : NULL;
	for (last = batch; last && ++n < room; last = last->next)
		;
	if (last) {
		a->head = last->next;
		last->next = NULL;
	} else if (batch) {
		a->head = NULL;
	}
	if (a->head == NULL)
		a->tail = NULL;
	a->n -= batch ? n : 0;
	for (struct in_msg *m = batch; m; m = m->next)
		a->bytes -= bridge_apply_msg_bytes(m->len);
	if (a->held != NULL) {
		a->held_tail->next = batch;
		batch = a->held;
		a->held = a->held_tail = NULL;
		a->n_held = 0;
	}
	pthread_mutex_unlock(&a->lock);
	return batch;
}

/* Keeps the messages of batch held in this round for the next, in order; frees the rest. */
static void bridge_apply_keep_held(struct bridge_apply *a, struct in_msg *batch)
{
	int64_t now = bridge_now_ms();
	size_t n = 0;

	while (batch) {
		struct in_msg *m = batch;

		batch = m->next;
		if (!m->held) {
			free(m);
			continue;
		}
		m->held = false;
		m->next = NULL;
		if (m->held_at == 0)
			m->held_at = now;
		if (a->held_tail)
			a->held_tail->next = m;
		else
			a->held = m;
		a->held_tail = m;
		n++;
	}
	pthread_mutex_lock(&a->lock);
	a->n_held = n;
	pthread_mutex_unlock(&a->lock);
	if (n > 0)
		log_debug("%zu device reports wait for job rows another coordinator holds, or"
			  " for their jobs' reports before them",
			  n);
}

size_t bridge_apply_waiting(struct bridge_apply *a)
{
	size_t n;

	pthread_mutex_lock(&a->lock);
	n = a->n + a->n_held;
	pthread_mutex_unlock(&a->lock);
	return n;
}

size_t bridge_apply_queued(struct bridge_apply *a)
{
	size_t n;

	pthread_mutex_lock(&a->lock);
	n = a->n;
	pthread_mutex_unlock(&a->lock);
	return n;
}

bool bridge_apply_pressed(struct bridge_apply *a)
{
	return bridge_apply_queued(a) >= BRIDGE_INBOUND_PRESSED;
}

bool bridge_apply_more(struct bridge_apply *a)
{
	bool more;

	pthread_mutex_lock(&a->lock);
	more = a->n >= BRIDGE_BATCH && a->n_held == 0;
	pthread_mutex_unlock(&a->lock);
	return more;
}

int bridge_apply_wait_ms(struct bridge_apply *a)
{
	size_t n;

	pthread_mutex_lock(&a->lock);
	n = a->n_held;
	pthread_mutex_unlock(&a->lock);
	return n > 0 ? BRIDGE_HELD_RETRY_MS : -1;
}

/* ---- one message ---- */

/*
 * A device message's write that PostgreSQL broke off (a deadlock with another coordinator
 * applying the same job's reports, a lock wait cut short by lock_timeout) rolled back
 * whole: it is applied again, a few times, rather than dropped, as the broker has its
 * acknowledgement already. True when the caller should try again (after a pause of
 * 10 ms, doubled at each attempt).
 */
static bool bridge_again(enum rcs_err err, int attempt, const char *what, const char *ident)
{
	struct timespec pause = {0, (long)(10 * 1000000L) << attempt};

	if (err != RCS_ERR_BUSY || attempt >= BRIDGE_APPLY_TRIES - 1)
		return false;
	log_info("%s %s: the database broke the change off (busy): applying it again", what, ident);
	nanosleep(&pause, NULL);
	return true;
}

/* Decodes a status report into *r and the move it asks for (*mv, pointing into *r and m):
 * false when it is dropped (logged; *r freed). */
static bool bridge_report_move(const struct in_msg *m, struct proto_report *r, struct job_move *mv)
{
	struct jsonu_err e;

	if (proto_report_decode(m->payload, m->len, r, &e) != RCS_OK) {
		log_warnx("dropped a status report for job %s from %s: %s%s%s", m->topic.job,
			  m->topic.entity_ident, e.field[0] ? e.field : "", e.field[0] ? ": " : "",
			  e.message);
		return false;
	}
	if (strcmp(r->job, m->topic.job) != 0) {
		log_warnx("dropped a status report from %s: job %s in the payload, %s in the topic",
			  m->topic.entity_ident, r->job, m->topic.job);
		proto_report_free(r);
		return false;
	}
	memset(mv, 0, sizeof(*mv));
	mv->client_root = m->topic.client_root;
	mv->entity_ident = m->topic.entity_ident;
	mv->ident = r->job;
	mv->to = r->status;
	mv->response = r->response;
	mv->replace_response = true;
	mv->set_response_time = status_is_terminal(r->status);
	mv->seq = r->seq;
	mv->error_code = r->error;          /* the cause of an edge_error (docs/mqtt.md) */
	mv->has_progress = r->has_progress; /* the downloads' progress (edge_running) */
	mv->progress_done = r->progress_done;
	mv->progress_total = r->progress_total;
	mv->phase = r->phase;   /* the phase it runs in, and on "rebooting" the seconds the */
	mv->within = r->within; /* device has to come back (docs/mqtt.md) */
	mv->now = (int64_t)time(NULL);
	return true;
}

/* What follows a report's move for the transport: a cancel told again to a device that
 * works on a job cancelled meanwhile, and the log. */
static void bridge_report_after(struct bridge_apply *a, const struct in_msg *m,
				const struct job_move *mv, enum rcs_err err, enum store_move res)
{
	if (err == RCS_OK && res == STORE_MOVE_KEPT && !status_is_terminal(mv->to)) {
		struct job_rec job;
		/* not after reboot_timeout: the device's reports are only kept (docs/mqtt.md) */
		if (store_job_rec_get(a->link->st, mv->ident, &job) == RCS_OK) {
			if (job.status != JS_EDGE_ERROR)
				bridge_send_cancel(a->send, &job);
			store_job_rec_free(&job);
		}
	}
	if (err == RCS_ERR_NOTFOUND)
		log_warnx(
		    "dropped a status report from %s/%s for job %s: no such job of that device",
		    m->topic.client_root, m->topic.entity_ident, mv->ident);
	else if (err != RCS_OK)
		log_warnx("job %s: report not applied: %s", mv->ident, rcs_strerror(err));
	else
		log_debug("job %s: %s (seq %lld) %s", mv->ident, status_name(mv->to), mv->seq,
			  res == STORE_MOVE_APPLIED ? "applied" : "ignored");
}

/*
 * Applies one status report. in_batch: inside the batch's transaction without a savepoint
 * of its own (lifecycle_move_in_tx); returns false when that failed after writing, and the
 * batch's transaction must be rolled back and its messages applied again one by one.
 */
static bool bridge_apply_report(struct bridge_apply *a, const struct in_msg *m, bool in_batch)
{
	struct proto_report r;
	struct job_move mv;
	enum store_move res = STORE_MOVE_DUPLICATE;
	enum rcs_err err;

	if (!bridge_report_move(m, &r, &mv))
		return true;
	if (in_batch) {
		err = lifecycle_move_in_tx(a->link->lc, &mv, &res, NULL);
		if (err != RCS_OK && err != RCS_ERR_NOTFOUND) {
			proto_report_free(&r); /* the batch again, one by one: that reports it */
			return false;
		}
	} else {
		for (int attempt = 0;; attempt++) {
			err = lifecycle_move(a->link->lc, &mv, &res, NULL);
			if (!bridge_again(err, attempt, "job", r.job))
				break;
		}
	}
	bridge_report_after(a, m, &mv, err, res);
	proto_report_free(&r);
	return true;
}

/* Returns true when the device came online (its jobs are then sent). */
static bool bridge_apply_state(struct bridge_apply *a, const struct in_msg *m)
{
	struct proto_state s;
	struct store_state_in in;
	struct store_state_out out = {0};
	struct jsonu_err e;
	enum rcs_err err;

	if (m->len == 0)
		return false; /* a retained state being cleared */
	if (proto_state_decode(m->payload, m->len, &s, &e) != RCS_OK) {
		log_warnx("dropped a state message from %s: %s%s%s", m->topic.entity_ident,
			  e.field[0] ? e.field : "", e.field[0] ? ": " : "", e.message);
		return false;
	}
	/* the reported tags go to the store as the JSON text they are kept as */
	in.online = s.online;
	in.tags = s.tags ? jsonu_dump(s.tags, NULL) : NULL;
	in.agent_version = s.agent_version;
	in.ts = s.ts;
	in.attributes = s.attributes ? jsonu_dump(s.attributes, NULL) : NULL;
	for (int attempt = 0;; attempt++) {
		err = store_device_state(a->link->st, m->topic.client_root, m->topic.entity_ident,
					 &in, (int64_t)time(NULL), &out);
		if (!bridge_again(err, attempt, "device", m->topic.entity_ident))
			break;
	}
	if (err == RCS_ERR_NOTFOUND)
		log_warnx("dropped a state message from %s/%s: not in the inventory",
			  m->topic.client_root, m->topic.entity_ident);
	else if (err != RCS_OK)
		log_warnx("device %s: state not applied: %s", m->topic.entity_ident,
			  rcs_strerror(err));
	else if (out.stale)
		log_info("device %s: an offline state of %lld not applied: older than the state"
			 " of %lld (a Last Will or retained copy of an earlier connection)",
			 m->topic.entity_ident, (long long)s.ts, (long long)out.last_ts);
	else if (out.came_online || (!s.online && out.was_online))
		log_info("device %s is %s", m->topic.entity_ident, s.online ? "online" : "offline");
	/* reported tags, or online: continuous tag sends it now belongs to. Every online state
	 * looks, also one that changed nothing here (tags_changed, came_online false): each
	 * coordinator's copy of it, and each reconnect, is another chance for a device whose
	 * join was missed (a group created while it came online, an error, a crash on a
	 * shared database between its state and this look) to join (docs/architecture.md,
	 * "Continuous tag sends") */
	if (err == RCS_OK && s.online &&
	    lifecycle_device_changed(a->link->lc, m->topic.client_root, m->topic.entity_ident,
				     (int64_t)time(NULL)) != RCS_OK)
		log_warnx("device %s: continuous sends not checked", m->topic.entity_ident);
	proto_state_free(&s);
	return out.came_online;
}

/* ---- a batch ---- */

/* The messages of list, in order, in the caller's transaction when there is one;
 * in_batch: reports without a savepoint each (bridge_apply_report). Returns false when the
 * batch must be applied again one by one (*online then holds nothing of it). */
static bool bridge_apply_list(struct bridge_apply *a, struct in_msg *list, bool in_batch,
			      struct bridge_idents *online)
{
	for (struct in_msg *m = list; m; m = m->next) {
		if (m->topic.kind == PROTO_STATUS) {
			if (!bridge_apply_report(a, m, in_batch)) {
				bridge_idents_clear(online);
				return false;
			}
		} else if (in_batch && store_fold_flush(a->link->st) != RCS_OK) {
			/* a state reads and sends the device's jobs from their rows */
			bridge_idents_clear(online);
			return false;
		} else if (bridge_apply_state(a, m) &&
			   !bridge_idents_add(online, m->topic.entity_ident)) {
			log_warnx("device %s: its jobs not sent now: out of memory",
				  m->topic.entity_ident);
		}
	}
	return true;
}

/* The reports of a batch on a shared database (PostgreSQL), decoded. */
struct bridge_set {
	struct in_msg **m;
	struct proto_report *r;
	struct job_move *mv;
	enum store_move *res;
	enum rcs_err *err;
	size_t n;
};

static void bridge_set_free(struct bridge_set *b)
{
	for (size_t i = 0; i < b->n; i++)
		proto_report_free(&b->r[i]);
	free(b->m);
	free(b->r);
	free(b->mv);
	free(b->res);
	free(b->err);
}

/* A report held for BRIDGE_HELD_MAX_MS (m->held_at: since when; its job's row held elsewhere,
 * or an earlier report of its job not applied yet) is applied alone, waiting for its job's
 * row, so that a row held for long (a long transaction of another coordinator) or a report
 * that never comes cannot keep it back for good; before the batch's set, so a job's later
 * reports in the set still come after it. */
static bool bridge_held_too_long(const struct in_msg *m, int64_t now)
{
	return m->topic.kind == PROTO_STATUS && m->held_at != 0 &&
	       now - m->held_at >= BRIDGE_HELD_MAX_MS;
}

/* The reports of list as moves (those dropped are logged; those held too long applied
 * alone first): false when out of memory. */
static bool bridge_set_make(struct bridge_apply *a, struct bridge_set *b, struct in_msg *list)
{
	int64_t now = bridge_now_ms();
	size_t n = 0;

	memset(b, 0, sizeof(*b));
	for (struct in_msg *m = list; m; m = m->next)
		if (bridge_held_too_long(m, now)) {
			log_info("job %s: its report waited %lld ms (its row held elsewhere, or its"
				 " job's report before it still to come): applying it alone",
				 m->topic.job, (long long)(now - m->held_at));
			bridge_apply_report(a, m, false);
			m->held_at = -1; /* done */
		}
	for (struct in_msg *m = list; m; m = m->next)
		n += m->topic.kind == PROTO_STATUS && m->held_at >= 0;
	if (n == 0)
		return true;
	b->m = calloc(n, sizeof(*b->m));
	b->r = calloc(n, sizeof(*b->r));
	b->mv = calloc(n, sizeof(*b->mv));
	b->res = calloc(n, sizeof(*b->res));
	b->err = calloc(n, sizeof(*b->err));
	if (!b->m || !b->r || !b->mv || !b->res || !b->err)
		return false;
	for (struct in_msg *m = list; m; m = m->next)
		if (m->topic.kind == PROTO_STATUS && m->held_at >= 0 &&
		    bridge_report_move(m, &b->r[b->n], &b->mv[b->n])) {
			b->mv[b->n].again = m->held_at > 0; /* its job's row not read while */
			b->m[b->n++] = m;                   /* its report before it is to come */
		}
	return true;
}

/*
 * A batch on a shared database (docs/coordinator.md, "Reports as sets"): its reports applied
 * as sets of rows in one transaction (lifecycle_moves), again whole when the database broke
 * it off (a deadlock, a lock wait cut short), one by one when it failed otherwise; then its
 * state messages, each in a transaction of its own as before. The reports whose jobs another
 * transaction held are marked held (bridge_apply_keep_held keeps them for the next round).
 */
static void bridge_apply_sets(struct bridge_apply *a, struct in_msg *list,
			      struct bridge_idents *online)
{
	struct bridge_set b;
	enum rcs_err err = RCS_OK;

	if (!bridge_set_make(a, &b, list)) {
		log_warnx("a batch of %s is applied again message by message", "device reports");
		bridge_set_free(&b);
		memset(&b, 0, sizeof(b));
		for (struct in_msg *m = list; m; m = m->next)
			if (m->topic.kind == PROTO_STATUS && m->held_at >= 0)
				bridge_apply_report(a, m, false);
	}
	for (int attempt = 0; b.n > 0; attempt++) {
		err = lifecycle_moves(a->link->lc, b.mv, b.n, b.res, b.err);
		if (!bridge_again(err, attempt, b.n == 1 ? "job" : "batch of",
				  b.n == 1 ? b.mv[0].ident : "device reports"))
			break;
	}
	for (size_t i = 0; i < b.n; i++) {
		if (err == RCS_OK && b.err[i] == RCS_ERR_BUSY)
			b.m[i]->held = true; /* its job's row was held: the next round */
		else if (err == RCS_OK)
			bridge_report_after(a, b.m[i], &b.mv[i], b.err[i], b.res[i]);
		else
			bridge_apply_report(a, b.m[i], false);
	}
	if (err != RCS_OK)
		log_warnx("a batch of %s was applied message by message: %s", "device reports",
			  rcs_strerror(err));
	bridge_set_free(&b);
	for (struct in_msg *m = list; m; m = m->next)
		if (m->topic.kind != PROTO_STATUS && bridge_apply_state(a, m) &&
		    !bridge_idents_add(online, m->topic.entity_ident))
			log_warnx("device %s: its jobs not sent now: out of memory",
				  m->topic.entity_ident);
}

static void bridge_apply_inbound(struct bridge_apply *a, struct in_msg *list)
{
	struct store *st = a->link->st;
	struct bridge_idents online = {{NULL, 0}, 0};
	/* One transaction for the batch: one commit for many messages. On a shared database
	 * its reports go as sets (bridge_apply_sets), which lock all their jobs' rows first, in
	 * ident order, then their groups' rows, in ident order, so that another coordinator
	 * applying overlapping batches waits rather than deadlocks (docs/coordinator.md,
	 * "Reports as sets") */
	bool tx = !store_shared(st) && store_tx_begin(st) == RCS_OK;
	bool ok = true;

	/* in the batch's transaction the reports take no savepoint each, and a job's moves
	 * are folded into one write of its row (store_fold_begin); should one fail after
	 * writing (a database error), the batch is rolled back and applied again with a
	 * savepoint per message and no fold, so that the failing one costs only itself
	 * (docs/architecture.md, "One job, from POST to the final report", step 6) */
	if (tx)
		store_fold_begin(st);
	if (store_shared(st))
		bridge_apply_sets(a, list, &online);
	else
		ok = bridge_apply_list(a, list, tx, &online);
	if (tx && store_fold_end(st, ok) != RCS_OK && ok) {
		bridge_idents_clear(&online);
		ok = false;
	}
	if (!ok) {
		log_warnx("a batch of %s is applied again message by message", "device messages");
		store_tx_end(st, false);
		tx = store_tx_begin(st) == RCS_OK;
		bridge_apply_list(a, list, false, &online);
	}
	if (tx && store_tx_end(st, true) != RCS_OK)
		log_warnx("a batch of %s could not be stored", "device messages");
	/* devices back online get their pending and unacknowledged jobs */
	for (size_t i = 0; i < online.ids.n; i++)
		bridge_catch_up(a->send, online.ids.v[i], (int64_t)time(NULL));
	bridge_idents_free(&online);
}

void bridge_apply_step(struct bridge_apply *a)
{
	struct in_msg *batch = bridge_apply_take(a);

	if (batch == NULL)
		return;
	bridge_apply_inbound(a, batch);
	bridge_apply_keep_held(a, batch);
}

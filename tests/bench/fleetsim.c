/*
 * fleetsim: an event-driven (epoll) fleet simulator for the fan-out benchmark.
 *
 * Test tooling only, not the product. One process, one non-blocking TCP connection per
 * simulated device, its own minimal MQTT 3.1.1 codec (CONNECT, SUBSCRIBE, PUBLISH QoS 0/1
 * with PUBACK both ways, PINGREQ). Each device speaks protocol v1 (docs/mqtt.md): it connects
 * with client id = its entity ident and clean session off, subscribes to its job and cancel
 * topics, publishes its retained state (online: true; Last Will online: false), and answers
 * every job envelope with the four reports edge_transmitted, edge_started, edge_running,
 * terminated (seq 1..4, terminated's response "ok").
 *
 * Modes:
 *   fleetsim --idents FILE --root UUID --port P            devices until SIGTERM/SIGINT
 *   fleetsim ... --baseline --env-size BYTES               no coordinator: an extra
 *        connection plays it, publishes one envelope of BYTES per device, and times until it
 *        has received all 4N reports (the broker's own limit for this exchange)
 *   fleetsim ... --baseline --events --event-size BYTES [--event-qos Q]
 *        the same, and the extra connection also publishes a job event of BYTES on
 *        rcs/v1/<root>/events/jobs/<job> for each envelope and each report (five per job, as
 *        the coordinator does), at QoS Q (1); at QoS 1 it also waits for every
 *        acknowledgement: the broker's limit for the coordinator's whole exchange, with a
 *        client that costs next to nothing (BENCHMARKS.md, section 14)
 *   fleetsim --selftest                                     codec ceiling on a local load
 *
 * Output (stdout, one line each): "READY <n>" once every device is connected and
 * subscribed; at the end one JSON line with the statistics, including the simulator's own
 * CPU time per message (its ceiling).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct buf {
	unsigned char *p;
	size_t len, cap, off;
};

enum cstate { C_IDLE, C_CONNECTING, C_WAIT_CONNACK, C_WAIT_SUBACK, C_READY };

struct conn {
	int fd;
	int idx; /* connection index (devices idx*per_conn...), -1: the baseline coordinator */
	enum cstate st;
	int want_out;
	uint16_t pid;
	double last_tx;
	double retry_at;
	struct buf in, out;
};

static const char *opt_host = "127.0.0.1";
static int opt_port = 1883;
static const char *opt_root;
static const char *opt_user;
static int opt_rate = 2000;       /* new connections per second */
static int opt_max_pending = 256; /* connections waiting for CONNACK at once */
static int opt_baseline;
static int opt_env_size = 1200;
static int opt_events;
static int opt_event_size = 600;
static int opt_event_qos = 1;
static char *event_payload;
static double opt_timeout = 600;
static int opt_keepalive = 120;

static char **idents;
static int ndev;
static int nconn;            /* device connections: ndev / per_conn, rounded up */
static int opt_per_conn = 1; /* devices sharing one connection (when descriptors run short) */
static struct conn *conns;   /* nconn device connections + 1 baseline coordinator */
static int epfd;
static volatile sig_atomic_t stop_flag;

/* statistics */
static long long msgs_in, msgs_out, bytes_in, bytes_out, envelopes, reports_rx;
static long long env_bytes_total, disconnects, connect_fail, coord_pubacks, events_out;
static int nready, npending;
static int coord_ready;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *m)
{
	perror(m);
	exit(2);
}

static void buf_reserve(struct buf *b, size_t n)
{
	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	if (b->len + n <= b->cap)
		return;
	if (b->off) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + n <= b->cap)
			return;
	}
	size_t c = b->cap ? b->cap : 256;
	while (c < b->len + n)
		c *= 2;
	b->p = realloc(b->p, c);
	if (!b->p)
		die("realloc");
	b->cap = c;
}

static void buf_put(struct buf *b, const void *d, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void buf_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

/* ---- MQTT 3.1.1 codec ----------------------------------------------------------- */

static size_t put_varint(unsigned char *p, size_t v)
{
	size_t n = 0;
	do {
		unsigned char c = v % 128;
		v /= 128;
		if (v)
			c |= 128;
		p[n++] = c;
	} while (v);
	return n;
}

/* Appends a packet: fixed header byte, then the body parts. */
static void pkt_begin(struct buf *b, unsigned char type, size_t rlen)
{
	unsigned char h[5];
	h[0] = type;
	size_t n = 1 + put_varint(h + 1, rlen);
	buf_put(b, h, n);
}

static void put_u16(struct buf *b, unsigned v)
{
	unsigned char x[2] = {(unsigned char)(v >> 8), (unsigned char)(v & 255)};
	buf_put(b, x, 2);
}

static void put_str(struct buf *b, const char *s, size_t n)
{
	put_u16(b, (unsigned)n);
	buf_put(b, s, n);
}

static uint16_t next_pid(struct conn *c)
{
	if (++c->pid == 0)
		c->pid = 1;
	return c->pid;
}

static void mqtt_publish(struct conn *c, const char *topic, size_t tlen, const void *pl,
			 size_t plen, int qos, int retain)
{
	size_t rlen = 2 + tlen + (qos ? 2 : 0) + plen;
	pkt_begin(&c->out, (unsigned char)(0x30 | (qos << 1) | (retain ? 1 : 0)), rlen);
	put_str(&c->out, topic, tlen);
	if (qos)
		put_u16(&c->out, next_pid(c));
	buf_put(&c->out, pl, plen);
	msgs_out++;
}

static void mqtt_connect(struct conn *c, const char *cid)
{
	char wt[256], wp[256];
	int wtl = 0, wpl = 0;
	size_t cl = strlen(cid);
	unsigned char flags = 0x00; /* clean session off */
	if (c->idx >= 0) {
		/* the first device's */
		wtl = snprintf(wt, sizeof wt, "rcs/v1/%s/%s/state", opt_root, cid);
		wpl =
		    snprintf(wp, sizeof wp,
			     "{\"v\":1,\"online\":false,\"tags\":[],\"agent_version\":\"fleetsim\","
			     "\"ts\":%ld}",
			     (long)time(NULL));
		flags |= 0x04 | 0x08 | 0x20; /* will, will QoS 1, will retain */
	}
	size_t ul = opt_user ? strlen(opt_user) : 0;
	if (opt_user)
		flags |= 0x80;
	size_t rlen =
	    10 + 2 + cl + (wtl ? 2 + (size_t)wtl + 2 + (size_t)wpl : 0) + (opt_user ? 2 + ul : 0);
	pkt_begin(&c->out, 0x10, rlen);
	put_str(&c->out, "MQTT", 4);
	unsigned char v[4] = {4, flags, (unsigned char)(opt_keepalive >> 8),
			      (unsigned char)(opt_keepalive & 255)};
	buf_put(&c->out, v, 4);
	put_str(&c->out, cid, cl);
	if (wtl) {
		put_str(&c->out, wt, (size_t)wtl);
		put_str(&c->out, wp, (size_t)wpl);
	}
	if (opt_user)
		put_str(&c->out, opt_user, ul);
}

static void mqtt_subscribe(struct conn *c, const char **topics, int n)
{
	size_t rlen = 2;
	for (int i = 0; i < n; i++)
		rlen += 2 + strlen(topics[i]) + 1;
	pkt_begin(&c->out, 0x82, rlen);
	put_u16(&c->out, next_pid(c));
	for (int i = 0; i < n; i++) {
		put_str(&c->out, topics[i], strlen(topics[i]));
		unsigned char q = 1;
		buf_put(&c->out, &q, 1);
	}
}

static void mqtt_ack(struct conn *c, unsigned char type, unsigned pid)
{
	unsigned char a[4] = {type, 2, (unsigned char)(pid >> 8), (unsigned char)(pid & 255)};
	buf_put(&c->out, a, 4);
}

/* ---- connections ---------------------------------------------------------------- */

static void conn_update_events(struct conn *c)
{
	int want = c->out.len > c->out.off || c->st == C_CONNECTING;
	if (want == c->want_out)
		return;
	struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		die("epoll_ctl mod");
	c->want_out = want;
}

static void conn_close(struct conn *c, int failed)
{
	if (c->fd >= 0) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	if (c->st == C_READY)
		nready -= c->idx >= 0;
	if (c->st == C_CONNECTING || c->st == C_WAIT_CONNACK)
		npending--;
	if (c->idx < 0 && c->st == C_READY)
		coord_ready = 0;
	c->fd = -1;
	c->st = C_IDLE;
	c->want_out = 0;
	c->retry_at = now() + 1.0;
	buf_free(&c->in);
	buf_free(&c->out);
	if (failed)
		connect_fail++;
	else
		disconnects++;
}

static void conn_flush(struct conn *c)
{
	while (c->out.len > c->out.off) {
		ssize_t n =
		    send(c->fd, c->out.p + c->out.off, c->out.len - c->out.off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			conn_close(c, 0);
			return;
		}
		bytes_out += n;
		c->out.off += (size_t)n;
		c->last_tx = now();
	}
	if (c->out.off == c->out.len)
		c->out.off = c->out.len = 0;
	conn_update_events(c);
}

static struct sockaddr_in broker_addr;
/* connections per source address when they are spread over 127.0.0.2, .3, ... */
#define SRC_BLOCK 20000
static int spread_sources; /* the broker is on the loopback and there are more than a block */

static void conn_start(struct conn *c)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE) {
			c->retry_at = now() + 1.0;
			return;
		}
		die("socket");
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->fd = fd;
	c->st = C_CONNECTING;
	npending++;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
	c->want_out = 1;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		die("epoll_ctl add");
	if (spread_sources && c->idx >= 0) {
		/* the loopback's ephemeral ports (some 28,000) hold that many connections to one
		 * broker port per source address: past that, each block of connections comes
		 * from the next 127.0.0.x */
		struct sockaddr_in src = {.sin_family = AF_INET};
		src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1u + (uint32_t)(c->idx / SRC_BLOCK));
		if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0)
			die("bind source address");
	}
	if (connect(fd, (struct sockaddr *)&broker_addr, sizeof broker_addr) < 0 &&
	    errno != EINPROGRESS) {
		conn_close(c, 1);
		return;
	}
	const char *cid =
	    c->idx >= 0 ? idents[c->idx * opt_per_conn] : "fleetsim-baseline-coordinator";
	mqtt_connect(c, cid);
}

static void on_connected(struct conn *c)
{
	char t1[256];
	if (c->idx >= 0) {
		int first = c->idx * opt_per_conn;
		int last = first + opt_per_conn < ndev ? first + opt_per_conn : ndev;
		int nt = 0;
		char(*tb)[256] = malloc(sizeof(*tb) * 2 * (size_t)(last - first));
		const char **ts = malloc(sizeof(*ts) * 2 * (size_t)(last - first));
		if (!tb || !ts)
			die("malloc");
		for (int d = first; d < last; d++) {
			snprintf(tb[nt], sizeof tb[nt], "rcs/v1/%s/%s/jobs/+", opt_root, idents[d]);
			ts[nt] = tb[nt];
			nt++;
			snprintf(tb[nt], sizeof tb[nt], "rcs/v1/%s/%s/jobs/+/cancel", opt_root,
				 idents[d]);
			ts[nt] = tb[nt];
			nt++;
		}
		mqtt_subscribe(c, ts, nt);
		free(ts);
		free(tb);
		/* retained state of each device, online */
		for (int d = first; d < last; d++) {
			char st[256], pl[256];
			int sl = snprintf(st, sizeof st, "rcs/v1/%s/%s/state", opt_root, idents[d]);
			int pll = snprintf(pl, sizeof pl,
					   "{\"v\":1,\"online\":true,\"tags\":[],\"agent_version\":"
					   "\"fleetsim\",\"ts\":%ld}",
					   (long)time(NULL));
			mqtt_publish(c, st, (size_t)sl, pl, (size_t)pll, 1, 1);
		}
	} else {
		snprintf(t1, sizeof t1, "rcs/v1/%s/+/jobs/+/status", opt_root);
		const char *ts[1] = {t1};
		mqtt_subscribe(c, ts, 1);
	}
}

static const char *const statuses[4] = {"edge_transmitted", "edge_started", "edge_running",
					"terminated"};

/* A device received an envelope on rcs/v1/<root>/<entity>/jobs/<job>: answer it. */
static void device_envelope(struct conn *c, const char *topic, size_t tlen, size_t plen)
{
	const char *j = memmem(topic, tlen, "/jobs/", 6);
	if (!j)
		return;
	j += 6;
	size_t jl = (size_t)(topic + tlen - j);
	if (memchr(j, '/', jl))
		return; /* cancel: nothing to stop, the job ended already */
	envelopes++;
	env_bytes_total += (long long)plen;
	char st[300], pl[400];
	int sl = snprintf(st, sizeof st, "%.*s/status", (int)tlen, topic);
	long ts = (long)time(NULL);
	for (int s = 0; s < 4; s++) {
		int pll =
		    snprintf(pl, sizeof pl,
			     "{\"v\":1,\"job\":\"%.*s\",\"status\":\"%s\",\"seq\":%d,\"ts\":%ld,"
			     "\"response\":%s}",
			     (int)jl, j, statuses[s], s + 1, ts, s == 3 ? "\"ok\"" : "null");
		mqtt_publish(c, st, (size_t)sl, pl, (size_t)pll, 1, 0);
	}
}

/* --events: the simulated coordinator's job event for job (the envelope's, or a report's) */
static void coord_event(struct conn *c, const char *job, size_t jl)
{
	char et[300];
	int etl = snprintf(et, sizeof et, "rcs/v1/%s/events/jobs/%.*s", opt_root, (int)jl, job);
	if (etl < 0 || (size_t)etl >= sizeof et)
		return;
	mqtt_publish(c, et, (size_t)etl, event_payload, (size_t)opt_event_size, opt_event_qos, 0);
	events_out++;
}

static void handle_packet(struct conn *c, unsigned char h, const unsigned char *p, size_t n)
{
	unsigned type = h >> 4;
	msgs_in++;
	switch (type) {
	case 2: /* CONNACK */
		if (n < 2 || p[1] != 0) {
			fprintf(stderr, "fleetsim: CONNACK refused (%d)\n", n >= 2 ? p[1] : -1);
			conn_close(c, 1);
			return;
		}
		npending--;
		c->st = C_WAIT_SUBACK;
		on_connected(c);
		break;
	case 9: /* SUBACK */
		if (c->st == C_WAIT_SUBACK) {
			c->st = C_READY;
			if (c->idx >= 0)
				nready++;
			else
				coord_ready = 1;
		}
		break;
	case 3: { /* PUBLISH */
		int qos = (h >> 1) & 3;
		if (n < 2)
			return;
		size_t tl = (p[0] << 8) | p[1];
		if (2 + tl + (qos ? 2 : 0) > n)
			return;
		const char *topic = (const char *)p + 2;
		size_t off = 2 + tl;
		if (qos) {
			unsigned pid = (p[off] << 8) | p[off + 1];
			off += 2;
			mqtt_ack(c, qos == 1 ? 0x40 : 0x50, pid);
		}
		if (c->idx >= 0)
			device_envelope(c, topic, tl, n - off);
		else if (tl > 7 && memcmp(topic + tl - 7, "/status", 7) == 0) {
			reports_rx++;
			const char *j = opt_events ? memmem(topic, tl, "/jobs/", 6) : NULL;
			if (j)
				coord_event(c, j + 6, (size_t)(topic + tl - 7 - (j + 6)));
		}
		break;
	}
	case 4: /* PUBACK */
		if (c->idx < 0)
			coord_pubacks++;
		break;
	case 13: /* PINGRESP */
	default:
		break;
	}
}

static void conn_read(struct conn *c)
{
	for (;;) {
		buf_reserve(&c->in, 65536);
		ssize_t r = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
		if (r == 0) {
			conn_close(c, c->st != C_READY);
			return;
		}
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			conn_close(c, c->st != C_READY);
			return;
		}
		bytes_in += r;
		c->in.len += (size_t)r;
		/* parse whole packets */
		for (;;) {
			size_t avail = c->in.len - c->in.off;
			unsigned char *b = c->in.p + c->in.off;
			if (avail < 2)
				break;
			size_t rl = 0, mul = 1, i = 1;
			int complete = 0;
			while (i < avail && i <= 4) {
				rl += (b[i] & 127) * mul;
				mul *= 128;
				if (!(b[i++] & 128)) {
					complete = 1;
					break;
				}
			}
			if (!complete) {
				if (i > 4) {
					conn_close(c, 0);
					return;
				}
				break;
			}
			if (avail < i + rl)
				break;
			c->in.off += i + rl;
			handle_packet(c, b[0], b + i, rl);
			if (c->fd < 0)
				return;
		}
		if (c->in.off == c->in.len)
			c->in.off = c->in.len = 0;
		if ((size_t)r < 65536)
			break;
	}
}

static void conn_event(struct conn *c, uint32_t ev)
{
	if (c->st == C_CONNECTING && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		int err = 0;
		socklen_t l = sizeof err;
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
		if (err) {
			conn_close(c, 1);
			return;
		}
		c->st = C_WAIT_CONNACK;
	}
	if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
		conn_read(c);
	if (c->fd >= 0)
		conn_flush(c);
}

/* ---- self test: the codec and report generation on a local load ------------------- */

static int selftest(void)
{
	opt_root = "01a1ffa0-2853-7037-8e44-292c4153a4ea";
	static char *one[1] = {"01a1ffa0-2b22-7049-8259-f0eebb68ebab"};
	idents = one;
	ndev = 1;
	struct conn dev = {.fd = -1, .idx = 0}, co = {.fd = -1, .idx = -1};
	char topic[200], env[1200];
	memset(env, 'x', sizeof env);
	int n = 200000;
	long long in0 = msgs_in;
	double t0 = now(), c0 = cpu_seconds();
	for (int k = 0; k < n; k++) {
		int tl =
		    snprintf(topic, sizeof topic, "rcs/v1/%s/%s/jobs/00000000-0000-7000-8000-%012d",
			     opt_root, one[0], k);
		/* the coordinator side encodes an envelope, the device parses it and answers */
		mqtt_publish(&co, topic, (size_t)tl, env, sizeof env, 1, 0);
		size_t rl = 0, mul = 1, i = 1;
		unsigned char *b = co.out.p;
		while (b[i] & 128)
			rl += (b[i++] & 127) * mul, mul *= 128;
		rl += (b[i++] & 127) * mul;
		handle_packet(&dev, b[0], b + i, rl);
		/* the coordinator side parses the 4 reports */
		unsigned char *q = dev.out.p + 4; /* skip PUBACK */
		unsigned char *e = dev.out.p + dev.out.len;
		while (q < e) {
			size_t r2 = 0, m2 = 1, j = 1;
			while (q[j] & 128)
				r2 += (q[j++] & 127) * m2, m2 *= 128;
			r2 += (q[j++] & 127) * m2;
			handle_packet(&co, q[0], q + j, r2);
			q += j + r2;
		}
		co.out.len = co.out.off = 0;
		dev.out.len = dev.out.off = 0;
	}
	double dt = now() - t0, dc = cpu_seconds() - c0;
	long long msgs = msgs_in - in0;
	printf("{\"mode\":\"selftest\",\"jobs\":%d,\"messages\":%lld,\"seconds\":%.3f,"
	       "\"cpu_seconds\":%.3f,\"messages_per_s\":%.0f,\"jobs_per_s\":%.0f}\n",
	       n, msgs, dt, dc, (double)msgs / dt, n / dt);
	return 0;
}

/* ---- main --------------------------------------------------------------------------- */

static void on_signal(int s)
{
	(void)s;
	stop_flag = 1;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: fleetsim --idents FILE --root UUID [--host H] [--port P] [--username U]\n"
		"                [--rate CONN_PER_S] [--max-pending N] [--keepalive S]\n"
		"                [--baseline --env-size BYTES [--events --event-size BYTES\n"
		"                 [--event-qos Q]]] [--timeout S]\n"
		"       fleetsim --selftest\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *idfile = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--selftest"))
			return selftest();
		else if (!strcmp(a, "--baseline"))
			opt_baseline = 1;
		else if (!strcmp(a, "--events"))
			opt_events = 1;
		else if (!v)
			usage();
		else if (!strcmp(a, "--idents"))
			idfile = v, i++;
		else if (!strcmp(a, "--root"))
			opt_root = v, i++;
		else if (!strcmp(a, "--host"))
			opt_host = v, i++;
		else if (!strcmp(a, "--port"))
			opt_port = atoi(v), i++;
		else if (!strcmp(a, "--username"))
			opt_user = v, i++;
		else if (!strcmp(a, "--rate"))
			opt_rate = atoi(v), i++;
		else if (!strcmp(a, "--max-pending"))
			opt_max_pending = atoi(v), i++;
		else if (!strcmp(a, "--keepalive"))
			opt_keepalive = atoi(v), i++;
		else if (!strcmp(a, "--env-size"))
			opt_env_size = atoi(v), i++;
		else if (!strcmp(a, "--event-size"))
			opt_event_size = atoi(v) > 2 ? atoi(v) : 2, i++;
		else if (!strcmp(a, "--event-qos"))
			opt_event_qos = atoi(v) ? 1 : 0, i++;
		else if (!strcmp(a, "--timeout"))
			opt_timeout = atof(v), i++;
		else if (!strcmp(a, "--per-conn"))
			opt_per_conn = atoi(v) > 0 ? atoi(v) : 1, i++;
		else
			usage();
	}
	if (!idfile || !opt_root || (opt_events && !opt_baseline))
		usage();
	if (opt_events) {
		event_payload = malloc((size_t)opt_event_size);
		if (!event_payload)
			die("malloc");
		memset(event_payload, 'x', (size_t)opt_event_size);
		event_payload[0] = '{';
		event_payload[opt_event_size - 1] = '}';
	}

	FILE *f = fopen(idfile, "r");
	if (!f)
		die(idfile);
	char line[256];
	int cap = 1024;
	idents = malloc((size_t)cap * sizeof *idents);
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = 0;
		if (!line[0])
			continue;
		if (ndev == cap)
			idents = realloc(idents, (size_t)(cap *= 2) * sizeof *idents);
		idents[ndev++] = strdup(line);
	}
	fclose(f);

	/* file descriptors: one per connection, the baseline coordinator, epoll, stdio; when
	 * they run short, several devices share a connection (each with its own topics) */
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	nconn = (ndev + opt_per_conn - 1) / opt_per_conn;
	rlim_t need = (rlim_t)nconn + 64;
	if (rl.rlim_cur < need) {
		rl.rlim_cur = need < rl.rlim_max ? need : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < need) {
		int allowed = (int)rl.rlim_cur - 64;
		opt_per_conn = (ndev + allowed - 1) / allowed;
		nconn = (ndev + opt_per_conn - 1) / opt_per_conn;
		fprintf(stderr,
			"fleetsim: RLIMIT_NOFILE hard limit %llu: %d devices over %d connections"
			" (%d per connection)\n",
			(unsigned long long)rl.rlim_max, ndev, nconn, opt_per_conn);
	}

	memset(&broker_addr, 0, sizeof broker_addr);
	broker_addr.sin_family = AF_INET;
	broker_addr.sin_port = htons((uint16_t)opt_port);
	if (inet_pton(AF_INET, opt_host, &broker_addr.sin_addr) != 1) {
		fprintf(stderr, "fleetsim: --host must be an IPv4 address\n");
		return 2;
	}
	spread_sources = nconn > SRC_BLOCK && (ntohl(broker_addr.sin_addr.s_addr) >> 24) == 127;

	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		die("epoll_create1");
	conns = calloc((size_t)nconn + 1, sizeof *conns);
	for (int i = 0; i <= nconn; i++) {
		conns[i].fd = -1;
		conns[i].idx = i < nconn ? i : -1;
	}
	struct conn *coord = &conns[nconn];

	double t_start = now(), cpu_start = cpu_seconds();
	double t_ready = 0, t_send = 0, t_done = 0, cpu_send = 0;
	int next = 0; /* next device to connect (first pass) */
	int reported_ready = 0, sent = 0;
	double last_tick = now(), budget = 0, last_scan = now();
	struct epoll_event evs[1024];
	int rc = 0;

	while (!stop_flag) {
		double t = now();
		if (t - t_start > opt_timeout) {
			fprintf(stderr, "fleetsim: timeout\n");
			rc = 1;
			break;
		}
		/* connect rate limiting: a token bucket of --rate per second */
		budget += (t - last_tick) * opt_rate;
		if (budget > opt_rate / 10.0 + 1)
			budget = opt_rate / 10.0 + 1;
		last_tick = t;
		while (next < nconn && budget >= 1 && npending < opt_max_pending) {
			conn_start(&conns[next++]);
			budget -= 1;
		}
		/* once a second: reconnect lost connections, keep-alive */
		if (t - last_scan >= 1.0) {
			last_scan = t;
			for (int i = 0; i <= nconn && i < (next == nconn ? nconn + 1 : next); i++) {
				struct conn *c = &conns[i];
				if (c->fd < 0) {
					if (c->idx < 0 && !opt_baseline)
						continue;
					if (c->retry_at <= t && npending < opt_max_pending)
						conn_start(c);
				} else if (c->st == C_READY &&
					   t - c->last_tx > opt_keepalive / 2.0) {
					pkt_begin(&c->out, 0xC0, 0);
					conn_flush(c);
				}
			}
		}
		if (opt_baseline && next == nconn && coord->fd < 0 && coord->st == C_IDLE &&
		    coord->retry_at <= t)
			conn_start(coord);
		if (!reported_ready && nready == nconn && (!opt_baseline || coord_ready)) {
			reported_ready = 1;
			t_ready = now();
			printf("READY %d\n", nready);
			fflush(stdout);
		}
		/* baseline: the simulated coordinator publishes one envelope per device */
		if (opt_baseline && reported_ready && !sent) {
			sent = 1;
			t_send = now();
			cpu_send = cpu_seconds();
			char topic[300];
			char *env = malloc((size_t)opt_env_size + 1);
			for (int i = 0; i < ndev; i++) {
				int tl = snprintf(topic, sizeof topic,
						  "rcs/v1/%s/%s/jobs/00000000-0000-7000-8000-%012d",
						  opt_root, idents[i], i);
				int el =
				    snprintf(env, (size_t)opt_env_size + 1,
					     "{\"v\":1,\"job\":\"00000000-0000-7000-8000-%012d\","
					     "\"pad\":\"",
					     i);
				if (el < opt_env_size - 2) {
					memset(env + el, 'x', (size_t)(opt_env_size - 2 - el));
					memcpy(env + opt_env_size - 2, "\"}", 2);
					el = opt_env_size;
				}
				mqtt_publish(coord, topic, (size_t)tl, env, (size_t)el, 1, 0);
				if (opt_events)
					coord_event(coord, topic + tl - 36, 36);
			}
			free(env);
			conn_flush(coord);
		}
		/* with QoS 1 events, every publish acknowledged too: the envelopes' and the
		 * events' */
		if (opt_baseline && sent && reports_rx >= 4LL * ndev &&
		    (!opt_events || !opt_event_qos || coord_pubacks >= 6LL * ndev)) {
			t_done = now();
			break;
		}
		int timeout_ms = next < nconn ? 5 : 200;
		int n = epoll_wait(epfd, evs, 1024, timeout_ms);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (int i = 0; i < n; i++)
			conn_event(evs[i].data.ptr, evs[i].events);
	}

	double cpu_total = cpu_seconds() - cpu_start;
	long long msgs = msgs_in + msgs_out;
	printf("{\"mode\":\"%s\",\"devices\":%d,\"connections\":%d,\"devices_per_connection\":%d,"
	       "\"ready\":%d,\"connect_s\":%.3f,",
	       opt_baseline ? "baseline" : "devices", ndev, nconn, opt_per_conn, nready,
	       t_ready ? t_ready - t_start : -1.0);
	if (opt_baseline) {
		double dt = t_done ? t_done - t_send : -1.0;
		double dc = cpu_seconds() - cpu_send;
		printf("\"baseline_s\":%.4f,\"jobs_per_s\":%.1f,\"reports_rx\":%lld,"
		       "\"env_size\":%d,\"cpu_during_exchange_s\":%.3f,\"events\":%lld,"
		       "\"event_size\":%d,\"event_qos\":%d,",
		       dt, dt > 0 ? ndev / dt : 0.0, reports_rx, opt_env_size, dc, events_out,
		       opt_events ? opt_event_size : 0, opt_event_qos);
	}
	printf(
	    "\"envelopes\":%lld,\"env_bytes_avg\":%.0f,\"msgs_in\":%lld,\"msgs_out\":%lld,"
	    "\"bytes_in\":%lld,\"bytes_out\":%lld,\"disconnects\":%lld,\"connect_failures\":%lld,"
	    "\"cpu_s\":%.3f,\"cpu_us_per_msg\":%.2f}\n",
	    envelopes, envelopes ? (double)env_bytes_total / (double)envelopes : 0.0, msgs_in,
	    msgs_out, bytes_in, bytes_out, disconnects, connect_fail, cpu_total,
	    msgs ? cpu_total * 1e6 / (double)msgs : 0.0);
	fflush(stdout);
	free(event_payload);
	return rc;
}

/*
 * rollout.c - the arithmetic of group sends. See rollout.h.
 */
#include "rollout.h"

#include <math.h>
#include <string.h>

#define ROLLOUT_BUCKET_S 2.0 /* seconds of jobs the bucket holds */
#define ROLLOUT_DAY      86400
#define ROLLOUT_WEEK     (7 * ROLLOUT_DAY)

static const char *const rollout_days[7] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};

bool rollout_has_rate(const struct group_settings *g)
{
	return g->max_per_minute > 0 || g->base_per_minute > 0;
}

bool rollout_holds(const struct group_settings *g)
{
	return rollout_has_rate(g) || g->has_window;
}

double rollout_rate(const struct group_settings *g, long long succeeded)
{
	double rate, cap = ROLLOUT_MAX_RATE;

	if (g->max_per_minute > 0)
		cap = (double)g->max_per_minute;
	if (g->base_per_minute <= 0)
		return g->max_per_minute > 0 ? cap : 0.0;
	rate = (double)g->base_per_minute;
	if (g->after_succeeded > 0 && succeeded > 0 && g->factor_milli > ROLLOUT_MILLI) {
		double steps = (double)(succeeded / g->after_succeeded);
		double factor = (double)g->factor_milli / ROLLOUT_MILLI;

		/* past the cap in any case: no need to raise further (nor to overflow) */
		if (steps * log(factor) >= log(cap / rate))
			return cap;
		rate *= pow(factor, steps);
	}
	return rate < cap ? rate : cap;
}

double rollout_bucket(double per_minute)
{
	double b = per_minute * ROLLOUT_BUCKET_S / 60.0;

	return b < 1.0 ? 1.0 : b;
}

double rollout_tokens(double tokens, int64_t at_ms, int64_t now_ms, double per_minute)
{
	double cap = rollout_bucket(per_minute);

	if (now_ms > at_ms)
		tokens += (double)(now_ms - at_ms) * per_minute / 60000.0;
	if (tokens > cap)
		tokens = cap;
	if (tokens < 0)
		tokens = 0;
	return tokens;
}

int rollout_day_bit(const char *name)
{
	for (int i = 0; name && i < 7; i++)
		if (strcmp(name, rollout_days[i]) == 0)
			return i;
	return -1;
}

const char *rollout_day_name(int i)
{
	return i >= 0 && i < 7 ? rollout_days[i] : "";
}

int rollout_parse_hhmm(const char *s)
{
	int h, m;

	if (s == NULL || strlen(s) != 5 || s[2] != ':')
		return -1;
	for (int i = 0; i < 5; i++)
		if (i != 2 && (s[i] < '0' || s[i] > '9'))
			return -1;
	h = (s[0] - '0') * 10 + (s[1] - '0');
	m = (s[3] - '0') * 10 + (s[4] - '0');
	if (h > 23 || m > 59)
		return -1;
	return h * 60 + m;
}

/* Floor division for negative times too. */
static int64_t rollout_floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* The window's local midnight of the local day holding local time t, and that day's bit
 * (Monday 0): 1970-01-01 was a Thursday. */
static int64_t rollout_local_midnight(int64_t local, int *dow)
{
	int64_t day = rollout_floor_div(local, ROLLOUT_DAY);

	*dow = (int)((day % 7 + 7 + 3) % 7);
	return day * ROLLOUT_DAY;
}

bool rollout_window_open(const struct group_settings *g, int64_t now)
{
	int64_t local, midnight;
	int dow;

	if (!g->has_window)
		return true;
	local = now + g->utc_offset_min * 60;
	midnight = rollout_local_midnight(local, &dow);
	/* a window of today, or one of yesterday that runs past midnight */
	for (int back = 0; back <= 1; back++) {
		int d = ((dow - back) % 7 + 7) % 7;
		int64_t open = midnight - back * ROLLOUT_DAY + g->start_min * 60;

		if ((g->days & (1u << d)) && local >= open && local < open + g->duration_min * 60)
			return true;
	}
	return false;
}

int64_t rollout_window_next(const struct group_settings *g, int64_t now)
{
	int64_t local, midnight;
	int dow;

	if (rollout_window_open(g, now))
		return now;
	local = now + g->utc_offset_min * 60;
	midnight = rollout_local_midnight(local, &dow);
	for (int ahead = 0; ahead <= 7; ahead++) {
		int d = (dow + ahead) % 7;
		int64_t open = midnight + ahead * ROLLOUT_DAY + g->start_min * 60;

		if ((g->days & (1u << d)) && open > local)
			return open - g->utc_offset_min * 60;
	}
	return 0;
}

#define ROLLOUT_ETA_MAX (366 * (int64_t)ROLLOUT_DAY) /* longer: no telling */

int64_t rollout_release_eta(const struct group_settings *g, long long held, long long succeeded,
			    int64_t now)
{
	double rate = rollout_rate(g, succeeded), left = (double)held;
	int64_t t = now;

	if (held <= 0)
		return 0;
	if (!g->has_window) {
		double s = rate > 0 ? ceil(left * 60.0 / rate) : 0;
		return s > (double)ROLLOUT_ETA_MAX ? -1 : (int64_t)s;
	}
	/* a minute of the window at a time, closed spans skipped */
	for (;;) {
		int64_t next;

		if (t - now > ROLLOUT_ETA_MAX)
			return -1;
		if (!rollout_window_open(g, t)) {
			next = rollout_window_next(g, t);
			if (next <= t)
				return -1;
			t = next;
			continue;
		}
		if (rate <= 0 || left * 60.0 / rate <= 60.0)
			return t - now + (rate > 0 ? (int64_t)ceil(left * 60.0 / rate) : 0);
		left -= rate;
		t += 60;
	}
}

int64_t rollout_retry_delay(const struct group_settings *g, long long attempt)
{
	double d = (double)g->backoff_s;
	double f = (double)g->backoff_milli / ROLLOUT_MILLI;

	if (attempt > 1 && f > 1.0)
		d *= pow(f, (double)(attempt - 1));
	if (d > ROLLOUT_MAX_DELAY)
		d = ROLLOUT_MAX_DELAY;
	return d < 0 ? 0 : (int64_t)d;
}

bool rollout_error_permanent(const char *code)
{
	/* what a script ends with through rcs.fail and rcs.rollback, and a device that did not
	 * come back from its reboot, repeat as well: a retry would install the same update
	 * again (docs/mqtt.md "Status report") */
	static const char *const permanent[] = {"signature_invalid",
						"variables_invalid",
						"rollback_refused",
						"sandbox_violation",
						"envelope_invalid",
						"wrong_device",
						"payload_too_large",
						"install_failed",
						"health_check_failed",
						"incompatible",
						"rolled_back",
						"reboot_timeout",
						NULL};

	for (size_t i = 0; code && permanent[i]; i++)
		if (strcmp(code, permanent[i]) == 0)
			return true;
	return false;
}

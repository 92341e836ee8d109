/*
 * Unit tests of coordinator/webhooks.c's pure parts (docs/api.md, "Webhooks"): the address
 * guard (every refused range of IPv4 and IPv6, IPv4 inside IPv6 as mapped, compatible and
 * NAT64 forms, networks allowed with --webhook-allow-net, malformed networks refused), the
 * checks of a URL when a webhook is saved (scheme, host, user:password; IP literals only:
 * no name is resolved), and the rcs-signature header against a vector computed with
 * `printf '%s' "$ts.$body" | openssl dgst -sha256 -hmac "$secret"`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "webhooks.h"

/* ---- helpers ---- */

/* Whether the guard g lets a connection to the address text (v4 or v6) through; the
 * guard's reason in why. */
static bool allowed(const struct webhook_guard *g, const char *text, char *why, size_t len)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	why[0] = '\0';
	if (inet_pton(AF_INET, text, &((struct sockaddr_in *)(void *)&ss)->sin_addr) == 1) {
		ss.ss_family = AF_INET;
	} else {
		assert_int_equal(
		    inet_pton(AF_INET6, text, &((struct sockaddr_in6 *)(void *)&ss)->sin6_addr), 1);
		ss.ss_family = AF_INET6;
	}
	return webhook_addr_allowed(g, (const struct sockaddr *)&ss, why, len);
}

static void expect_refused(const struct webhook_guard *g, const char *addr, const char *what)
{
	char why[WEBHOOK_WHY_MAX];

	if (allowed(g, addr, why, sizeof(why)))
		fail_msg("%s was allowed", addr);
	if (strstr(why, what) == NULL || strstr(why, "--webhook-allow-net") == NULL)
		fail_msg("%s: reason '%s' does not name '%s'", addr, why, what);
}

static void expect_allowed(const struct webhook_guard *g, const char *addr)
{
	char why[WEBHOOK_WHY_MAX];

	if (!allowed(g, addr, why, sizeof(why)))
		fail_msg("%s was refused: %s", addr, why);
}

static struct webhook_guard *guard(const char *const *cidrs, size_t n)
{
	struct webhook_guard *g = NULL;
	char why[WEBHOOK_WHY_MAX];

	assert_int_equal(webhook_guard_new(cidrs, n, &g, why, sizeof(why)), RCS_OK);
	assert_non_null(g);
	return g;
}

/* ---- the guard ---- */

static void test_v4_refused(void **state)
{
	static const struct {
		const char *addr, *what;
	} cases[] = {
	    {"127.0.0.1", "loopback"},
	    {"127.255.255.254", "loopback"},
	    {"10.0.0.1", "private"},
	    {"10.255.255.255", "private"},
	    {"172.16.0.1", "private"},
	    {"172.31.255.255", "private"},
	    {"192.168.0.1", "private"},
	    {"192.168.255.255", "private"},
	    {"100.64.0.1", "shared (CGNAT)"},
	    {"100.127.255.255", "shared (CGNAT)"},
	    {"169.254.169.254", "cloud metadata"},
	    {"169.254.0.1", "link-local"},
	    {"224.0.0.1", "multicast"},
	    {"239.255.255.250", "multicast"},
	    {"240.0.0.1", "reserved"},
	    {"255.255.255.255", "reserved"},
	    {"0.0.0.0", "this network"},
	    {"0.1.2.3", "this network"},
	    {"192.0.0.8", "reserved"},
	    {"198.18.0.1", "reserved"},
	    {"198.19.255.255", "reserved"},
	    {"192.0.2.1", "documentation"},
	    {"198.51.100.7", "documentation"},
	    {"203.0.113.9", "documentation"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		expect_refused(NULL, cases[i].addr, cases[i].what);
		expect_refused(NULL, cases[i].addr, cases[i].addr);
	}
}

static void test_v4_allowed(void **state)
{
	static const char *const ok[] = {"8.8.8.8",         "1.1.1.1",     "93.184.216.34",
					 "172.15.255.255",  "172.32.0.1",  "100.63.255.255",
					 "100.128.0.1",     "192.169.0.1", "169.253.255.255",
					 "223.255.255.255", "11.0.0.1",    "198.20.0.1"};

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		expect_allowed(NULL, ok[i]);
}

static void test_v6_refused(void **state)
{
	static const struct {
		const char *addr, *what;
	} cases[] = {
	    {"::1", "loopback"},
	    {"::", "unspecified"},
	    {"fe80::1", "link-local"},
	    {"febf:ffff::1", "link-local"},
	    {"fc00::1", "unique local"},
	    {"fd00:ec2::254", "cloud metadata"}, /* the IPv6 metadata address of one cloud */
	    {"fec0::1", "site-local"},
	    {"ff02::1", "multicast"},
	    {"ff0e::1", "multicast"},
	    {"100::1", "discard"},
	    {"2001:db8::1", "documentation"},
	    /* IPv4 inside IPv6: mapped, compatible, NAT64 (64:ff9b::/96) */
	    {"::ffff:127.0.0.1", "loopback"},
	    {"::ffff:10.0.0.1", "private"},
	    {"::ffff:169.254.169.254", "cloud metadata"},
	    {"::ffff:100.64.0.1", "CGNAT"},
	    {"::ffff:224.0.0.1", "multicast"},
	    {"::127.0.0.1", "loopback"},
	    {"::192.168.1.1", "private"},
	    {"64:ff9b::7f00:1", "loopback"},
	    {"64:ff9b::a9fe:a9fe", "cloud metadata"},
	    {"64:ff9b::10.1.2.3", "private"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_refused(NULL, cases[i].addr, cases[i].what);
}

static void test_v6_allowed(void **state)
{
	static const char *const ok[] = {"2606:4700:4700::1111",
					 "2a00:1450:4001::200e",
					 "::ffff:8.8.8.8",
					 "64:ff9b::808:808",
					 "fe00::1", /* below fe80::/10 */
					 "2001:db9::1"};

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		expect_allowed(NULL, ok[i]);
}

static void test_allow_net(void **state)
{
	static const char *const nets[] = {"127.0.0.0/8", "10.0.0.5", "fd00::/8",
					   "169.254.169.254/32", "172.16.0.0/13"};
	struct webhook_guard *g = guard(nets, sizeof(nets) / sizeof(nets[0]));

	(void)state;
	expect_allowed(g, "127.0.0.1");
	expect_allowed(g, "127.9.9.9");
	expect_allowed(g, "::ffff:127.0.0.1"); /* the v4 network holds the mapped form */
	expect_allowed(g, "64:ff9b::7f00:1");
	expect_allowed(g, "10.0.0.5"); /* an address alone: /32 */
	expect_refused(g, "10.0.0.6", "private");
	expect_refused(g, "10.0.0.4", "private");
	expect_allowed(g, "fd00::1");
	expect_allowed(g, "fdff:ffff::1");
	expect_refused(g, "fc00::1", "unique local");
	expect_allowed(g, "169.254.169.254");
	expect_refused(g, "169.254.169.253", "link-local");
	expect_allowed(g, "172.23.255.255"); /* /13: 172.16 .. 172.23 */
	expect_refused(g, "172.24.0.1", "private");
	expect_refused(g, "::1", "loopback"); /* v4 loopback allowed, not v6 */
	expect_allowed(g, "8.8.8.8");
	webhook_guard_free(g);
}

static void test_allow_net_malformed(void **state)
{
	static const char *const bad[] = {
	    "",          "10.0.0.0/33",  "::/129",      "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x",
	    "300.1.1.1", "abc",          "10.0.0.0/ 8", "/8",        "10.0.0.0/+8", "10.0.0/8",
	    "1.2.3.4.5", "fe80::1%eth0", "10.0.0.0/8/8"};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct webhook_guard *g = NULL;
		char why[WEBHOOK_WHY_MAX] = "";
		const char *one[1] = {bad[i]};

		if (webhook_guard_new(one, 1, &g, why, sizeof(why)) != RCS_ERR_INVAL)
			fail_msg("'%s' was taken", bad[i]);
		assert_null(g);
		assert_non_null(strstr(why, "--webhook-allow-net"));
	}
	/* too many */
	{
		const char *many[65];
		struct webhook_guard *g = NULL;
		char why[WEBHOOK_WHY_MAX] = "";

		for (size_t i = 0; i < 65; i++)
			many[i] = "10.0.0.0/8";
		assert_int_equal(webhook_guard_new(many, 65, &g, why, sizeof(why)), RCS_ERR_INVAL);
		assert_null(g);
		assert_int_equal(webhook_guard_new(many, 64, &g, why, sizeof(why)), RCS_OK);
		webhook_guard_free(g);
	}
}

/* ---- URLs ---- */

static void expect_url(const struct webhook_guard *g, const char *url, bool ok, const char *why_has)
{
	char why[WEBHOOK_WHY_MAX];
	enum rcs_err err = webhook_url_check(g, url, why, sizeof(why));

	if ((err == RCS_OK) != ok)
		fail_msg("%s: expected %s, got %s (%s)", url, ok ? "ok" : "refused",
			 err == RCS_OK ? "ok" : "refused", why);
	if (why_has && strstr(why, why_has) == NULL)
		fail_msg("%s: reason '%s' does not name '%s'", url, why, why_has);
}

static void test_url_checks(void **state)
{
	static const char *const nets[] = {"10.0.0.0/8"};
	struct webhook_guard *g = guard(nets, 1);
	char longurl[WEBHOOK_URL_MAX + 32];

	(void)state;
	expect_url(NULL, "https://93.184.216.34/hook", true, NULL);
	expect_url(NULL, "http://93.184.216.34:8080/a/b?c=d", true, NULL);
	expect_url(NULL, "https://[2606:4700:4700::1111]/hook", true, NULL);
	/* scheme */
	expect_url(NULL, "ftp://93.184.216.34/x", false, "http:// or https://");
	expect_url(NULL, "file:///etc/passwd", false, "http:// or https://");
	expect_url(NULL, "gopher://93.184.216.34/", false, "http:// or https://");
	expect_url(NULL, "//93.184.216.34/", false, "http:// or https://");
	expect_url(NULL, "93.184.216.34", false, "http:// or https://");
	expect_url(NULL, "http://", false, NULL);
	expect_url(NULL, "http:///path", false, NULL);
	expect_url(NULL, "", false, NULL);
	expect_url(NULL, NULL, false, NULL);
	/* spaces and control characters */
	expect_url(NULL, "http://93.184.216.34/a b", false, NULL);
	expect_url(NULL, "http://93.184.216.34/a\r\nX-Evil: 1", false, NULL);
	/* user and password */
	expect_url(NULL, "http://u:p@93.184.216.34/x", false, "user name or password");
	expect_url(NULL, "http://user@93.184.216.34/x", false, "user name or password");
	expect_url(NULL, "https://:p@93.184.216.34/x", false, NULL);
	/* the address, literal in the URL */
	expect_url(NULL, "http://127.0.0.1:8080/", false, "loopback");
	expect_url(NULL, "http://127.1/", false, "loopback");
	expect_url(NULL, "http://2130706433/", false, "loopback"); /* 127.0.0.1 as a number */
	expect_url(NULL, "http://0x7f.0.0.1/", false, "loopback");
	expect_url(NULL, "http://[::1]/", false, "loopback");
	expect_url(NULL, "http://[::ffff:10.0.0.1]/", false, "private");
	expect_url(NULL, "http://169.254.169.254/latest/meta-data/", false, "metadata");
	expect_url(NULL, "http://10.1.2.3/", false, "private");
	expect_url(g, "http://10.1.2.3/", true, NULL);
	expect_url(g, "http://[::ffff:10.1.2.3]/", true, NULL);
	expect_url(g, "http://192.168.1.1/", false, "private");
	/* length */
	memset(longurl, 'a', sizeof(longurl) - 1);
	longurl[sizeof(longurl) - 1] = '\0';
	memcpy(longurl, "http://93.184.216.34/", 21);
	expect_url(NULL, longurl, false, NULL);
	webhook_guard_free(g);
}

/* ---- the signature ---- */

static void test_sign_vector(void **state)
{
	static const char body[] = "{\"id\":\"d1\",\"type\":\"job.status\"}";
	char sig[WEBHOOK_SIG_MAX];

	(void)state;
	/* printf '%s' '1767225600.{"id":"d1","type":"job.status"}' |
	 *   openssl dgst -sha256 -hmac 'whsec-0123456789abcdef' */
	assert_int_equal(
	    webhook_sign("whsec-0123456789abcdef", 1767225600, body, strlen(body), sig), RCS_OK);
	assert_string_equal(
	    sig,
	    "t=1767225600,v1=4f21b09e7f0d307f66fa4ccb4e7763d51f1c6edf03c7dbe647aabc3d017f49d1");
	/* printf '%s' '0.' | openssl dgst -sha256 -hmac k: an empty body at ts 0 */
	assert_int_equal(webhook_sign("k", 0, "", 0, sig), RCS_OK);
	assert_string_equal(
	    sig, "t=0,v1=6b4a4b8b3c40f1e8f53a3d36682e5f99f7ad2ac1df1c93dfe336f329167641e7");
	/* len, not the terminator, bounds the body */
	assert_int_equal(webhook_sign("k", 0, "xyz", 0, sig), RCS_OK);
	assert_string_equal(
	    sig, "t=0,v1=6b4a4b8b3c40f1e8f53a3d36682e5f99f7ad2ac1df1c93dfe336f329167641e7");
	/* another secret or time, another signature */
	assert_int_equal(
	    webhook_sign("whsec-0123456789abcdeF", 1767225600, body, strlen(body), sig), RCS_OK);
	assert_string_not_equal(
	    sig,
	    "t=1767225600,v1=4f21b09e7f0d307f66fa4ccb4e7763d51f1c6edf03c7dbe647aabc3d017f49d1");
	assert_int_equal(webhook_sign("k", 9223372036854775807LL, "", 0, sig), RCS_OK);
	assert_true(strncmp(sig, "t=9223372036854775807,v1=", 25) == 0);
	assert_int_equal(strlen(sig), 25 + 64);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_v4_refused), cmocka_unit_test(test_v4_allowed),
	    cmocka_unit_test(test_v6_refused), cmocka_unit_test(test_v6_allowed),
	    cmocka_unit_test(test_allow_net),  cmocka_unit_test(test_allow_net_malformed),
	    cmocka_unit_test(test_url_checks), cmocka_unit_test(test_sign_vector),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

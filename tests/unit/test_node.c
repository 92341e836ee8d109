/* Unit tests of coordinator/node.c: the node id's checks, its default and where it is kept
 * (docs/coordinator.md, node_id). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node.h"

static void test_valid(void **state)
{
	char long_id[NODE_ID_MAX + 2];

	(void)state;
	assert_true(node_id_valid("a"));
	assert_true(node_id_valid("host-1_A"));
	assert_false(node_id_valid(""));
	assert_false(node_id_valid(NULL));
	assert_false(node_id_valid("a.b"));
	assert_false(node_id_valid("a b"));
	assert_false(node_id_valid("a/b"));
	assert_false(node_id_valid("+"));
	memset(long_id, 'x', sizeof(long_id));
	long_id[NODE_ID_MAX] = '\0';
	assert_true(node_id_valid(long_id));
	long_id[NODE_ID_MAX] = 'x';
	long_id[NODE_ID_MAX + 1] = '\0';
	assert_false(node_id_valid(long_id));
}

static void test_resolve(void **state)
{
	char dir[] = "/tmp/rcs-node-XXXXXX", keep[64], a[NODE_ID_MAX + 1], b[NODE_ID_MAX + 1];
	char why[256] = "", line[64];
	bool kept = false;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(keep, sizeof(keep), "%s/node-id", dir);
	/* given: taken as it is, nothing kept */
	assert_int_equal(node_id_resolve("n1", keep, a, &kept, why, sizeof(why)), RCS_OK);
	assert_string_equal(a, "n1");
	assert_true(kept);
	assert_int_equal(access(keep, F_OK), -1);
	assert_int_equal(node_id_resolve("n.1", keep, a, NULL, why, sizeof(why)), RCS_ERR_INVAL);
	assert_non_null(strstr(why, "--node-id"));
	/* generated once, then the kept one */
	assert_int_equal(node_id_resolve(NULL, keep, a, &kept, why, sizeof(why)), RCS_OK);
	assert_true(node_id_valid(a));
	assert_true(strlen(a) > 9 && a[strlen(a) - 9] == '-');
	assert_int_equal(node_id_resolve(NULL, keep, b, &kept, why, sizeof(why)), RCS_OK);
	assert_string_equal(a, b);
	assert_true(kept);
	/* not kept: a new one every time */
	assert_int_equal(node_id_resolve(NULL, NULL, b, &kept, why, sizeof(why)), RCS_OK);
	assert_string_not_equal(a, b);
	assert_false(kept);
	/* a kept file that isn't a node id (an operator's "coord.1") is an error, kept as it is */
	f = fopen(keep, "w");
	assert_non_null(f);
	fputs("coord.1\n", f);
	fclose(f);
	assert_int_equal(node_id_resolve(NULL, keep, b, &kept, why, sizeof(why)), RCS_ERR_INVAL);
	assert_non_null(strstr(why, "not a node id"));
	f = fopen(keep, "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f));
	fclose(f);
	assert_string_equal(line, "coord.1\n");
	/* an empty one (a crash while an older version wrote it): a new id */
	f = fopen(keep, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(node_id_resolve(NULL, keep, b, &kept, why, sizeof(why)), RCS_OK);
	assert_true(node_id_valid(b) && kept);
	assert_string_not_equal(a, b);
	unlink(keep);
	/* a directory where nothing can be written: an id all the same, not kept */
	assert_int_equal(
	    node_id_resolve(NULL, "/nonexistent-dir/node-id", b, &kept, why, sizeof(why)), RCS_OK);
	assert_true(node_id_valid(b));
	assert_false(kept);
	rmdir(dir);
}

static void test_keep_file(void **state)
{
	char *p;

	(void)state;
	unsetenv("STATE_DIRECTORY");
	p = node_id_keep_file("/var/lib/x/rcs.db");
	assert_string_equal(p, "/var/lib/x/rcs.db.node-id");
	free(p);
	assert_null(node_id_keep_file("postgresql://u@h/db"));
	setenv("STATE_DIRECTORY", "/var/lib/rcs-coordinator:/var/lib/other", 1);
	p = node_id_keep_file("postgresql://u@h/db");
	assert_string_equal(p, "/var/lib/rcs-coordinator/node-id");
	free(p);
	unsetenv("STATE_DIRECTORY");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_valid),
	    cmocka_unit_test(test_resolve),
	    cmocka_unit_test(test_keep_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

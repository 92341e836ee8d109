/* quiet.c: names ping() only in a comment, a string and a character: no arrow to ping.c, so
 * no circle with it. Its static helper is its own: long.c's helper is no arrow here. */
#include <stdio.h>

static int helper(int x)
{
	return x - 1;
}

void quiet(void)
{
	// ping(1);
	printf("ping(%d) \"pong(2)\"\n", helper(1));
	putchar('(');
}

/* ping.c and pong.c: a circle of calls and of includes. */
#include "pong.h"
#include "quiet.h"

int ping(int n)
{
	quiet();
	return n > 0 ? pong(n - 1) : 0;
}

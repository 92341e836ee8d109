/* pong.c */
#include "ping.h"

int pong(int n)
{
	return n > 0 ? ping(n - 1) : 0;
}

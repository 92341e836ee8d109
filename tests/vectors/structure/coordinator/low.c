/* low.c */
#include "low_int.h"

int low(void)
{
	return 0;
}

/* low_int.h: the private header of low.c, which includes the public one back up. */
#include "low.h"

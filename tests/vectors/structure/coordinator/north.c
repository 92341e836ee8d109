/* north.c and south.c: a circle of includes alone. */
#include "north.h"

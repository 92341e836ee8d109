/* south.c */
#include "south.h"

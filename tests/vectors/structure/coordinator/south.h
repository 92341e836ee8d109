/* south.h */
#include "north.h"

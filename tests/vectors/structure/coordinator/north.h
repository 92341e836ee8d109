/* north.h */
#include "south.h"

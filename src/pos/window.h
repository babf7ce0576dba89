/* window.h - window row maps (src/pos/window.c); private to the library. */
#ifndef RA_WINDOW_H
#define RA_WINDOW_H

#include "base/internal.h"

/* map (B*nW*N) = for each window token of ra_window_partition's output, the
 * row of x (B, D, H, W) it copies, or -1 for padding. Rows of x must fit in
 * int32 (RA_ERR_ARG otherwise). */
ra_status rai_window_rowmap(int32_t *map, int b, const ra_window_spec *g);

#endif

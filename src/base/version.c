/* version.c - what the library is and what it runs on (relattn --version). */
#include "base/internal.h"

#include <cblas.h>
#include <stdio.h>

const char *ra_version(void) { return RA_VERSION_STRING; }

/* OpenBLAS names its build and the core its dynamic dispatch chose; the
 * core decides the speed of every product left to it (its SSE3 "Prescott"
 * kernels on a CPU it does not know are 2x slower than its AVX2 ones). */
const char *ra_blas_info(void) {
    static char info[256];
#if defined(OPENBLAS_VERSION) || defined(OPENBLAS_CONST)
    snprintf(info, sizeof info, "%s (core %s)", openblas_get_config(), openblas_get_corename());
#else
    snprintf(info, sizeof info, "CBLAS");
#endif
    return info;
}

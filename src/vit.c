/* vit.c - placeholder while the vit arch is written (see model_internal.h). */
#include "model_internal.h"

static ra_status todo(ra_model *m, const ra_st_file *f) {
    (void)m, (void)f;
    return ra_fail(RA_ERR_FORMAT, "this arch is not implemented yet");
}
const ra_arch_ops ra_vit_ops = {.name = "vit", .arch = RA_ARCH_VIT, .declare = todo,
                                .build = todo};

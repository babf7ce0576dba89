/* swin.c - placeholder while the swin arch is written (see model_internal.h). */
#include "model_internal.h"

static ra_status todo(ra_model *m, const ra_st_file *f) {
    (void)m, (void)f;
    return ra_fail(RA_ERR_FORMAT, "this arch is not implemented yet");
}
const ra_arch_ops ra_swin_block_ops = {.name = "swin_block", .arch = RA_ARCH_SWIN_BLOCK,
                                       .declare = todo, .build = todo};
const ra_arch_ops ra_swin_ops = {.name = "swin", .arch = RA_ARCH_SWIN, .declare = todo,
                                 .build = todo};

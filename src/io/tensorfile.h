/* tensorfile.h - tensor files assembled in memory (src/io/safetensors.c).
 *
 * An ra_st_file is what the model loader reads: named tensors, each read
 * with ra_st_read_f32 / ra_st_read_i64, and string metadata. A safetensors
 * file is one (ra_st_open). So is a file built here from other containers
 * (a PyTorch checkpoint's storages, src/io/torch.c) or derived from another
 * file (renamed, filtered or concatenated tensors, metadata added), without
 * copying any tensor: each tensor is a list of byte ranges (parts), read in
 * order into consecutive elements of the destination, from a file
 * descriptor (pread) or from memory the file keeps alive. */
#ifndef RA_IO_TENSORFILE_H
#define RA_IO_TENSORFILE_H

#include "base/internal.h"

/* One byte range of a tensor: nbytes at p in memory, and, when fd >= 0,
 * the same bytes at offset off of fd (which the reader then uses: a file
 * cut short later is an error, never a SIGBUS). */
typedef struct rai_st_part {
    const unsigned char *p;
    size_t nbytes;
    int fd;
    int64_t off;
} rai_st_part;

/* An empty tensor file (no tensors, no metadata). */
ra_status rai_st_new(ra_st_file **out);

/* Add tensor name (copied) of dtype and shape made of parts in order
 * (their bytes in total = dtype size x element count, else RA_ERR_FORMAT;
 * the part array is copied, the bytes are not). A tensor of one part in
 * memory gets t->data; a tensor of several gets t->data = NULL and is read
 * through ra_st_read_*. Duplicate names are refused by rai_st_finish. */
ra_status rai_st_add(ra_st_file *f, const char *name, ra_dtype dtype, int ndim,
                     const int64_t *shape, const rai_st_part *parts, int nparts);

/* The parts of tensor t of f (NULL / 0 if t is not f's). */
int rai_st_parts(const ra_st_file *f, const ra_st_tensor *t, const rai_st_part **parts);

/* f keeps what its parts point into: on ra_st_close, drop(ctx) is called
 * (in reverse order of the calls). On failure drop(ctx) is called at once. */
ra_status rai_st_keep(ra_st_file *f, void (*drop)(void *), void *ctx);
/* f keeps src open (a file derived from src): closed with f. */
ra_status rai_st_keep_file(ra_st_file *f, ra_st_file *src);

/* Set metadata key to value (both copied), replacing an earlier value;
 * a new key goes last. value NULL removes the key. */
ra_status rai_st_set_meta(ra_st_file *f, const char *key, const char *value);

/* Sort the names (ra_st_find) and refuse duplicates: call once, after the
 * last rai_st_add and before the file is read. */
ra_status rai_st_finish(ra_st_file *f);

/* A file derived from src: the same metadata, no tensors yet; src is kept
 * (closed with the new file, or at once on failure). */
ra_status rai_st_derive(ra_st_file **out, ra_st_file *src);

/* The same without keeping src, which must outlive the new file. */
ra_status rai_st_view(ra_st_file **out, const ra_st_file *src);

/* Add to f (derived from src) src's tensor t under a new name. */
ra_status rai_st_add_from(ra_st_file *f, const ra_st_file *src, const ra_st_tensor *t,
                          const char *name);

/* Human name of a dtype ("F32"). */
const char *rai_st_dtype_name(ra_dtype d);
/* Its size in bytes (0 if invalid). */
unsigned rai_st_dtype_size(ra_dtype d);

#endif

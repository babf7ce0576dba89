/* torch.h - PyTorch checkpoints as tensor files (src/io/torch.c;
 * docs/reference.md, section 2, "PyTorch checkpoints").
 *
 * What torch.save writes since PyTorch 1.6: a zip archive of stored
 * entries, <dir>/data.pkl (the pickled object, read by io/pickle.h without
 * executing anything) and one <dir>/data/<key> entry per storage. The state
 * dict found in the object becomes a tensor file (io/tensorfile.h) whose
 * contiguous tensors are byte ranges of the file itself, mapped once and
 * never copied; a strided view (a transposed weight) is gathered into
 * memory the file keeps. */
#ifndef RA_IO_TORCH_H
#define RA_IO_TORCH_H

#include "base/internal.h"

/* Limits of the container (those of the pickle are in io/pickle.h). */
#define RAI_TORCH_MAX_ENTRIES (1 << 20)     /* zip entries */
#define RAI_TORCH_MAX_NAME 1024             /* bytes of an entry's name */
#define RAI_TORCH_MAX_VERSION 15            /* the archive's format version, from 1 */
#define RAI_TORCH_SEARCH_DEPTH 4            /* how deep the state dict is looked for */
#define RAI_TORCH_GATHER_SLACK ((int64_t)64 << 20)   /* strided views gathered: at most
                                                        2 x the file's size + this, in bytes */

/* PyTorch's zip checkpoint at path as a tensor file: the state dict found
 * at key (NULL: automatic); found (n bytes, may be NULL) gets the key path
 * used ("" for the root); what (may be NULL) gets what the checkpoint
 * holds, as rai_torch_describe writes it, from the same reading (malloc'ed).
 * RA_ERR_IO (cannot read it), RA_ERR_FORMAT (with the reason: a refused
 * global, a damaged archive, a legacy file, no state dict, ...),
 * RA_ERR_NOMEM. */
ra_status rai_torch_open(ra_st_file **out, const char *path, const char *key, char *found, size_t n,
                         char **what);
/* The same from len bytes at buf (copied). */
ra_status rai_torch_open_memory(ra_st_file **out, const void *buf, size_t len, const char *key,
                                char *found, size_t n);

/* 1 for a zip checkpoint, 2 for the legacy (pre-1.6) format, 0 otherwise
 * (reads the first bytes; 0 as well when the file cannot be read). */
int rai_torch_sniff(const char *path);

/* What a checkpoint holds, one line per entry of its root ("model: dict of
 * 173 tensors", "epoch: int 300", "args: argparse.Namespace (not read)"),
 * then the state dict the automatic choice takes ("selected: model (173
 * tensors)", or why none): malloc'ed text, every line ending in '\n'. */
ra_status rai_torch_describe(const char *path, char **text);
ra_status rai_torch_describe_memory(const void *buf, size_t len, char **text);

#endif

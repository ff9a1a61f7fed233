/* spm_shim.h — the C interface of spm_shim.cc, the one C++ file of ctrain, which reads a
 * SentencePiece .model with the SentencePiece library (its only interface is C++). Used by
 * tokenizer_spm.c; compiled only when the build found the library (CT_HAVE_SENTENCEPIECE).
 * Functions that can fail return 0, or -1 with a message in err (err_cap bytes, NUL-ended);
 * no C++ exception crosses them. */
#ifndef CT_SPM_SHIM_H
#define CT_SPM_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CtSpmModel CtSpmModel;

/* Load the model file at path. */
int ct_spm_load(const char *path, CtSpmModel **model, char *err, size_t err_cap);
void ct_spm_free(CtSpmModel *model);

/* Number of pieces (the vocabulary size; ids are 0 .. size-1). */
int ct_spm_size(const CtSpmModel *model);

/* Piece id's text (the model's bytes, *len of them; not NUL-ended if the piece holds a NUL)
 * and its type as the library reports it, a PieceType (tokenizer.h; user-defined pieces are normal). */
const char *ct_spm_piece(const CtSpmModel *model, int id, size_t *len);
int ct_spm_type(const CtSpmModel *model, int id);

/* The library's own decoding of n ids into a new NUL-ended string (free() it), *len bytes. */
int ct_spm_decode(const CtSpmModel *model, const int *ids, int n, char **text, size_t *len, char *err,
                  size_t err_cap);

/* The library's encoding of text (len bytes) into a new array of *n ids (malloc'ed, free() it;
 * NULL when *n is 0): the ids of Python's sp.encode(text). */
int ct_spm_encode(const CtSpmModel *model, const char *text, size_t len, int **ids, int *n, char *err,
                  size_t err_cap);

/* The model's beginning-of-sequence id (<s>), or -1 when it has none. */
int ct_spm_bos_id(const CtSpmModel *model);

/* Like ct_spm_encode, also giving each piece's span of the input: piece i covers bytes
 * [begin[i], end[i]) of text (the library's surface; byte pieces after the first of one
 * character cover nothing). The three arrays are the caller's, grown with realloc to *cap
 * entries as needed (start with NULLs and 0). Safe to call from several threads at once on one
 * model (the library's encoding is const). */
int ct_spm_encode_spans(const CtSpmModel *model, const char *text, size_t len, int **ids, unsigned **begin,
                        unsigned **end, size_t *cap, int *n, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif

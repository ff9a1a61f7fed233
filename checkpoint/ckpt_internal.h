/* ckpt_internal.h — what the checkpoint files share among themselves (not part of the API):
 * the format's names, the list of tensors a model has, HDF5 attribute/dataset helpers, the
 * content checksum, the parsed metadata of a file and directory helpers.
 * Functions documented "lock held" must be called with ct_hdf5_lock() held. */
#ifndef CT_CKPT_INTERNAL_H
#define CT_CKPT_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"

#define CKPT_FORMAT "ctrain-checkpoint"
/* 2: /loader/train/file_crc32 and file_sample_crc32 (the data's identity). Format 1 files
 * (without them) are still read; a resume from one compares paths and token counts only. */
#define CKPT_FORMAT_VERSION 2
#define CKPT_FORMAT_VERSION_OLDEST 1
/* Chunk size cap in elements: whole tensor below it (one Fletcher32 checksum per tensor),
 * slabs of rows above it so a damaged region is found without huge chunks. */
#define CKPT_CHUNK_MAX_ELEMENTS ((int64_t)1 << 20)
/* Longest object path in a checkpoint ("/optimizer/<64-char name>/exp_avg_sq" fits). */
#define CKPT_PATH_MAX 256

/* ---- test hook: tests set it to simulate a crash (e.g. raise(SIGKILL)) at a named stage of
 * checkpoint_save; NULL in production. Stages: "tmp-half-written", "tmp-written",
 * "renamed", "latest-tmp-written", "latest-renamed", "pruning". ---- */
extern void (*ckpt_test_stage_hook)(const char *stage);
void ckpt_stage(const char *stage);

/* ---- the tensors of a model: /model/<name> and its optimizer buffers ---- */
typedef enum {
    CKPT_BUF_PARAMS,
    CKPT_BUF_EXP_AVG,
    CKPT_BUF_EXP_AVG_SQ,
    CKPT_BUF_MOMENTUM,
    CKPT_BUF_EMA, /* /ema/<name> */
    CKPT_BUF_SWA, /* /swa/<name> */
} CkptBuffer;

/* The optional state a checkpoint holds, decided by its configuration (the run's when writing,
 * the file's own /config when reading): /ema with ema_enabled, /swa with SWA
 * (train_state_has_swa), /qat with qat_enabled or late_qat, /loop with num_loops > 0 (depth
 * recurrence's switch). Files without them are as before. */
typedef struct {
    int ema, swa, qat, loop;
} CkptOptional;
CkptOptional ckpt_optional(const Config *cfg);

typedef struct {
    char path[CKPT_PATH_MAX]; /* "/model/tok_emb.weight", "/optimizer/tok_emb.weight/exp_avg" */
    const ParamInfo *param;
    CkptBuffer buffer;
} CkptTensor;

/* Every tensor of the model in file order (all /model first, then the optimizer buffers in
 * parameter order, then /ema and /swa as `opt` has them, each in parameter order); caller frees
 * *list. */
int ckpt_tensor_list(const ModelSpec *spec, CkptOptional opt, CkptTensor **list, int *count);
/* The TrainState buffer a tensor lives in. */
float *ckpt_tensor_buffer(const TrainState *st, CkptBuffer b);
/* "[1024, 512]" */
void ckpt_format_shape(int ndim, const int64_t *dims, char *buf, size_t cap);

/* ---- HDF5 helpers (lock held) ---- */

/* File access list for every checkpoint open: best-effort locking (HDF5_USE_FILE_LOCKING
 * honoured), the 1.8 object format (checksummed object headers, readable by every HDF5 since
 * 1.8) and a strong close (closing the file closes everything in it). */
hid_t ckpt_fapl(void);
/* Open a checkpoint read-only with messages a user can act on (missing, a directory, not
 * HDF5, truncated). */
hid_t ckpt_open_read(const char *path);

/* Readers of attributes a checkpoint must have (writers: h5util's ct_h5_attr_write_*): `file`
 * and `where` ("/loader/train") only name things in messages. A missing attribute, one holding
 * more than one value, or one of another type fails naming it. */
int ckpt_attr_read_i64(hid_t obj, const char *file, const char *where, const char *name, int64_t *value);
int ckpt_attr_read_f64(hid_t obj, const char *file, const char *where, const char *name, double *value);
int ckpt_attr_read_str(hid_t obj, const char *file, const char *where, const char *name, char **value);

/* Shape of a dataset: returns its rank (dims filled, up to 8) or -1. */
int ckpt_dataset_shape(hid_t dset, hsize_t *dims);

/* ---- objects of a file and the content checksum ---- */
typedef struct {
    char *path; /* "/model/tok_emb.weight"; the root group is "/" */
    int is_dataset;
} CkptObject;

typedef struct {
    int count;
    CkptObject *items; /* sorted by path (byte order), root first */
} CkptObjects;

/* Every object reachable from the root (soft and external links are an error). */
int ckpt_list_objects(hid_t file, const char *path, CkptObjects *out);
void ckpt_objects_free(CkptObjects *objs);
/* Index of path in objs, or -1. */
int ckpt_objects_find(const CkptObjects *objs, const char *path);

/* The content checksum (docs/checkpoint-format.md "Content checksum"): reads every attribute
 * (except the root's content_crc32) and every dataset in full, so a Fletcher32 failure is
 * reported naming the dataset. */
int ckpt_content_crc(hid_t file, const char *path, const CkptObjects *objs, uint32_t *crc);

/* ---- parsed metadata of a checkpoint ---- */
typedef struct {
    int64_t format_version;
    int64_t step, train_tokens, world_size, adam_step;
    double training_time_ms;
    char *created, *ctrain_version, *device;
    char *stack; /* the root attribute `stack`, NULL when the file has none */
    CheckpointLineage lineage; /* the lineage attributes (id "" when the file has none) */
    uint32_t content_crc32;
    Config cfg;                    /* /config, defaults for keys the file lacks */
    unsigned char cfg_present[CT_CONFIG_NUM_KEYS]; /* per key of the table: found in the file */
    int num_unknown_keys;          /* /config attributes this build does not know */
    char **unknown_keys;
    ModelSpec spec; /* the model /config describes */
    CkptOptional optional; /* the optional state /config says the file holds */
    int64_t swa_count;     /* /swa attribute count (0 without /swa) */
    int64_t qat_active;    /* /qat attribute active (0 without /qat) */
    int64_t loop_active;   /* /loop attribute active (0 without /loop) */
    LoaderCursor cursor;
    int num_files;
    char **files;
    int64_t *file_tokens;
    int64_t *file_crc32, *file_sample_crc32; /* per file (-1: no tokens_crc32); NULL in format 1 */
    int num_extras;
    char **extra_names;
    double *extra_values;
} CkptMeta;

/* The optional lineage root attributes of an open file (lock held): read (absent ones keep
 * "" and -1; a present one of the wrong type or size fails naming it), and written (nothing
 * when l->id is ""). */
int ckpt_lineage_read(hid_t file, const char *path, CheckpointLineage *l);
int ckpt_lineage_write(hid_t file, const CheckpointLineage *l);
/* checkpoint_read_lineage in this process (takes the lock): for pruning, which runs while the
 * loader's thread may hold the lock, where a child process must not be forked. */
int ckpt_read_lineage_here(const char *path, CheckpointLineage *l, int64_t *step, uint32_t *content_crc32);

/* Read the root attributes, /config, /optimizer's adam_step, /loader/train and /metrics,
 * checking their types and the format attributes. Lock held. */
int ckpt_meta_read(hid_t file, const char *path, CkptMeta *m);
void ckpt_meta_free(CkptMeta *m);

/* Check that the file's objects are exactly those of the model m describes, with float32
 * tensors of the right shapes, and the loader cursor against the recorded files. Lock held. */
int ckpt_check_structure(hid_t file, const char *path, const CkptMeta *m, const CkptObjects *objs);

/* 1 (with *version) if path is a checkpoint of a newer format than this ctrain reads: such a
 * file is neither resumed from, nor skipped in favour of an older one, nor deleted. 0 for
 * anything else, including unreadable files (no message). Takes the lock. */
int ckpt_newer_format(const char *path, int64_t *version);
/* 1 if path is named step_N.h5 but its step attribute says another step (set in *held); 0 when
 * the name and step agree, the name is no step name, or the file cannot be read. */
int ckpt_misnamed(const char *path, int64_t *held);

/* The whole of checkpoint_verify on an open file; fills *m (freed by the caller even on
 * failure). Lock held. */
int ckpt_verify_open(hid_t file, const char *path, CkptMeta *m);


/* ---- directory helpers ---- */

/* step of a final checkpoint file name "step_<digits>.h5", or -1 if name is not one. */
int64_t ckpt_name_step(const char *name);
/* The step_*.h5 files of dir sorted by descending step (names only). Returns the count, 0 if
 * dir does not exist, -1 on error. Caller frees with ckpt_free_names. */
int ckpt_list_dir(const char *dir, char ***names);
void ckpt_free_names(char **names, int count);
/* fsync a file or directory by path; EINVAL (file systems that cannot sync directories) is
 * not an error. */
int ckpt_fsync_path(const char *path, int is_dir);
/* Point dir/latest at `name` atomically (temporary file, fsync, rename, fsync dir). */
int ckpt_write_latest(const char *dir, const char *name);
/* The file name dir/latest holds: 1 with name set, 0 if there is no latest, -1 (with a
 * message) if it cannot be read or does not hold a checkpoint file name. */
int ckpt_read_latest(const char *dir, char *name, size_t cap);
/* Delete the oldest step_*.h5 beyond the `keep` newest, never `protect` nor the file latest
 * names, and leftover temporary files of interrupted saves; a file holding another step than
 * its name says is neither counted among the kept nor deleted. Failures print a warning. */
void ckpt_prune(const char *dir, int keep, const char *protect);

/* ---- printing (ckpt_info.c) ---- */

/* "12.0 KiB" */
void ckpt_format_bytes(double bytes, char *buf, size_t cap);

#endif

/* golf_import.h — the HDF5 copies of DATA_PATH's shards (golf_env.h). One folder per set of
 * inputs, CACHE/vocab<V>-<sp<tokenizer crc32>|notok>-<crc32 of import.txt>/, holding one .h5 per
 * shard and import.txt (what it was made from: DATA_PATH, vocab_size, bos_id, the tokenizer's
 * size and checksum, each shard's name, size and modification time). A copy is never changed
 * once made: it is imported into <name>.tmp beside it and renamed into place when complete, so
 * other settings or changed shards get a copy of their own and a failed or stopped import leaves
 * every existing copy as it was. Every run reading a copy holds <name>.lock shared until it
 * ends; a copy made from shards that have changed since is removed by the next import only when
 * no run holds it. CACHE/.lock serializes the checks and imports of all processes. */
#ifndef CT_GOLF_IMPORT_H
#define CT_GOLF_IMPORT_H

#include <stddef.h>
#include <stdint.h>

/* What DATA_PATH's import is made from and how it is named for messages. */
typedef struct {
    const char *data_path, *cache;  /* the shards' folder; where the copies go */
    const char *tokenizer;          /* a SentencePiece model, or NULL for none */
    int64_t vocab_size;
    const char *vocab_name, *tokenizer_name; /* as the user set them ("VOCAB_SIZE", "TOKENIZER_PATH") */
} GolfImport;

/* The folder of the copy for these inputs (written to dir), without touching anything. */
int golf_import_copy_dir(const GolfImport *g, char *dir, size_t cap);

/* Make the copy if there is none (or reuse it) and hold it shared until the process ends;
 * dir receives its folder. Returns 0, or -1 with a message (also when a stop signal ended the
 * import: its partial files are then removed, and stop_requested() says so). */
int golf_import_prepare(const GolfImport *g, char *dir, size_t cap);

#endif

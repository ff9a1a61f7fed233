/* data_pieces.h — private to src/data: the HDF5 side of a tokenizer's pieces (/tokenizer/pieces,
 * /tokenizer/piece_type and their attributes, docs/data-format.md), called by data.c with the
 * HDF5 lock held and the file already open. The public functions are in data.h. */
#ifndef CT_DATA_PIECES_H
#define CT_DATA_PIECES_H

#include <hdf5.h>

#include "data.h"

/* Read the pieces of an open file whose /tokenizer group may or may not hold them (*present
 * says); vocab_size -1 accepts any count. Messages name path. Lock held. */
int data_pieces_read_locked(hid_t file, const char *path, int64_t vocab_size, TokenPieces *pieces, int *present);

/* Create /tokenizer/pieces and /tokenizer/piece_type in group (the open /tokenizer group of the
 * file named path). Lock held. */
int data_pieces_write_locked(hid_t group, const char *path, const TokenPieces *pieces);

#endif

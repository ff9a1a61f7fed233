/* tokenizer_pieces.c — a tokenizer's pieces in a data file (docs/data-format.md): /tokenizer/pieces,
 * one variable-length UTF-8 string per token id (what h5py writes for a list of Python str,
 * and what h5dump prints as text), /tokenizer/piece_type (uint8, SentencePiece's type numbers)
 * and the decoding attributes of /tokenizer/pieces: leading_space and unk_surface; read from
 * any file holding /tokenizer, and written into one being made (token_writer.c,
 * tokenizer_tables.c). Every HDF5 call runs under ct_hdf5_lock() (h5util.h). */
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data_internal.h"
#include "h5util.h"

static const char *const LEADING_SPACE_NAMES[] = {"keep", "strip_first", "strip_until_text"};
#define DEFAULT_UNK_SURFACE " \xE2\x81\x87 " /* SentencePiece's: " ⁇ " */

void token_pieces_free(TokenPieces *p) {
    if (!p) return;
    for (int64_t i = 0; p->text && i < p->vocab_size; i++) free(p->text[i]);
    free(p->text);
    free(p->type);
    free(p->unk_surface);
    memset(p, 0, sizeof *p);
}

/* ---- reading ---- */

/* A 1-D dataset of the group: its length, or -1 with a message naming expect. */
static int64_t table_length(hid_t dset, const char *path, const char *name, const char *expect) {
    hid_t space = H5Dget_space(dset);
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t n = 0;
    if (rank == 1) H5Sget_simple_extent_dims(space, &n, NULL);
    H5Sclose(space);
    if (rank != 1)
        return ct_fail("'%s': /tokenizer/%s has %d dimensions, expected a 1-D table of %s", path, name, rank, expect);
    return (int64_t)n;
}

/* Read /tokenizer/pieces (variable-length strings) into new C strings. */
static int read_piece_text(hid_t group, const char *path, int64_t vocab_size, TokenPieces *p) {
    hid_t dset = H5Dopen2(group, "pieces", H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open /tokenizer/pieces as a dataset", path);
    hid_t file_type = H5Dget_type(dset);
    int rc = -1;
    char type_name[96];
    ct_h5_describe_type(file_type, type_name, sizeof type_name);
    if (H5Tget_class(file_type) != H5T_STRING || H5Tis_variable_str(file_type) <= 0) {
        ct_fail("'%s': /tokenizer/pieces has dtype %s, expected variable-length strings (h5py.string_dtype())",
                path, type_name);
        goto done;
    }
    int64_t n = table_length(dset, path, "pieces", "one string per token id");
    if (n < 0) goto done;
    if (vocab_size >= 0 && n != vocab_size) {
        ct_fail("'%s': /tokenizer/pieces has %lld entries, expected vocab_size = %lld", path, (long long)n,
                (long long)vocab_size);
        goto done;
    }
    if (n < 1) {
        ct_fail("'%s': /tokenizer/pieces is empty", path);
        goto done;
    }
    char **raw = ct_calloc((size_t)n, sizeof(char *), "tokenizer pieces");
    hid_t mem_type = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem_type, H5T_VARIABLE);
    H5Tset_cset(mem_type, H5Tget_cset(file_type)); /* HDF5 does not convert between charsets */
    if (H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
        ct_h5_fail("'%s': cannot read /tokenizer/pieces", path);
    } else {
        p->vocab_size = n;
        p->text = ct_calloc((size_t)n, sizeof(char *), "tokenizer pieces");
        for (int64_t i = 0; i < n; i++) p->text[i] = ct_strdup(raw[i] ? raw[i] : "");
        rc = 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (raw[i]) H5free_memory(raw[i]);
    free(raw);
    H5Tclose(mem_type);
done:
    H5Tclose(file_type);
    H5Dclose(dset);
    return rc;
}

int token_piece_byte(const char *s) {
    static const char hex[] = "0123456789abcdef";
    if (strlen(s) != 6 || strncmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k] >= 'A' && s[k] <= 'F' ? (char)(s[k] - 'A' + 'a') : s[k];
        const char *d = c ? strchr(hex, c) : NULL;
        if (!d) return -1;
        v = v * 16 + (int)(d - hex);
    }
    return v;
}

/* Read and check /tokenizer/piece_type against the pieces read already. */
static int read_piece_types(hid_t group, const char *path, TokenPieces *p) {
    htri_t exists = H5Lexists(group, "piece_type", H5P_DEFAULT);
    if (exists <= 0)
        return exists < 0 ? ct_h5_fail("'%s': cannot look up /tokenizer/piece_type", path)
                          : ct_fail("'%s': /tokenizer has pieces but no piece_type table (uint8, one per piece)", path);
    hid_t dset = H5Dopen2(group, "piece_type", H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open /tokenizer/piece_type as a dataset", path);
    hid_t file_type = H5Dget_type(dset);
    char type_name[96];
    ct_h5_describe_type(file_type, type_name, sizeof type_name);
    int is_int = H5Tget_class(file_type) == H5T_INTEGER;
    H5Tclose(file_type);
    int64_t n = is_int ? table_length(dset, path, "piece_type", "one type per piece") : -1;
    int rc = 0;
    if (!is_int)
        rc = ct_fail("'%s': /tokenizer/piece_type has dtype %s, expected uint8", path, type_name);
    else if (n < 0)
        rc = -1;
    else if (n != p->vocab_size)
        rc = ct_fail("'%s': /tokenizer/piece_type has %lld entries but /tokenizer/pieces has %lld", path,
                     (long long)n, (long long)p->vocab_size);
    if (rc == 0) {
        p->type = ct_malloc((size_t)n, "piece types");
        if (H5Dread(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, p->type) < 0)
            rc = ct_h5_fail("'%s': cannot read /tokenizer/piece_type", path);
    }
    H5Dclose(dset);
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        unsigned t = p->type[i];
        if (t == 4) p->type[i] = CT_PIECE_NORMAL; /* SentencePiece's USER_DEFINED decodes as normal */
        else if (t != CT_PIECE_NORMAL && t != CT_PIECE_UNKNOWN && t != CT_PIECE_CONTROL && t != CT_PIECE_UNUSED &&
                 t != CT_PIECE_BYTE)
            rc = ct_fail("'%s': /tokenizer/piece_type[%lld] = %u, expected a SentencePiece piece type: 1 normal, "
                         "2 unknown, 3 control, 4 user-defined, 5 unused or 6 byte", path, (long long)i, t);
        else if (t == CT_PIECE_BYTE && token_piece_byte(p->text[i]) < 0)
            rc = ct_fail("'%s': piece %lld is a byte piece (type 6) but reads '%s', expected <0xNN>", path,
                         (long long)i, p->text[i]);
    }
    return rc;
}

/* The optional string attribute `name` of /tokenizer/pieces, or a copy of fallback. */
static int read_text_attribute(hid_t dset, const char *path, const char *name, const char *fallback, char **out) {
    hid_t attr;
    int found = ct_h5_attr_find(dset, path, "/tokenizer/pieces", name, &attr);
    if (found < 0) return -1;
    if (!found) {
        *out = ct_strdup(fallback);
        return 0;
    }
    int rc = ct_h5_attr_read_str(attr, path, "/tokenizer/pieces", name, out);
    H5Aclose(attr);
    return rc;
}

static int read_decoding_attributes(hid_t group, const char *path, TokenPieces *p) {
    hid_t dset = H5Dopen2(group, "pieces", H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open /tokenizer/pieces", path);
    char *rule = NULL;
    int rc = read_text_attribute(dset, path, "leading_space", LEADING_SPACE_NAMES[0], &rule);
    if (rc == 0) rc = read_text_attribute(dset, path, "unk_surface", DEFAULT_UNK_SURFACE, &p->unk_surface);
    H5Dclose(dset);
    if (rc != 0) {
        free(rule);
        return -1;
    }
    int known = 0;
    for (int k = 0; k < 3; k++)
        if (!strcmp(rule, LEADING_SPACE_NAMES[k])) {
            p->leading_space = (LeadingSpaceRule)k;
            known = 1;
        }
    if (!known)
        rc = ct_fail("'%s': attribute leading_space of /tokenizer/pieces is '%s', expected keep, strip_first or "
                     "strip_until_text", path, rule);
    free(rule);
    return rc;
}

/* Read the pieces of an open file whose /tokenizer group may or may not hold them (*present
 * says); vocab_size -1 accepts any count. Messages name path. Lock held. */
static int data_pieces_read_locked(hid_t file, const char *path, int64_t vocab_size, TokenPieces *pieces,
                                   int *present) {
    memset(pieces, 0, sizeof *pieces);
    *present = 0;
    htri_t has_group = H5Lexists(file, "tokenizer", H5P_DEFAULT);
    if (has_group < 0) return ct_h5_fail("'%s': cannot look up /tokenizer", path);
    if (!has_group) return 0;
    hid_t group = H5Gopen2(file, "tokenizer", H5P_DEFAULT);
    if (group < 0) return ct_h5_fail("'%s': /tokenizer is not a group", path);
    int rc = 0;
    htri_t has_pieces = H5Lexists(group, "pieces", H5P_DEFAULT);
    if (has_pieces < 0) rc = ct_h5_fail("'%s': cannot look up /tokenizer/pieces", path);
    if (rc == 0 && has_pieces > 0) {
        rc = read_piece_text(group, path, vocab_size, pieces);
        if (rc == 0) rc = read_piece_types(group, path, pieces);
        if (rc == 0) rc = read_decoding_attributes(group, path, pieces);
        if (rc == 0) *present = 1;
        else token_pieces_free(pieces);
    }
    H5Gclose(group);
    return rc;
}

/* ---- writing ---- */

/* Create /tokenizer/pieces and /tokenizer/piece_type in group (the open /tokenizer group of the
 * file named path). Lock held. */
static int data_pieces_write_locked(hid_t group, const char *path, const TokenPieces *p) {
    hsize_t n = (hsize_t)p->vocab_size;
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    H5Tset_cset(str, H5T_CSET_UTF8);
    hid_t dcpl = ct_h5_untimed_plist(H5P_DATASET_CREATE);
    hid_t text = H5Dcreate2(group, "pieces", str, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hid_t types = H5I_INVALID_HID;
    int rc = 0;
    if (text < 0 || H5Dwrite(text, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, p->text) < 0 ||
        ct_h5_attr_write_str(text, "leading_space", LEADING_SPACE_NAMES[p->leading_space]) != 0 ||
        ct_h5_attr_write_str(text, "unk_surface", p->unk_surface ? p->unk_surface : DEFAULT_UNK_SURFACE) != 0)
        rc = -1;
    if (rc == 0) {
        types = H5Dcreate2(group, "piece_type", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (types < 0 || H5Dwrite(types, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, p->type) < 0) rc = -1;
    }
    if (rc != 0) ct_h5_fail("'%s': cannot write /tokenizer/pieces", path);
    if (types >= 0) H5Dclose(types);
    if (text >= 0) H5Dclose(text);
    H5Pclose(dcpl);
    H5Tclose(str);
    H5Sclose(space);
    return rc;
}

/* ---- entry points (data_internal.h, tokenizer.h) ---- */

/* The pieces into the /tokenizer group that data_write_luts_locked made. Lock held. */
int data_write_pieces_locked(hid_t file, const char *path, int64_t vocab_size, const TokenPieces *pieces) {
    if (pieces->vocab_size != vocab_size)
        return ct_fail("'%s': the tokenizer has %lld pieces but vocab_size is %lld", path,
                       (long long)pieces->vocab_size, (long long)vocab_size);
    hid_t group = H5Gopen2(file, "tokenizer", H5P_DEFAULT);
    if (group < 0) return ct_h5_fail("'%s': pieces need the /tokenizer tables first", path);
    int rc = data_pieces_write_locked(group, path, pieces);
    H5Gclose(group);
    return rc;
}

int data_read_pieces_file(const char *path, int64_t vocab_size, TokenPieces *pieces, int *present) {
    memset(pieces, 0, sizeof *pieces);
    *present = 0;
    ct_hdf5_lock();
    int rc = -1;
    hid_t file = data_open_file(path);
    if (file >= 0) {
        rc = data_pieces_read_locked(file, path, vocab_size, pieces, present);
        H5Fclose(file);
    }
    ct_hdf5_unlock();
    return rc;
}

/* spm_shim.cc — SentencePiece models through the SentencePiece library. The library has only a
 * C++ interface (sentencepiece_processor.h) and the rest of ctrain is C11, so this one file is
 * C++ and offers C functions (spm_shim.h) for one concern: load a .model, and tell its
 * vocabulary size, each piece's text and type (control, unknown, unused, byte or normal), the
 * library's decoding of a list of ids and its encoding of a text. Everything built from that (the bits-per-byte tables,
 * the pieces stored for decoding) is C, in tokenizer_spm.c. No exception leaves this file. */
#include "spm_shim.h"

#include "tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

struct CtSpmModel {
    sentencepiece::SentencePieceProcessor processor;
};

static void set_error(char *err, size_t cap, const std::string &message) {
    if (cap > 0) std::snprintf(err, cap, "%s", message.c_str());
}

/* f(), or -1 with the message of any exception it throws in err: none crosses into C. */
template <typename F>
static int guarded(char *err, size_t cap, F f) {
    try {
        return f();
    } catch (const std::exception &e) {
        set_error(err, cap, e.what());
    } catch (...) {
        set_error(err, cap, "unknown C++ exception in the SentencePiece library");
    }
    return -1;
}

/* true, with the library's message in err, if status is an error. */
static bool failed(const sentencepiece::util::Status &status, char *err, size_t cap) {
    if (!status.ok()) set_error(err, cap, status.ToString());
    return !status.ok();
}

/* A malloc'ed copy of bytes bytes of data (for C to free()), or NULL with "out of memory" in err. */
static void *copy_out(const void *data, size_t bytes, char *err, size_t cap) {
    void *copy = std::malloc(bytes);
    if (!copy) set_error(err, cap, "out of memory");
    else std::memcpy(copy, data, bytes);
    return copy;
}

extern "C" int ct_spm_load(const char *path, CtSpmModel **model, char *err, size_t err_cap) {
    *model = nullptr;
    return guarded(err, err_cap, [&] {
        std::unique_ptr<CtSpmModel> m(new CtSpmModel);
        if (failed(m->processor.Load(path), err, err_cap)) return -1;
        *model = m.release();
        return 0;
    });
}

extern "C" void ct_spm_free(CtSpmModel *model) { delete model; }

extern "C" int ct_spm_size(const CtSpmModel *model) { return model->processor.GetPieceSize(); }

extern "C" const char *ct_spm_piece(const CtSpmModel *model, int id, size_t *len) {
    const std::string &piece = model->processor.IdToPiece(id);
    *len = piece.size();
    return piece.data();
}

extern "C" int ct_spm_type(const CtSpmModel *model, int id) {
    const auto &p = model->processor;
    if (p.IsControl(id)) return CT_PIECE_CONTROL;
    if (p.IsUnknown(id)) return CT_PIECE_UNKNOWN;
    if (p.IsUnused(id)) return CT_PIECE_UNUSED;
    if (p.IsByte(id)) return CT_PIECE_BYTE;
    return CT_PIECE_NORMAL;
}

extern "C" int ct_spm_decode(const CtSpmModel *model, const int *ids, int n, char **text, size_t *len, char *err,
                             size_t err_cap) {
    *text = nullptr;
    return guarded(err, err_cap, [&] {
        std::string out;
        if (failed(model->processor.Decode(std::vector<int>(ids, ids + n), &out), err, err_cap)) return -1;
        *text = static_cast<char *>(copy_out(out.c_str(), out.size() + 1, err, err_cap)); /* with its NUL */
        if (!*text) return -1;
        *len = out.size();
        return 0;
    });
}

extern "C" int ct_spm_encode(const CtSpmModel *model, const char *text, size_t len, int **ids, int *n, char *err,
                             size_t err_cap) {
    *ids = nullptr;
    *n = 0;
    return guarded(err, err_cap, [&] {
        std::vector<int> out;
        if (failed(model->processor.Encode(std::string(text, len), &out), err, err_cap)) return -1;
        if (out.empty()) return 0;
        *ids = static_cast<int *>(copy_out(out.data(), out.size() * sizeof(int), err, err_cap));
        if (!*ids) return -1;
        *n = static_cast<int>(out.size());
        return 0;
    });
}

extern "C" int ct_spm_bos_id(const CtSpmModel *model) { return model->processor.bos_id(); }

/* *array grown (realloc) to hold cap entries; false when memory ran out. */
template <typename T>
static bool grow(T **array, size_t cap) {
    T *bigger = static_cast<T *>(std::realloc(*array, cap * sizeof(T)));
    if (!bigger) return false;
    *array = bigger;
    return true;
}

extern "C" int ct_spm_encode_spans(const CtSpmModel *model, const char *text, size_t len, int **ids,
                                   unsigned **begin, unsigned **end, size_t *cap, int *n, char *err,
                                   size_t err_cap) {
    *n = 0;
    return guarded(err, err_cap, [&] {
        const sentencepiece::ImmutableSentencePieceText spt =
            model->processor.EncodeAsImmutableProto(absl::string_view(text, len));
        const size_t count = spt.pieces_size();
        if (count > *cap) {
            size_t want = count + count / 2 + 16;
            if (!grow(ids, want) || !grow(begin, want) || !grow(end, want)) {
                set_error(err, err_cap, "out of memory");
                return -1;
            }
            *cap = want;
        }
        for (size_t i = 0; i < count; i++) {
            const auto piece = spt.pieces(static_cast<int>(i));
            (*ids)[i] = static_cast<int>(piece.id());
            (*begin)[i] = piece.begin();
            (*end)[i] = piece.end();
        }
        *n = static_cast<int>(count);
        return 0;
    });
}

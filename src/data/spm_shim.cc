/* spm_shim.cc — SentencePiece models through the SentencePiece library. The library has only a
 * C++ interface (sentencepiece_processor.h) and the rest of ctrain is C11, so this one file is
 * C++ and offers C functions (spm_shim.h) for one concern: load a .model, and tell its
 * vocabulary size, each piece's text and type (control, unknown, unused, byte or normal), and
 * the library's decoding of a list of ids. Everything built from that (the bits-per-byte tables,
 * the pieces stored for decoding) is C, in tokenizer_spm.c. No exception leaves this file. */
#include "spm_shim.h"

#include "data.h"

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

extern "C" int ct_spm_load(const char *path, CtSpmModel **model, char *err, size_t err_cap) {
    *model = nullptr;
    return guarded(err, err_cap, [&] {
        std::unique_ptr<CtSpmModel> m(new CtSpmModel);
        const auto status = m->processor.Load(path);
        if (!status.ok()) {
            set_error(err, err_cap, status.ToString());
            return -1;
        }
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
        const auto status = model->processor.Decode(std::vector<int>(ids, ids + n), &out);
        if (!status.ok()) {
            set_error(err, err_cap, status.ToString());
            return -1;
        }
        char *copy = static_cast<char *>(std::malloc(out.size() + 1));
        if (!copy) {
            set_error(err, err_cap, "out of memory");
            return -1;
        }
        std::memcpy(copy, out.data(), out.size());
        copy[out.size()] = '\0';
        *text = copy;
        *len = out.size();
        return 0;
    });
}

/* lora.h — where test-time training's per-document adapters sit and how one document's set is laid
 * out (issue 57, docs/model.md "Test-time training"). A LoRA of rank r beside a projection of
 * in -> out features adds s * (x A^T) B^T, s = ttt_lora_alpha / r, A [r, in], B [out, r]. Every run
 * of the block plan (a looped block's runs apart) has its own q, k, v (before QK-norm and RoPE,
 * reading the normed attention input), o (added to attn.proj's output, also reading the normed
 * attention input) and mlp (added to the MLP's output, reading the normed MLP input) adapters,
 * k, o and mlp each switchable; the head's (final normed x -> vocab, added before the softcap) is
 * always there. One document's adapters ("a slot") are contiguous: entry by entry (runs in plan
 * order, kinds in LoraKind order, then the head), each A then B. */
#ifndef CT_LORA_H
#define CT_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_MLP, LORA_KINDS } LoraKind;

typedef struct {
    int in, out;
    size_t a, b; /* offsets of A [r, in] and B [out, r] in a slot; b = a + r * in */
} LoraEntry;

typedef struct {
    int rank;
    float scale; /* alpha / rank, rounded to fp32 once */
    int num_runs;
    int on[LORA_KINDS];
    LoraEntry *runs; /* [num_runs * LORA_KINDS]; entry (run, kind) is runs[run * LORA_KINDS + kind], in = 0 when off */
    LoraEntry head;
    size_t slot_floats;
} LoraLayout;

/* The layout for the runs of `plan` of a model of spec s; alpha, rank and the switches are the
 * ttt_* keys. Fails (naming the key) for rank < 1 or above model_dim, alpha < 0. */
int lora_layout_init(LoraLayout *L, const ModelSpec *s, const BlockPlan *plan, int rank, double alpha, int k_on,
                     int o_on, int mlp_on);
void lora_layout_free(LoraLayout *L);
/* Entry (run, kind), NULL when that adapter is off. */
const LoraEntry *lora_entry(const LoraLayout *L, int run, LoraKind kind);
const char *lora_kind_name(LoraKind kind); /* "q", "k", "v", "o", "mlp" */
/* A document's starting adapters (every document starts from the same ones): each A uniform in
 * [-1/sqrt(in), 1/sqrt(in)) (torch's nn.Linear initialisation) from the model's counter-based
 * generator under seed (stream = the entry's place), each B zero, so every adapter adds exactly
 * zero at first. slot: slot_floats floats. */
void lora_initial_slot(const LoraLayout *L, uint64_t seed, float *slot);

#endif

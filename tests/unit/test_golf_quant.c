/* test_golf_quant.c — the parameter-golf quantizers (src/infer/golf_quant.h) against
 * hand-computed cases of the two train_gpt.py's rules (rounding half to even, the float16
 * scales, clamping, the 1/31 floor of int6 rows and its absence for other ranks, the
 * passthrough threshold at 65,536 elements, the category by name), and the artifacts
 * (golf_artifact.h) written and read back, with the errors a damaged file gives. */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "golf_artifact.h"
#include "golf_quant.h"
#include "harness.h"
#include "test_spec.h"

static void category_by_name(void) {
    static const struct {
        const char *name;
        GolfCategory want;
    } cases[] = {
        {"tok_emb.weight", GOLF_CAT_EMBED},
        {"lm_head.weight", GOLF_CAT_EMBED},
        {"blocks.0.mlp.fc.weight", GOLF_CAT_MLP},
        {"blocks.0.mlp.proj.weight", GOLF_CAT_MLP}, /* ".mlp." wins over ".proj." */
        {"blocks.3.attn.c_q.weight", GOLF_CAT_ATTN},
        {"blocks.0.attn.proj.weight", GOLF_CAT_ATTN},
        {"bigram.proj.weight", GOLF_CAT_ATTN}, /* ".proj." without ".mlp." */
        {"bigram.embed.weight", GOLF_CAT_OTHER},
        {"bigram.scale", GOLF_CAT_OTHER},
        {"smear.gate", GOLF_CAT_OTHER},
        {"smear_gate.weight", GOLF_CAT_OTHER},
        {"smear_lambda", GOLF_CAT_OTHER},
        {"skip_weights", GOLF_CAT_OTHER},
        {"skip_gates", GOLF_CAT_OTHER},
        {"blocks.0.attn_scale", GOLF_CAT_OTHER}, /* "attn_", not ".attn." */
        {"blocks.0.attn.q_gain", GOLF_CAT_ATTN},
        {"proj.weight", GOLF_CAT_OTHER}, /* no dot before "proj" */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(golf_category(cases[i].name) == cases[i].want, "%s: category %d, expected %d", cases[i].name,
              (int)golf_category(cases[i].name), (int)cases[i].want);
    CHECK(golf_is_control("blocks.0.attn_scale") && golf_is_control("blocks.1.mlp_scale") &&
              golf_is_control("blocks.2.resid_mix") && golf_is_control("blocks.0.attn.q_gain") &&
              golf_is_control("skip_weights") && golf_is_control("smear.gate") && golf_is_control("skip_gates") &&
              golf_is_control("blocks.3.attn.attn_gate_w") && golf_is_control("smear_gate.weight") &&
              golf_is_control("smear_lambda"),
          "control patterns");
    CHECK(!golf_is_control("tok_emb.weight") && !golf_is_control("bigram.scale"), "not control");
}

static void kind_by_rule(void) {
    static const struct {
        const char *name;
        int ndim;
        size_t count;
        GolfKind mixed, int8;
    } cases[] = {
        /* the threshold: at most 65,536 elements are kept */
        {"blocks.0.mlp.fc.weight", 2, 65536, GOLF_KEEP_F16, GOLF_KEEP_F16},
        {"blocks.0.mlp.fc.weight", 2, 65537, GOLF_INT6_ROWS, GOLF_INT8_ROWS},
        {"blocks.0.attn.proj.weight", 2, 65537, GOLF_INT6_ROWS, GOLF_INT8_ROWS},
        {"blocks.0.attn.proj.weight", 1, 65537, GOLF_INT6_TENSOR, GOLF_INT8_TENSOR},
        /* small control tensors: float16 in the record's rule (size is tested first), float32 in the baseline's */
        {"blocks.0.attn_scale", 1, 512, GOLF_KEEP_F16, GOLF_KEEP_F32},
        {"skip_weights", 2, 65536, GOLF_KEEP_F16, GOLF_KEEP_F32},
        {"skip_gates", 2, 4096, GOLF_KEEP_F16, GOLF_KEEP_F32}, /* the 1.0611 record's [8, 512] */
        /* large control tensors: float32 in the record's rule, quantized in the baseline's */
        {"smear.gate", 1, 65537, GOLF_KEEP_F32, GOLF_INT8_TENSOR},
        {"blocks.0.attn.q_gain", 2, 65537, GOLF_KEEP_F32, GOLF_INT8_ROWS},
        /* the sparse attention gate [heads, gate_window]: a small control tensor */
        {"blocks.0.attn.attn_gate_w", 2, 8 * 12, GOLF_KEEP_F16, GOLF_KEEP_F32},
        /* the 1.0611 SmearGate's [1, gate_window] and [1]: control tensors ("smear") */
        {"smear_gate.weight", 2, 12, GOLF_KEEP_F16, GOLF_KEEP_F32},
        {"smear_lambda", 1, 1, GOLF_KEEP_F16, GOLF_KEEP_F32},
        /* embeddings and the rest: int8 in both */
        {"tok_emb.weight", 2, 1024 * 512, GOLF_INT8_ROWS, GOLF_INT8_ROWS},
        {"lm_head.weight", 2, 1024 * 512, GOLF_INT8_ROWS, GOLF_INT8_ROWS},
        {"bigram.embed.weight", 2, 2048 * 128, GOLF_INT8_ROWS, GOLF_INT8_ROWS},
        {"bigram.other", 1, 65537, GOLF_INT8_TENSOR, GOLF_INT8_TENSOR},
        /* the bigram projection: attn, so int6 when large; the record's [512, 128] is exactly 65,536 */
        {"bigram.proj.weight", 2, 512 * 128, GOLF_KEEP_F16, GOLF_KEEP_F16},
        {"bigram.proj.weight", 2, 768 * 128, GOLF_INT6_ROWS, GOLF_INT8_ROWS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        GolfKind m = golf_mixed_int6_kind(cases[i].name, cases[i].ndim, cases[i].count);
        GolfKind e = golf_int8_kind(cases[i].name, cases[i].ndim, cases[i].count);
        CHECK(m == cases[i].mixed, "%s [%zu]: mixed kind %d, expected %d", cases[i].name, cases[i].count, (int)m,
              (int)cases[i].mixed);
        CHECK(e == cases[i].int8, "%s [%zu]: int8 kind %d, expected %d", cases[i].name, cases[i].count, (int)e,
              (int)cases[i].int8);
    }
}

static void half_conversion(void) {
    CHECK(golf_half_from_float(1.0f) == 0x3c00, "1");
    CHECK(golf_half_from_float((float)(1.0 / 31.0)) == 0x2821, "1/31: %#x", golf_half_from_float((float)(1.0 / 31.0)));
    CHECK(golf_half_to_float(0x2821) == 0.032257080078125f, "0x2821");
    CHECK(golf_half_from_float(1.0f + 0x1p-11f) == 0x3c00, "tie to even, down");
    CHECK(golf_half_from_float(1.0f + 3 * 0x1p-11f) == 0x3c02, "tie to even, up");
    CHECK(golf_half_from_float(2.5f * 0x1p-24f) == 0x0002, "subnormal tie to even");
    CHECK(golf_half_from_float(65520.0f) == 0x7c00, "rounds to infinity");
    CHECK(golf_half_from_float(-0.0f) == 0x8000, "-0");
}

static void int6_rows_round_half_even(void) {
    /* row 0: max 31 -> scale 1 (exact in float16); row 1: max 62 -> scale 2 */
    const float x[2][8] = {{31, 2.5f, 3.5f, -0.5f, -2.5f, 0.49f, -31, 1.5f}, {62, 5, 7, -3, 1, 0, -62, 0.999f}};
    const int8_t want[2][8] = {{31, 2, 4, 0, -2, 0, -31, 2}, {31, 2, 4, -2, 0, 0, -31, 0}};
    int8_t q[16];
    uint16_t s[2];
    memset(q, 0x55, sizeof q);
    golf_int6_rows(&x[0][0], 2, 8, q, s);
    CHECK(s[0] == 0x3c00 && s[1] == 0x4000, "scales %#x %#x", s[0], s[1]);
    for (int i = 0; i < 16; i++)
        CHECK(q[i] == want[i / 8][i % 8], "q[%d] = %d, expected %d", i, q[i], want[i / 8][i % 8]);
}

static void int6_rows_floor_and_scale_rounding(void) {
    /* row max 0.5: 0.5/31 is below the floor 1/31, whose float16 is 0.032257080078125 (0x2821);
     * q = round(x / 0.032257080078125): 15.5005 -> 16, -7.7502 -> -8, 3.1001 -> 3 */
    const float small[4] = {0.5f, -0.25f, 0.1f, 0};
    int8_t q[4];
    uint16_t s;
    golf_int6_rows(small, 1, 4, q, &s);
    CHECK(s == 0x2821, "floored scale %#x", s);
    CHECK(q[0] == 16 && q[1] == -8 && q[2] == 3 && q[3] == 0, "q %d %d %d %d", q[0], q[1], q[2], q[3]);
    /* row max 31 * (1 + 2^-11): max / 31 = 1 + 2^-11, a float16 tie that rounds to even, 1.0;
     * q uses the stored scale: 31.0151 -> 31 */
    const float tie_down[2] = {31.0f * (1.0f + 0x1p-11f), -1.0f};
    golf_int6_rows(tie_down, 1, 2, q, &s);
    CHECK(s == 0x3c00 && q[0] == 31 && q[1] == -1, "tie down: scale %#x q %d %d", s, q[0], q[1]);
    /* max / 31 = 1 + 3 * 2^-11: the tie rounds up to 1 + 2^-9 (0x3c02); 3 / 1.001953125 = 2.994 -> 3;
     * 20.535 / 1.001953125 = 20.495 -> 20 (with the unrounded scale it would be 20.505 -> 21) */
    const float tie_up[3] = {31.0f * (1.0f + 3 * 0x1p-11f), 3.0f, 20.535f};
    golf_int6_rows(tie_up, 1, 3, q, &s);
    CHECK(s == 0x3c02 && q[0] == 31 && q[1] == 3 && q[2] == 20, "tie up: scale %#x q %d %d %d", s, q[0], q[1], q[2]);
}

static void int6_tensor_no_floor_and_clamp(void) {
    /* amax 3.875: scale 0.125; 15.5 and 0.5 and 1.5 round half to even */
    const float x[5] = {3.875f, -1.9375f, 0.0625f, 0.1875f, 0};
    int8_t q[5];
    uint16_t s = golf_int6_tensor(x, 5, q);
    CHECK(s == 0x3000, "scale %#x", s);
    CHECK(q[0] == 31 && q[1] == -16 && q[2] == 0 && q[3] == 2 && q[4] == 0, "q %d %d %d %d %d", q[0], q[1], q[2],
          q[3], q[4]);
    /* no 1/31 floor for a vector: amax 31 * 2^-10 gives scale 2^-10 (rows would get 1/31) */
    const float tiny[2] = {31 * 0x1p-10f, -0x1p-10f};
    s = golf_int6_tensor(tiny, 2, q);
    CHECK(s == 0x1400 && q[0] == 31 && q[1] == -1, "no floor: scale %#x q %d %d", s, q[0], q[1]);
    /* all zero: scale 1 */
    const float zero[3] = {0, 0, 0};
    s = golf_int6_tensor(zero, 3, q);
    CHECK(s == 0x3c00 && q[0] == 0 && q[2] == 0, "zero: scale %#x", s);
    /* a scale that float16 rounds down (subnormal 2.5 * 2^-24 -> 2 * 2^-24): amax / scale = 38.75,
     * clamped to 31 and -32 */
    const float big = 77.5f * 0x1p-24f;
    const float clamp[3] = {big, -big, 5 * 0x1p-23f};
    s = golf_int6_tensor(clamp, 3, q);
    CHECK(s == 0x0002, "subnormal scale %#x", s);
    CHECK(q[0] == 31 && q[1] == -32 && q[2] == 5, "clamped q %d %d %d", q[0], q[1], q[2]);
}

static void int8_rules(void) {
    /* [1, -3]: the clip is the 99.99984th percentile, just below 3: -3 is clipped to -127, 1 -> 42 */
    const float x[4] = {1, -3, 0.1f, -0.05f};
    int8_t q[4];
    uint16_t s[2];
    float work[4];
    golf_int8_rows(x, 2, 2, q, s, work);
    CHECK(q[0] == 42 && q[1] == -127, "row 0: %d %d", q[0], q[1]);
    CHECK(golf_half_to_float(s[0]) > 2.99f / 127 && golf_half_to_float(s[0]) < 3.01f / 127, "row 0 scale %g",
          golf_half_to_float(s[0]));
    /* row max 0.1: floored scale 1/127: 0.1 * 127 = 12.7 -> 13, -6.35 -> -6 */
    CHECK(s[1] == golf_half_from_float((float)(1.0 / 127.0)) && q[2] == 13 && q[3] == -6, "row 1: %#x %d %d", s[1],
          q[2], q[3]);
    /* a vector of zeros: scale 1, float32 */
    const float zero[3] = {0, 0, 0};
    CHECK(golf_int8_tensor(zero, 3, q, work) == 1.0f && q[0] == 0, "zero vector");
}

/* ---- the artifact, written and read back ---- */

static ParamInfo params[6];
static ModelSpec spec;
static float *weights;

/* a model of six tensors, one of each kind, around the 65,536-element threshold */
static void make_spec(const char *second_name) {
    const TestTensor t[6] = {{"tok_emb.weight", 2, {2, 32769}},
                             {second_name, 1, {8}},
                             {"blocks.0.mlp.fc.weight", 2, {256, 256}},
                             {"blocks.0.mlp.proj.weight", 2, {1, 65537}},
                             {"blocks.0.attn.proj.bias", 1, {65537}},
                             {"smear.gate", 1, {65537}}};
    test_spec_from_table(&spec, params, t, 6);
    const size_t offset = spec.total_floats;
    if (!weights) {
        weights = ct_malloc(offset * sizeof(float), "weights");
        uint64_t r = 12345;
        for (size_t i = 0; i < offset; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            weights[i] = ((float)(r >> 40) / (float)(1 << 24) - 0.5f) * (i % 7 == 0 ? 0.5f : 0.1f);
        }
    }
}

static unsigned char *file_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = ct_malloc(*len + 1, "file");
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static void put_file(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
}

static void int6_artifact_round_trip(void) {
    if (golf_format_available(GOLF_INT6_ZSTD) != 0) SKIP("built without libzstd");
    make_spec("blocks.0.attn_scale");
    const char *path = test_path("a.int6.safetensors.zst"), *again = test_path("b.int6.safetensors.zst");
    GolfStats g;
    CHECK(golf_write(&spec, weights, GOLF_INT6_ZSTD, NULL, path, &g) == 0, "%s", ct_error());
    CHECK(g.num_tensors == 6 && g.num_int6 == 2 && g.num_int8 == 1, "counts %lld %lld %lld", (long long)g.num_tensors,
          (long long)g.num_int6, (long long)g.num_int8);
    /* int8 values + 2 float16 row scales; float16 x 8; float16 x 65536; int6 + 1 row scale; int6 + a float16
     * scale; float32 */
    const int64_t payload = (65538 + 4) + 16 + 131072 + (65537 + 2) + (65537 + 2) + 65537 * 4;
    CHECK(g.payload_bytes == payload, "payload %lld, expected %lld", (long long)g.payload_bytes, (long long)payload);
    float *back = ct_malloc(spec.total_floats * sizeof(float), "read back");
    CHECK(golf_read(&spec, GOLF_INT6_ZSTD, path, back) == 0, "%s", ct_error());

    /* each tensor as its rule gives it */
    int8_t *q = ct_malloc(65538, "q");
    uint16_t s[2];
    float work[65538 / 2 + 1];
    const float *w = weights;
    golf_int8_rows(w + params[0].offset, 2, 32769, q, s, work);
    for (size_t i = 0; i < params[0].count; i++)
        CHECK(back[params[0].offset + i] == (float)q[i] * golf_half_to_float(s[i / 32769]), "tok_emb[%zu]", i);
    for (int p = 1; p <= 2; p++)
        for (size_t i = 0; i < params[p].count; i++) {
            float x = w[params[p].offset + i];
            CHECK(back[params[p].offset + i] == golf_half_to_float(golf_half_from_float(x)), "%s[%zu]", params[p].name,
                  i);
        }
    golf_int6_rows(w + params[3].offset, 1, 65537, q, s);
    for (size_t i = 0; i < params[3].count; i++) {
        float x = w[params[3].offset + i], d = back[params[3].offset + i], sc = golf_half_to_float(s[0]);
        CHECK(d == (float)q[i] * sc, "mlp.proj[%zu]", i);
        CHECK(fabs((double)x - d) <= sc * (0.5 + 0x1p-18), "mlp.proj[%zu]: |%g - %g| > scale/2 = %g", i, x, d, sc / 2);
    }
    uint16_t s1 = golf_int6_tensor(w + params[4].offset, 65537, q);
    for (size_t i = 0; i < params[4].count; i++)
        CHECK(back[params[4].offset + i] == (float)q[i] * golf_half_to_float(s1), "attn.proj.bias[%zu]", i);
    CHECK(!memcmp(back + params[5].offset, w + params[5].offset, params[5].count * sizeof(float)), "smear.gate");
    free(q);
    free(back);

    /* the same weights give the same bytes */
    CHECK(golf_write(&spec, weights, GOLF_INT6_ZSTD, NULL, again, &g) == 0, "%s", ct_error());
    size_t la = 0, lb = 0;
    unsigned char *a = file_bytes(path, &la), *b = file_bytes(again, &lb);
    int same = a && b && la == lb && !memcmp(a, b, la);
    free(a);
    free(b);
    CHECK(same, "two artifacts of the same weights differ");
}

static void int8_artifact_round_trip(void) {
    make_spec("blocks.0.attn_scale");
    const char *path = test_path("a.int8.stz");
    GolfStats g;
    CHECK(golf_write(&spec, weights, GOLF_INT8_ZLIB, NULL, path, &g) == 0, "%s", ct_error());
    /* the baseline's rule: the small control tensor is float32, the large vectors int8 per tensor */
    CHECK(g.num_int8 == 4 && g.num_int6 == 0, "counts %lld %lld", (long long)g.num_int8, (long long)g.num_int6);
    float *back = ct_malloc(spec.total_floats * sizeof(float), "read back");
    CHECK(golf_read(&spec, GOLF_INT8_ZLIB, path, back) == 0, "%s", ct_error());
    int exact = !memcmp(back + params[1].offset, weights + params[1].offset, 8 * sizeof(float));
    free(back);
    CHECK(exact, "attn_scale not kept as float32");
}

/* Reading a damaged artifact fails with a message naming the file; the weights are untouched. */
static int read_fails(GolfFormat f, const char *path, const char *want) {
    float *back = ct_malloc(spec.total_floats * sizeof(float), "read back");
    for (size_t i = 0; i < spec.total_floats; i++) back[i] = 7.0f;
    int failed = golf_read(&spec, f, path, back) != 0 && strstr(ct_error(), path) && strstr(ct_error(), want);
    for (size_t i = 0; i < spec.total_floats; i++) failed = failed && back[i] == 7.0f;
    free(back);
    return failed;
}

static void damaged_artifacts(void) {
    if (golf_format_available(GOLF_INT6_ZSTD) != 0) SKIP("built without libzstd");
    make_spec("blocks.0.attn_scale");
    const char *good = test_path("good.zst"), *bad = test_path("bad.zst"), *z8 = test_path("good.stz");
    GolfStats g;
    CHECK(golf_write(&spec, weights, GOLF_INT6_ZSTD, NULL, good, &g) == 0 &&
              golf_write(&spec, weights, GOLF_INT8_ZLIB, NULL, z8, &g) == 0,
          "%s", ct_error());
    size_t len = 0;
    unsigned char *b = file_bytes(good, &len);
    CHECK(b && len > 100, "no artifact");
    CHECK(read_fails(GOLF_INT6_ZSTD, test_path("missing.zst"), "cannot open artifact"), "missing: %s", ct_error());
    const char *dir = test_path("a_directory.zst"); /* it opens; its read failed with "cannot read" alone */
    CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    CHECK(read_fails(GOLF_INT6_ZSTD, dir, "is a directory, not a file"), "directory: %s", ct_error());
    put_file(bad, b, len / 2);
    CHECK(read_fails(GOLF_INT6_ZSTD, bad, "damaged"), "truncated: %s", ct_error());
    put_file(bad, b, 3);
    CHECK(read_fails(GOLF_INT6_ZSTD, bad, "not a zstd stream"), "3 bytes: %s", ct_error());
    b[len / 2] ^= 0x20;
    put_file(bad, b, len);
    CHECK(read_fails(GOLF_INT6_ZSTD, bad, "damaged"), "flipped byte: %s", ct_error());
    b[len / 2] ^= 0x20;
    unsigned char *longer = ct_malloc(len + 5, "longer");
    memcpy(longer, b, len);
    memcpy(longer + len, "extra", 5);
    put_file(bad, longer, len + 5);
    free(longer);
    free(b);
    CHECK(read_fails(GOLF_INT6_ZSTD, bad, "bytes after its zstd frame"), "trailing bytes: %s", ct_error());
    CHECK(read_fails(GOLF_INT6_ZSTD, z8, "not a zstd stream"), "int8 read as int6: %s", ct_error());
    CHECK(read_fails(GOLF_INT8_ZLIB, good, "not a zlib stream"), "int6 read as int8: %s", ct_error());
    /* another model: a name of the same length (same size, another header) */
    make_spec("blocks.0.attn_scalf");
    CHECK(read_fails(GOLF_INT6_ZSTD, good, "is not the int6 artifact of this model"), "other model: %s", ct_error());
}

static void format_names(void) {
    GolfFormat f;
    CHECK(golf_format_from_name("int8-zlib", &f) == 0 && f == GOLF_INT8_ZLIB, "int8-zlib");
    CHECK(golf_format_from_name("int6-zstd", &f) == 0 && f == GOLF_INT6_ZSTD, "int6-zstd");
    CHECK(golf_format_from_name("int6", &f) != 0 && golf_format_from_name("", &f) != 0, "bad names accepted");
    CHECK(!strcmp(golf_default_file(GOLF_INT8_ZLIB), "final_model.int8.stz") &&
              !strcmp(golf_default_file(GOLF_INT6_ZSTD), "final_model.int6.safetensors.zst"),
          "file names");
    CHECK(!strcmp(golf_format_label(GOLF_INT6_ZSTD), "int6+zstd"), "label");
}

int main(void) {
    RUN(category_by_name);
    RUN(kind_by_rule);
    RUN(half_conversion);
    RUN(int6_rows_round_half_even);
    RUN(int6_rows_floor_and_scale_rounding);
    RUN(int6_tensor_no_floor_and_clamp);
    RUN(int8_rules);
    RUN(int6_artifact_round_trip);
    RUN(int8_artifact_round_trip);
    RUN(damaged_artifacts);
    RUN(format_names);
    free(weights);
    TEST_EXIT();
}

/* blas_core.c — the OpenBLAS kernel set ("core") for this CPU, a start-up policy of the process. An
 * OpenBLAS built with DYNAMIC_ARCH picks its core when it is loaded, from the CPU models it knows;
 * an older one (Debian 12's 0.3.21) does not know newer CPUs and falls back to older kernels:
 * generic SSE ones on a Sapphire Rapids Xeon (sgemm 215 instead of 1,188 GFLOP/s on 16 cores),
 * Haswell's AVX2 ones on an AVX-512 AMD EPYC. OpenBLAS reads OPENBLAS_CORETYPE only when it loads,
 * so a better core is chosen by setting it and executing ctrain again, once, before anything else
 * runs. A core the user chose with OPENBLAS_CORETYPE is left alone. x86-64 only: elsewhere
 * OpenBLAS's choice stands. */
#include "blas_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenBLAS's name of the kernel set it loaded (declared with the others in kernels/cpu/cpu_blas.h,
 * a layer above; ctrain links OpenBLAS in every configuration). */
char *openblas_get_corename(void);

/* Set in the environment of the second execution: the core OpenBLAS had picked. */
#define CHOSEN_FROM_ENV "CTRAIN_BLAS_CORE_FROM"

/* How much of the x86 vector hardware a core's kernels use: 1 SSE, 2 AVX, 3 AVX2 + FMA,
 * 4 AVX-512; -1 for a name not listed here (then ctrain does not second-guess it). */
static int core_level(const char *name) {
    static const struct { const char *name; int level; } cores[] = {
        {"Katmai", 1},      {"Coppermine", 1}, {"Northwood", 1},   {"Prescott", 1},   {"Banias", 1},
        {"Core2", 1},       {"Penryn", 1},     {"Dunnington", 1},  {"Nehalem", 1},    {"Atom", 1},
        {"Opteron", 1},     {"Barcelona", 1},  {"Nano", 1},        {"Bobcat", 1},     {"Sandybridge", 2},
        {"Bulldozer", 2},   {"Piledriver", 2}, {"Steamroller", 2}, {"Haswell", 3},    {"Zen", 3},
        {"Excavator", 3},   {"SkylakeX", 4},   {"Cooperlake", 4},  {"SapphireRapids", 4},
    };
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(name, cores[i].name)) return cores[i].level;
    return -1;
}

/* The best core this CPU can run, with its level and the feature that decides it. */
static const char *best_core(int *level, const char **why) {
    *level = -1;
    *why = "";
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd")) {
        *level = 4;
        *why = "AVX-512";
        return "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *level = 3;
        *why = "AVX2 and FMA";
        return "Haswell";
    }
    if (__builtin_cpu_supports("avx")) {
        *level = 2;
        *why = "AVX";
        return "Sandybridge";
    }
#endif
    return NULL;
}

void cpu_blas_choose_core(char **argv) {
    const char *user = getenv("OPENBLAS_CORETYPE");
    if ((user && *user) || getenv(CHOSEN_FROM_ENV)) return;
    /* tests: pretend OpenBLAS picked this core (the library then really loads the chosen one) */
    const char *pretend = getenv("CTRAIN_TEST_BLAS_PICKED");
    const char *loaded = pretend && *pretend ? pretend : openblas_get_corename();
    int have = loaded ? core_level(loaded) : -1, best_level;
    const char *why, *best = best_core(&best_level, &why);
    if (!best || have < 0 || have >= best_level) return;
    if (setenv("OPENBLAS_CORETYPE", best, 1) != 0 || setenv(CHOSEN_FROM_ENV, loaded, 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* could not execute again (no /proc): carry on with OpenBLAS's choice */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(CHOSEN_FROM_ENV);
}

const char *cpu_blas_core_describe(char *buf, size_t cap) {
    const char *loaded = openblas_get_corename();
    const char *from = getenv(CHOSEN_FROM_ENV), *user = getenv("OPENBLAS_CORETYPE");
    int best_level;
    const char *why, *best = best_core(&best_level, &why);
    if (!loaded) loaded = "unknown";
    if (from)
        snprintf(buf, cap, "%s (chosen by ctrain: OpenBLAS picked %s, but this CPU has %s)", loaded, from, why);
    else if (user && *user && best && core_level(loaded) >= 0 && core_level(loaded) < best_level)
        snprintf(buf, cap, "%s (OPENBLAS_CORETYPE=%s; this CPU has %s, for %s)", loaded, user, why, best);
    else if (user && *user)
        snprintf(buf, cap, "%s (OPENBLAS_CORETYPE=%s)", loaded, user);
    else if (best && core_level(loaded) >= 0 && core_level(loaded) < best_level)
        snprintf(buf, cap, "%s (OpenBLAS's choice; `ctrain train` uses %s: this CPU has %s)", loaded, best, why);
    else
        snprintf(buf, cap, "%s (OpenBLAS's choice)", loaded);
    return buf;
}

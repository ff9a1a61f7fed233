/* blas_core.h — choosing OpenBLAS's kernel set for this CPU when the OpenBLAS in use is
 * older than the CPU (blas_core.c says why and how): main's start-up policy, and the line that
 * describes the choice (ctrain version, the CPU backend's description). */
#ifndef CT_BLAS_CORE_H
#define CT_BLAS_CORE_H

#include <stddef.h>

/* Call first in main, with main's argv, before any other work: if OpenBLAS picked a core
 * weaker than this CPU supports and the user did not choose one (OPENBLAS_CORETYPE), set
 * OPENBLAS_CORETYPE and execute ctrain again (does not return then). */
void cpu_blas_choose_core(char **argv);

/* "SkylakeX (chosen by ctrain: OpenBLAS picked Haswell, but this CPU has AVX-512)", or
 * "Haswell (OpenBLAS's choice)", "... (OPENBLAS_CORETYPE=...)". */
const char *cpu_blas_core_describe(char *buf, size_t cap);

#endif

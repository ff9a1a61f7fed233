/* cpu_blas_core.h — moved: the OpenBLAS core choice is a start-up policy of the process, not math,
 * and lives in base/blas_core.h. This forwarding header remains only until
 * src/backend/backend_cpu.c includes "blas_core.h" itself; nothing new should include it. */
#ifndef CT_CPU_BLAS_CORE_H
#define CT_CPU_BLAS_CORE_H

#include "blas_core.h"

#endif

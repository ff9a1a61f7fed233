/* omp_wait.h — how ctrain's OpenMP threads wait between parallel regions, a start-up policy of
 * the computing commands (omp_wait.c says why, docs/performance.md "Waiting threads" has the
 * measurements). */
#ifndef CT_OMP_WAIT_H
#define CT_OMP_WAIT_H

#include <stddef.h>

/* Call first in main (before cpu_blas_choose_core) for a command that computes: unless the
 * user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT set) or the process has cores of its own or the
 * machine is quiet, set OMP_WAIT_POLICY=passive and return 1: the process must then start again
 * for OpenMP to read it (omp_wait_restart). 0: nothing to change. */
int omp_wait_choose(void);

/* Execute ctrain again with the environment omp_wait_choose set (does not return); where that
 * is impossible (no /proc), take the setting back and carry on with OpenMP's default. */
void omp_wait_restart(char **argv);

/* "OpenMP's default, spinning briefly", "OMP_WAIT_POLICY=passive, chosen by ctrain: 2 other
 * processes running on 2 cores", "OMP_WAIT_POLICY=active, yours", ... */
const char *omp_wait_describe(char *buf, size_t cap);

#endif

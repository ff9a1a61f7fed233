/* cpu_blas.h — the OpenBLAS functions ctrain calls besides CBLAS, declared here so that the build
 * does not depend on which cblas.h is found first (a netlib cblas.h lacks them; ctrain links
 * OpenBLAS in every configuration). */
#ifndef CT_CPU_BLAS_H
#define CT_CPU_BLAS_H

char *openblas_get_config(void);
/* the kernel set (core) in use, e.g. "Haswell" */
char *openblas_get_corename(void);
/* 0: single-threaded build, 1: pthreads build, 2: OpenMP build */
int openblas_get_parallel(void);
void openblas_set_num_threads(int num_threads);

#endif

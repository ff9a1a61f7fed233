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

/* LAPACK (OpenBLAS carries it; Fortran calling convention: arguments by address, matrices
 * column-major). cpu_lapack.c is their one caller. */
void spotrf_(const char *uplo, const int *n, float *a, const int *lda, int *info);
void spotri_(const char *uplo, const int *n, float *a, const int *lda, int *info);
void sgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, float *a, const int *lda, float *s,
             float *u, const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork, int *info);

#endif

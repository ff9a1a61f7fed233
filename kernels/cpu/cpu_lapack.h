/* cpu_lapack.h — the dense factorizations the golf quantizer needs (GPTQ's Cholesky factors, LQER's
 * SVD), from OpenBLAS's LAPACK, on row-major float32 matrices, with result bits that do not depend
 * on the thread count (each call runs LAPACK on one thread: its threaded drivers split the work
 * by thread count, which moves the rounding). Each returns 0, or -1 with ct_fail naming what
 * failed (LAPACK's info). */
#ifndef CT_CPU_LAPACK_H
#define CT_CPU_LAPACK_H

/* a (n x n, symmetric positive definite) <- its inverse, both triangles filled. */
int cpu_spd_inverse(float *a, int n);
/* a (n x n, symmetric positive definite) <- U, upper triangular with a = U^T U (the lower
 * triangle set to zero): torch.linalg.cholesky(a, upper=True). */
int cpu_cholesky_upper(float *a, int n);
/* The thin SVD of a (m x n, row-major; overwritten): s[min(m,n)] descending, u (m x k) and
 * vt (k x n), k = min(m,n), with a = u diag(s) vt. Signs as LAPACK gives them. */
int cpu_svd_thin(float *a, int m, int n, float *s, float *u, float *vt);

#endif

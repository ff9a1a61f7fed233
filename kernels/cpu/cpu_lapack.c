/* cpu_lapack.c — row-major wrappers of OpenBLAS's LAPACK (cpu_lapack.h), each call on one thread
 * so that its bits are the same whatever OMP_NUM_THREADS says. Why the row-major views work:
 * a symmetric matrix is its own transpose, and a lower-triangular column-major factor L read
 * row-major is L^T, the upper factor; the row-major SVD of A is LAPACK's SVD of A^T with U and
 * V^T swapped. */
#include <omp.h>
#include <stdlib.h>

#include "common.h"
#include "cpu_blas.h"
#include "cpu_lapack.h"

/* LAPACK with OpenBLAS on one thread, the caller's thread count restored after (the OpenMP
 * build's openblas_set_num_threads sets OpenMP's too). */
static int serial_begin(void) {
    const int threads = omp_get_max_threads();
    openblas_set_num_threads(1);
    return threads;
}
static void serial_end(int threads) { openblas_set_num_threads(threads); }

int cpu_spd_inverse(float *a, int n) {
    int info = 0;
    const int threads = serial_begin();
    spotrf_("L", &n, a, &n, &info);
    if (info == 0) spotri_("L", &n, a, &n, &info);
    serial_end(threads);
    if (info > 0)
        return ct_fail("the %d x %d matrix is not positive definite (LAPACK spotrf/spotri: leading minor or "
                       "pivot %d)", n, n, info);
    if (info < 0) return ct_fail("LAPACK spotrf/spotri: argument %d is invalid", -info);
    /* column-major lower = row-major upper: copy it to the row-major lower triangle */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) a[(size_t)i * n + j] = a[(size_t)j * n + i];
    return 0;
}

int cpu_cholesky_upper(float *a, int n) {
    int info = 0;
    const int threads = serial_begin();
    spotrf_("L", &n, a, &n, &info); /* column-major L = row-major L^T = U */
    serial_end(threads);
    if (info > 0)
        return ct_fail("the %d x %d matrix is not positive definite (LAPACK spotrf: leading minor %d)", n, n, info);
    if (info < 0) return ct_fail("LAPACK spotrf: argument %d is invalid", -info);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) a[(size_t)i * n + j] = 0; /* spotrf leaves the other triangle as it was */
    return 0;
}

int cpu_svd_thin(float *a, int m, int n, float *s, float *u, float *vt) {
    /* row-major a (m x n) is column-major a^T (n x m) = V S U^T: LAPACK's "U" of it (n x k,
     * column-major) is our vt read row-major (k x n), its "VT" (k x m, column-major) our u (m x k) */
    const int k = m < n ? m : n;
    int info = 0, lwork = -1;
    float query = 0;
    const int threads = serial_begin();
    sgesvd_("S", "S", &n, &m, a, &n, s, vt, &n, u, &k, &query, &lwork, &info);
    if (info == 0) {
        lwork = (int)query;
        float *work = malloc((size_t)lwork * sizeof *work);
        if (!work) {
            serial_end(threads);
            return ct_fail("out of memory for the SVD's %d floats of work space", lwork);
        }
        sgesvd_("S", "S", &n, &m, a, &n, s, vt, &n, u, &k, work, &lwork, &info);
        free(work);
    }
    serial_end(threads);
    if (info > 0) return ct_fail("LAPACK sgesvd of a %d x %d matrix did not converge (%d superdiagonals)", m, n, info);
    if (info < 0) return ct_fail("LAPACK sgesvd: argument %d is invalid", -info);
    return 0;
}

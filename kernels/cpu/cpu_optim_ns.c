/* cpu_optim_ns.c — fp32 Newton–Schulz orthogonalisation and the Muon update (CPU backend).
 *
 * The matrix products go through cpu_sgemm / cpu_sgemm_symmetric (cpu_gemm.c), whose tiling
 * depends on the shapes only, so the result bits do not depend on the thread count: OpenBLAS's
 * threaded driver cuts K into blocks differently from its single-threaded one (0.3.21:
 * level3_thread.c halves the remaining K, level3.c rounds it to the unroll width), and every K
 * block adds a separately rounded partial sum into C. */
#include "cpu_optim.h"
#include "cpu_ops.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Element-wise loops below this size are not worth waking the thread team for. */
enum { PARALLEL_MIN_ELEMS = 1 << 15 };

size_t cpu_newton_schulz5_scratch_floats(int rows, int cols) {
    assert(rows > 0 && cols > 0);
    const size_t m = (size_t)(rows < cols ? rows : cols), n = (size_t)(rows < cols ? cols : rows);
    return 2 * m * n + 2 * m * m;
}

/* dst[c x r] = src[r x c]^T / divisor, in cache-sized blocks (one side is always strided). */
static void transpose_scaled(const float *src, float *dst, int r, int c, float divisor) {
    enum { BLOCK = 32 };
    const int blocks_down = (r + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)r * c >= PARALLEL_MIN_ELEMS)
    for (int bi = 0; bi < blocks_down; bi++) {
        const int i_end = (bi + 1) * BLOCK < r ? (bi + 1) * BLOCK : r;
        for (int j0 = 0; j0 < c; j0 += BLOCK) {
            const int j_end = j0 + BLOCK < c ? j0 + BLOCK : c;
            for (int i = bi * BLOCK; i < i_end; i++)
                for (int j = j0; j < j_end; j++)
                    dst[(size_t)j * r + i] = src[(size_t)i * c + j] / divisor;
        }
    }
}

void cpu_newton_schulz5(const float *G, float *X, int rows, int cols, int steps, float *scratch) {
    cpu_newton_schulz(G, X, rows, cols, steps, 0, scratch);
}

void cpu_newton_schulz(const float *G, float *X, int rows, int cols, int steps, int polar_express, float *scratch) {
    assert(G && X && scratch && rows > 0 && cols > 0 && steps >= 0);
    steps = ns_iterations(polar_express, steps);
    /* Work on the orientation with the short side first: the Gram matrix A is then m x m. */
    const int transposed = rows > cols;
    const int m = transposed ? cols : rows, n = transposed ? rows : cols;
    const size_t mn = (size_t)m * n, mm = (size_t)m * m;
    float *x_cur = scratch, *x_next = scratch + mn, *gram = scratch + 2 * mn, *poly = gram + mm;

    /* X /= X.norm() + eps: torch gives the norm as an fp32 scalar, adds eps in fp32 and divides
     * element-wise; only the norm's sum is done in double (fixed order) so it is deterministic. */
    const float divisor = (float)sqrt(cpu_sumsq_fixed_order(G, mn)) + NS5_EPS;
    if (transposed) {
        transpose_scaled(G, x_cur, rows, cols, divisor);
    } else {
#pragma omp parallel for schedule(static) if (mn >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < mn; i++) x_cur[i] = G[i] / divisor;
    }

    for (int s = 0; s < steps; s++) {
        float a, b, c;
        ns_coefficients(polar_express, s, &a, &b, &c);
        /* A = X X^T */
        cpu_sgemm_symmetric(1, m, n, 1.0f, x_cur, n, x_cur, n, 0.0f, gram, m);
        /* B = b*A + c*(A A): start from A and let sgemm's beta apply b. A A is symmetric because
         * A is exactly symmetric. */
        memcpy(poly, gram, mm * sizeof *poly);
        cpu_sgemm_symmetric(0, m, m, c, gram, m, gram, m, b, poly, m);
        /* X = a*X + B X */
        memcpy(x_next, x_cur, mn * sizeof *x_next);
        cpu_sgemm(0, 0, m, n, m, 1.0f, poly, m, x_cur, n, a, x_next, n);
        float *swap = x_cur;
        x_cur = x_next;
        x_next = swap;
    }

    if (transposed) {
        transpose_scaled(x_cur, X, m, n, 1.0f);
    } else {
        memcpy(X, x_cur, mn * sizeof *X);
    }
}

void cpu_muon_row_normalize(float *u, int rows, int cols) {
    assert(u && rows > 0 && cols > 0);
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= PARALLEL_MIN_ELEMS)
    for (int r = 0; r < rows; r++) {
        float *row = u + (size_t)r * cols;
        const float norm = (float)sqrt(cpu_sumsq_fixed_order(row, (size_t)cols));
        const float divisor = norm < NS_ROW_NORM_EPS ? NS_ROW_NORM_EPS : norm; /* clamp_min: NaN stays NaN */
        for (int j = 0; j < cols; j++) row[j] /= divisor;
    }
}

size_t cpu_muon_scratch_floats(int rows, int cols) { return cpu_newton_schulz5_scratch_floats(rows, cols); }

/* buf.mul_(momentum).add_(grad): two roundings (the add has alpha 1, so fused or not it is one
 * exact add). One definition for both paths below, so a rank that only advances the buffer
 * (Muon sharding) produces the same bits as the rank that computes the update. */
static inline float momentum_step(float buf, float mu, float grad) { return buf * mu + grad; }

void cpu_muon_momentum_advance(const float *grad, float *momentum_buf, size_t n, double momentum) {
    assert((grad && momentum_buf) || n == 0);
    const float mu = (float)momentum;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) momentum_buf[i] = momentum_step(momentum_buf[i], mu, grad[i]);
}

void cpu_muon_compute_update(const float *grad, float *momentum_buf, float *update, int rows, int cols,
                         double momentum, int nesterov, int ns_steps, int flags, float *scratch) {
    assert(grad && momentum_buf && update && scratch && rows > 0 && cols > 0);
    assert(update != grad && update != momentum_buf);
    const size_t n = (size_t)rows * cols;
    /* torch rounds a Python float scalar to the tensor's dtype before an fp32 kernel uses it. */
    const float mu = (float)momentum;

    /* grad.add(buf, alpha=momentum): torch's CPU kernel (vec::fmadd) and its CUDA kernel
     * (contracted a + alpha*b) both fuse it, hence fmaf. */
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        const float buf = momentum_step(momentum_buf[i], mu, grad[i]);
        momentum_buf[i] = buf;
        update[i] = nesterov ? fmaf(buf, mu, grad[i]) : buf;
    }

    if (flags & CT_MUON_ROW_NORMALIZE) cpu_muon_row_normalize(update, rows, cols);
    cpu_newton_schulz(update, update, rows, cols, ns_steps, (flags & CT_MUON_POLAR_EXPRESS) != 0, scratch);

    /* g *= max(1, rows/cols) ** 0.5, computed in double like Python, applied as an fp32 scalar. */
    const double aspect = (double)rows / (double)cols;
    if (aspect > 1.0) {
        const float scale = (float)pow(aspect, 0.5);
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < n; i++) update[i] *= scale;
    }
}

void cpu_muon_apply_update(float *p, const float *update, size_t n, double lr) {
    assert((p && update) || n == 0);
    const float neg_lr = (float)-lr;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) p[i] = fmaf(update[i], neg_lr, p[i]);
}

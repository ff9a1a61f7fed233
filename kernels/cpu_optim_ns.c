/* cpu_optim_ns.c — fp32 Newton–Schulz orthogonalisation and the Muon update (CPU backend).
 *
 * Why the matrix products are tiled here instead of handing whole matrices to a threaded
 * cblas_sgemm: OpenBLAS's threaded GEMM driver cuts K into blocks differently from its
 * single-threaded driver (0.3.21: level3_thread.c halves the remaining K, level3.c rounds it to
 * the unroll width), and every K block adds a separately rounded partial sum into C. So the same
 * product can round differently with 1 thread and with 2 — the CPU backend must not. We cut C
 * into tiles whose shape depends only on the matrix sizes and compute each tile with one
 * cblas_sgemm call from inside our own OpenMP loop; OpenBLAS (OpenMP build) runs single-threaded
 * inside an active parallel region and when the thread limit is 1, so each tile is computed the
 * same way whichever thread takes it and however many there are. */
#include "cpu_optim.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>

/* Tile shape of the products. 128 rows x 256 columns amortises OpenBLAS's packing of the A rows
 * and B columns of a tile (about 2*128*256/(128+256) = 170 flops per packed float) while still
 * giving a 512 x 512 product 8 tiles to share between threads. Symmetric products use square
 * tiles so that "the lower triangle of tiles" is well defined. Changing these changes the bits
 * of the results (not their accuracy), so they are fixed constants, never derived from the
 * thread count. */
enum { TILE_ROWS = 128, TILE_COLS = 256, SYM_TILE = 128 };

/* Element-wise loops below this size are not worth waking the thread team for. */
enum { PARALLEL_MIN_ELEMS = 1 << 15 };

/* C[M x N] = alpha * A[M x K] * op(B) + beta * C, row-major with dense leading dimensions,
 * op(B) = B[K x N] or, with transpose_b, B[N x K] transposed.
 * With symmetric_result the caller promises C is symmetric (M == N): only the tiles on and below
 * the diagonal are computed and the strict upper triangle is then copied from the lower one, which
 * halves the work and leaves C exactly symmetric. */
static void gemm_fixed_tiles(int M, int N, int K, float alpha, const float *A, const float *B,
                             int transpose_b, float beta, float *C, int symmetric_result) {
    const int tile_rows = symmetric_result ? SYM_TILE : TILE_ROWS;
    const int tile_cols = symmetric_result ? SYM_TILE : TILE_COLS;
    const int tiles_down = (M + tile_rows - 1) / tile_rows;
    const int tiles_across = (N + tile_cols - 1) / tile_cols;
    const int n_tiles = tiles_down * tiles_across;
    const int lda = K, ldb = transpose_b ? K : N, ldc = N;

    /* dynamic: the lower-triangle case skips tiles, and edge tiles are smaller. */
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < n_tiles; t++) {
        const int ti = t / tiles_across, tj = t % tiles_across;
        if (symmetric_result && tj > ti) continue;
        const int row0 = ti * tile_rows, col0 = tj * tile_cols;
        const int rows = M - row0 < tile_rows ? M - row0 : tile_rows;
        const int cols = N - col0 < tile_cols ? N - col0 : tile_cols;
        const float *b_tile = transpose_b ? B + (size_t)col0 * ldb : B + col0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, rows,
                    cols, K, alpha, A + (size_t)row0 * lda, lda, b_tile, ldb, beta,
                    C + (size_t)row0 * ldc + col0, ldc);
    }

    if (symmetric_result) {
#pragma omp parallel for schedule(static) if ((size_t)M * M >= PARALLEL_MIN_ELEMS)
        for (int i = 0; i < M; i++)
            for (int j = i + 1; j < M; j++) C[(size_t)i * ldc + j] = C[(size_t)j * ldc + i];
    }
}

size_t newton_schulz5_scratch_floats(int rows, int cols) {
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

void newton_schulz5(const float *G, float *X, int rows, int cols, int steps, float *scratch) {
    assert(G && X && scratch && rows > 0 && cols > 0 && steps >= 0);
    /* Work on the orientation with the short side first: the Gram matrix A is then m x m. */
    const int transposed = rows > cols;
    const int m = transposed ? cols : rows, n = transposed ? rows : cols;
    const size_t mn = (size_t)m * n, mm = (size_t)m * m;
    float *x_cur = scratch, *x_next = scratch + mn, *gram = scratch + 2 * mn, *poly = gram + mm;

    /* X /= X.norm() + eps: torch gives the norm as an fp32 scalar, adds eps in fp32 and divides
     * element-wise; only the norm's sum is done in double (fixed order) so it is deterministic. */
    const float divisor = (float)sqrt(sumsq_fixed_order(G, mn)) + NS5_EPS;
    if (transposed) {
        transpose_scaled(G, x_cur, rows, cols, divisor);
    } else {
#pragma omp parallel for schedule(static) if (mn >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < mn; i++) x_cur[i] = G[i] / divisor;
    }

    for (int s = 0; s < steps; s++) {
        /* A = X X^T */
        gemm_fixed_tiles(m, m, n, 1.0f, x_cur, x_cur, 1, 0.0f, gram, 1);
        /* B = b*A + c*(A A): start from A and let sgemm's beta apply b. A A is symmetric because
         * A is exactly symmetric. */
        memcpy(poly, gram, mm * sizeof *poly);
        gemm_fixed_tiles(m, m, m, NS5_C, gram, gram, 0, NS5_B, poly, 1);
        /* X = a*X + B X */
        memcpy(x_next, x_cur, mn * sizeof *x_next);
        gemm_fixed_tiles(m, n, m, 1.0f, poly, x_cur, 0, NS5_A, x_next, 0);
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

size_t muon_scratch_floats(int rows, int cols) { return newton_schulz5_scratch_floats(rows, cols); }

/* buf.mul_(momentum).add_(grad): two roundings (the add has alpha 1, so fused or not it is one
 * exact add). One definition for both paths below, so a rank that only advances the buffer
 * (Muon sharding) produces the same bits as the rank that computes the update. */
static inline float momentum_step(float buf, float mu, float grad) { return buf * mu + grad; }

void muon_momentum_advance(const float *grad, float *momentum_buf, size_t n, double momentum) {
    assert((grad && momentum_buf) || n == 0);
    const float mu = (float)momentum;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) momentum_buf[i] = momentum_step(momentum_buf[i], mu, grad[i]);
}

void muon_compute_update(const float *grad, float *momentum_buf, float *update, int rows, int cols,
                         double momentum, int nesterov, int ns_steps, float *scratch) {
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

    newton_schulz5(update, update, rows, cols, ns_steps, scratch);

    /* g *= max(1, rows/cols) ** 0.5, computed in double like Python, applied as an fp32 scalar. */
    const double aspect = (double)rows / (double)cols;
    if (aspect > 1.0) {
        const float scale = (float)pow(aspect, 0.5);
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < n; i++) update[i] *= scale;
    }
}

void muon_apply_update(float *p, const float *update, size_t n, double lr) {
    assert((p && update) || n == 0);
    const float neg_lr = (float)-lr;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) p[i] = fmaf(update[i], neg_lr, p[i]);
}

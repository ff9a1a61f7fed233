/* cuda_xsa.cu — exclusive self attention (XSA), forward and backward (see cuda_xsa.h; the pair of
 * cpu_xsa.c). One warp owns one (token, KV head): it loads the value vector once, normalises it,
 * then walks the group's query heads in head order, so GQA needs no reduction across warps and the
 * backward's dv sum over the group is in the CPU's head order. Lane l holds elements l + 32k
 * (E = ceil(hd / 32) of them, a template parameter: hd <= 128, E in {1, 2, 4}, the head dims the
 * attention kernels take; E = 8 made the backward spill on sm_80); each dot product is the lane's
 * fp32 sum and one warp butterfly (every lane gets the same bits, so the branch on the clamped
 * norm is warp-uniform). The element-wise fp32 operations are the CPU op's, with explicit
 * roundings (IEEE sqrt and division, as the CPU's sqrtf and /). */
#include "cuda_common.cuh"
#include "cuda_xsa.h"

#define XSA_NORM_EPS 1e-12f
enum { XSA_THREADS = 256, XSA_WARPS = XSA_THREADS / 32, XSA_MAX_ELEMS = 4 };

/* The calling warp's (token, KV head) row of the N * n_kv_heads, or past the end. */
static __device__ __forceinline__ size_t xsa_row() { return (size_t)blockIdx.x * XSA_WARPS + (threadIdx.x >> 5); }

/* The lane's elements of a head vector (fp32 or bf16); 0 past hd. */
template <int E, typename T>
static __device__ __forceinline__ void xsa_load(float (&dst)[E], const T *src, int hd) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < E; k++) dst[k] = lane + 32 * k < hd ? as_f32(src[lane + 32 * k]) : 0.0f;
}

template <int E>
static __device__ __forceinline__ float xsa_dot(const float (&a)[E], const float (&b)[E]) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < E; k++) s += a[k] * b[k];
    return warp_sum(s);
}

/* vn = v / max(||v||, eps) in place; returns ||v|| unclamped (raw) and clamped (norm). */
template <int E>
static __device__ __forceinline__ void xsa_normalise(float (&v)[E], float *raw, float *norm) {
    *raw = __fsqrt_rn(xsa_dot<E>(v, v));
    *norm = fmaxf(*raw, XSA_NORM_EPS);
#pragma unroll
    for (int k = 0; k < E; k++) v[k] = __fdiv_rn(v[k], *norm);
}

template <int E>
static __global__ void __launch_bounds__(XSA_THREADS)
    xsa_forward_kernel(float *out, __nv_bfloat16 *out_bf16, const __nv_bfloat16 *y, const __nv_bfloat16 *v,
                       size_t ld_v, int n_heads, int n_kv_heads, int hd, size_t rows) {
    const size_t w = xsa_row();
    if (w >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31, group = n_heads / n_kv_heads;
    const size_t n = w / (size_t)n_kv_heads;
    const int j = (int)(w % (size_t)n_kv_heads);
    float vn[E], raw, norm;
    xsa_load<E>(vn, v + n * ld_v + (size_t)j * hd, hd);
    xsa_normalise<E>(vn, &raw, &norm);
    for (int h = j * group; h < (j + 1) * group; h++) {
        const size_t o = (n * n_heads + h) * (size_t)hd;
        float yy[E];
        xsa_load<E>(yy, y + o, hd);
        const float c = xsa_dot<E>(yy, vn);
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int d = lane + 32 * k;
            if (d < hd) {
                const float r = __fsub_rn(yy[k], __fmul_rn(c, vn[k]));
                if (out) out[o + d] = r;
                if (out_bf16) out_bf16[o + d] = to_bf16(r);
            }
        }
    }
}

template <int E>
static __global__ void __launch_bounds__(XSA_THREADS)
    xsa_backward_kernel(float *dy, __nv_bfloat16 *dy_bf16, float *dv, __nv_bfloat16 *dv_bf16, const float *dout,
                        const __nv_bfloat16 *y, const __nv_bfloat16 *v, size_t ld_v, int n_heads, int n_kv_heads,
                        int hd, size_t rows) {
    const size_t w = xsa_row();
    if (w >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31, group = n_heads / n_kv_heads;
    const size_t n = w / (size_t)n_kv_heads;
    const int j = (int)(w % (size_t)n_kv_heads);
    float vn[E], dvn[E], raw, norm;
    xsa_load<E>(vn, v + n * ld_v + (size_t)j * hd, hd);
    xsa_normalise<E>(vn, &raw, &norm);
#pragma unroll
    for (int k = 0; k < E; k++) dvn[k] = 0.0f;
    for (int h = j * group; h < (j + 1) * group; h++) {
        const size_t o = (n * n_heads + h) * (size_t)hd;
        float yy[E], go[E];
        xsa_load<E>(yy, y + o, hd);
        xsa_load<E>(go, dout + o, hd);
        const float c = xsa_dot<E>(yy, vn), e = xsa_dot<E>(go, vn);
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int d = lane + 32 * k;
            if (d < hd) {
                const float g = __fsub_rn(go[k], __fmul_rn(e, vn[k]));
                if (dy) dy[o + d] = __fadd_rn(dy[o + d], g);
                if (dy_bf16) dy_bf16[o + d] = to_bf16(g);
            }
            dvn[k] = __fsub_rn(dvn[k], __fadd_rn(__fmul_rn(c, go[k]), __fmul_rn(e, yy[k])));
        }
    }
    float f = 0.0f;
    if (raw > XSA_NORM_EPS) f = xsa_dot<E>(dvn, vn); /* warp-uniform: raw has the same bits in every lane */
    const size_t ov = n * (size_t)n_kv_heads * hd + (size_t)j * hd, ob = n * ld_v + (size_t)j * hd;
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int d = lane + 32 * k;
        if (d < hd) {
            const float g = raw > XSA_NORM_EPS ? __fdiv_rn(__fsub_rn(dvn[k], __fmul_rn(f, vn[k])), norm)
                                               : __fdiv_rn(dvn[k], norm);
            if (dv) dv[ov + d] = __fadd_rn(dv[ov + d], g);
            if (dv_bf16) dv_bf16[ob + d] = to_bf16(__fadd_rn(from_bf16(dv_bf16[ob + d]), g));
        }
    }
}

static int check_xsa_shape(const char *op, int ld_v, int n_heads, int n_kv_heads, int head_dim) {
    if (head_dim <= 0 || head_dim > 32 * XSA_MAX_ELEMS)
        return ct_fail("%s: head_dim %d must be in [1, %d]", op, head_dim, 32 * XSA_MAX_ELEMS);
    if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
        return ct_fail("%s: %d query heads are not a whole number of groups of the %d KV heads", op, n_heads,
                       n_kv_heads);
    if (ld_v < n_kv_heads * head_dim)
        return ct_fail("%s: a row stride of %d elements for v is below the %d x %d of a token's KV heads", op, ld_v,
                       n_kv_heads, head_dim);
    return 0;
}

static unsigned xsa_blocks(size_t rows) { return ct_blocks(rows, XSA_WARPS); }

extern "C" int cuda_xsa_forward(float *out, ct_bf16 *out_bf16, const ct_bf16 *y_bf16, const ct_bf16 *v_bf16,
                                const CudaXsaShape *shape, cudaStream_t stream) {
    const int N = shape->N, n_heads = shape->n_heads, n_kv_heads = shape->n_kv_heads, head_dim = shape->head_dim;
    const int ld_v = shape->ld_v;
    if (check_xsa_shape("xsa_forward", ld_v, n_heads, n_kv_heads, head_dim) != 0) return -1;
    const size_t rows = (size_t)N * n_kv_heads;
    if (rows == 0) return 0;
    __nv_bfloat16 *ob = host_as_bf(out_bf16);
    const __nv_bfloat16 *y = host_as_bf(y_bf16), *v = host_as_bf(v_bf16);
    const size_t ld = (size_t)ld_v;
    const unsigned blocks = xsa_blocks(rows);
    if (head_dim <= 32)
        xsa_forward_kernel<1><<<blocks, XSA_THREADS, 0, stream>>>(out, ob, y, v, ld, n_heads, n_kv_heads, head_dim,
                                                                   rows);
    else if (head_dim <= 64)
        xsa_forward_kernel<2><<<blocks, XSA_THREADS, 0, stream>>>(out, ob, y, v, ld, n_heads, n_kv_heads, head_dim,
                                                                   rows);
    else
        xsa_forward_kernel<4><<<blocks, XSA_THREADS, 0, stream>>>(out, ob, y, v, ld, n_heads, n_kv_heads, head_dim,
                                                                   rows);
    CT_LAUNCHED("xsa_forward", stream);
    return 0;
}

extern "C" int cuda_xsa_backward(float *dy, ct_bf16 *dy_bf16, float *dv, ct_bf16 *dv_bf16, const float *dout,
                                 const ct_bf16 *y_bf16, const ct_bf16 *v_bf16, const CudaXsaShape *shape,
                                 cudaStream_t stream) {
    const int N = shape->N, n_heads = shape->n_heads, n_kv_heads = shape->n_kv_heads, head_dim = shape->head_dim;
    const int ld_v = shape->ld_v;
    if (check_xsa_shape("xsa_backward", ld_v, n_heads, n_kv_heads, head_dim) != 0) return -1;
    const size_t rows = (size_t)N * n_kv_heads;
    if (rows == 0) return 0;
    __nv_bfloat16 *dyb = host_as_bf(dy_bf16), *dvb = host_as_bf(dv_bf16);
    const __nv_bfloat16 *y = host_as_bf(y_bf16), *v = host_as_bf(v_bf16);
    const size_t ld = (size_t)ld_v;
    const unsigned blocks = xsa_blocks(rows);
    if (head_dim <= 32)
        xsa_backward_kernel<1><<<blocks, XSA_THREADS, 0, stream>>>(dy, dyb, dv, dvb, dout, y, v, ld, n_heads,
                                                                   n_kv_heads, head_dim, rows);
    else if (head_dim <= 64)
        xsa_backward_kernel<2><<<blocks, XSA_THREADS, 0, stream>>>(dy, dyb, dv, dvb, dout, y, v, ld, n_heads,
                                                                   n_kv_heads, head_dim, rows);
    else
        xsa_backward_kernel<4><<<blocks, XSA_THREADS, 0, stream>>>(dy, dyb, dv, dvb, dout, y, v, ld, n_heads,
                                                                   n_kv_heads, head_dim, rows);
    CT_LAUNCHED("xsa_backward", stream);
    return 0;
}

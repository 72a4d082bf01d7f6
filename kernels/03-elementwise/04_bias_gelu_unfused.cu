// Chapter 03, version 4: bias + GELU unfused (`unfused`): two kernels, as an eager framework runs them.
//   bias_add_bf16: t = bf16(x + b[col])       x, t [M, N] row-major bf16, b [N] bf16
//   gelu_bf16:     y = bf16(gelu_tanh(t))     elementwise over the M*N elements of t
//
// Idea: each kernel on its own is written the way the add ladder taught: 16-byte vectors of 8 bf16 when the
// layout allows it (bias_add_bf16: N % 8 == 0 and x, b, t 16-byte aligned; gelu_bf16: t and y aligned, with a
// scalar tail for the last (M*N) % 8 elements), single elements otherwise (the kernels check; the branch is
// uniform), in a grid-stride loop unrolled 2-fold, fp32 arithmetic, round to nearest even on every store.
// The bias column of each vector is tracked incrementally (c += G mod N/W) instead of a 64-bit modulo per
// vector. GELU is computed exactly as in version 5 (the tanh form written as u / (1 + exp(-2z))). The only
// difference from version 5 is the bf16 temporary t between the two launches: its write and its read.
//
// Prediction: the operation needs 4MN + 2N bytes (x read, y written, b read once), the figure both versions
// are judged on; this one moves 8MN + 2N: t is 2MN = 256 MiB at 16384 x 8192, four times the L2, so it
// really goes to HBM and back. If each kernel streams at ~copy bandwidth, the pair takes ~2 x 0.13 ms =
// 0.26 ms: ~50% of copy on the counted bytes, half the speed of the fused kernel, and about 1x torch's eager
// F.gelu(x + b, approximate="tanh"), which has the same structure. Rounding t to bf16 also changes the
// result slightly (within bf16 tolerance of the fused one).
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "bias_gelu"):
//   unfused at 16384x8192: 0.2756 ms, 1948 GB/s, 45.6% of copy, 1.70x torch.nn.functional.gelu(x + b, approximate="tanh")
#include <cuda_bf16.h>
#include "common/vector_io.cuh"   // Vec<W> (W = 1, 8), unpack / pack: W bf16 <-> W floats
#include "common/gelu.cuh"        // gelu_tanh
#include "common/bias_rows.cuh"   // bias_rows_loop: t[r, c] = OP(x[r, c], b[c]), grid-stride, W bf16 per access

#define THREADS 256     // the wrapper launches blocks of at most this many threads
#define UNROLL 2

template <int W>
__device__ __forceinline__ typename Vec<W>::T add_vec(typename Vec<W>::T xv, typename Vec<W>::T bv)
{
    float xf[W], bf[W];
    unpack(xv, xf);
    unpack(bv, bf);
#pragma unroll
    for (int k = 0; k < W; ++k) {
        xf[k] += bf[k];
    }
    typename Vec<W>::T r;
    pack(xf, r);
    return r;
}

template <int W>
__device__ __forceinline__ typename Vec<W>::T gelu_vec(typename Vec<W>::T tv)
{
    float f[W];
    unpack(tv, f);
#pragma unroll
    for (int k = 0; k < W; ++k) {
        f[k] = gelu_tanh(f[k]);
    }
    typename Vec<W>::T r;
    pack(f, r);
    return r;
}

// y = gelu(t) over n elements, W bf16 per access; the last n % W elements one per thread.
template <int W>
__device__ __forceinline__ void gelu_loop(const __nv_bfloat16* __restrict__ t, __nv_bfloat16* __restrict__ y,
                                          long long n)
{
    typedef typename Vec<W>::T V;
    const V* __restrict__ tv = reinterpret_cast<const V*>(t);
    V* __restrict__ yv = reinterpret_cast<V*>(y);
    const long long n_vec = n / W;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long v = first;

    for (; v + (UNROLL - 1) * stride < n_vec; v += UNROLL * stride) {
        V ta[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            ta[u] = tv[v + u * stride];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            yv[v + u * stride] = gelu_vec<W>(ta[u]);
        }
    }
    for (; v < n_vec; v += stride) {
        yv[v] = gelu_vec<W>(tv[v]);
    }
    if (first < n - W * n_vec) {                                            // the tail: at most W - 1 elements
        const long long k = W * n_vec + first;
        y[k] = __float2bfloat16_rn(gelu_tanh(__bfloat162float(t[k])));
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) bias_add_bf16(const __nv_bfloat16* __restrict__ x,
                                                                    const __nv_bfloat16* __restrict__ b,
                                                                    __nv_bfloat16* __restrict__ t,
                                                                    long long M, long long N)
{
    const unsigned long long addr = reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(b)
                                  | reinterpret_cast<unsigned long long>(t);
    if (N % 8 == 0 && (addr & 15) == 0) {       // the same for every thread: no divergence
        bias_rows_loop<8, UNROLL, add_vec<8>>(x, b, t, M, N);
    } else {
        bias_rows_loop<1, UNROLL, add_vec<1>>(x, b, t, M, N);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) gelu_bf16(const __nv_bfloat16* __restrict__ t,
                                                                __nv_bfloat16* __restrict__ y, long long n)
{
    const unsigned long long addr = reinterpret_cast<unsigned long long>(t) | reinterpret_cast<unsigned long long>(y);
    if ((addr & 15) == 0) {
        gelu_loop<8>(t, y, n);
    } else {
        gelu_loop<1>(t, y, n);
    }
}

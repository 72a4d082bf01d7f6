// Chapter 04, version 4: LayerNorm with Welford's algorithm, the row in registers, one read.
//
//   y[r, i] = (x[r, i] - mean) * rsqrt(var + eps) * w[i] + b[i]       (bf16 in and out, fp32 inside)
//
// Idea: each thread keeps its share of the row in registers (VECS_PER_THREAD 16-byte vectors, all loads
// issued first) and runs Welford's update over its elements:
//     n += 1;  d = x - mean;  mean += d / n;  M2 += d * (x - mean)
// which never forms E[x^2] - mean^2, so it stays accurate when |mean| >> std. Because a thread's valid
// vectors are always a prefix (vector k exists only if vector k-1 does), n is a compile-time constant
// at every step of the unrolled loop and 1/n folds into a constant: no division. The per-thread triples
// (n, mean, M2) are combined with Chan's rule for merging two sets a and b:
//     n = na + nb,  d = mean_b - mean_a,  mean = mean_a + d * nb / n,  M2 = M2a + M2b + d^2 * na * nb / n
// first across the 32 lanes of a warp with __shfl_xor_sync, then across the row's warps through ONE
// shared-memory exchange. When N fills every thread of the row (N = 8 * VECS_PER_THREAD * tpr, e.g.
// 4096 = 8 * 2 * 256), every merge joins two halves of equal count: nb / n = 1/2, so the merge needs no
// division and n need not be shuffled (2 shuffles and ~7 operations a step instead of 3 and ~12).
// So: one read of x, one barrier, statistics as accurate as the two-pass form. Short rows share a block
// (tpr threads per row, a power of two); 32 registers at most (two 1024-thread blocks or eight
// 256-thread blocks per SM), which leaves room for 2 vectors per thread (rmsnorm_regs holds 4;
// Welford's state and Chan's merge need more registers). N not a multiple of 8, or
// N > 8 * VECS_PER_THREAD * 1024 = 16384, go to `layernorm_welford_chunked`: the same Welford/Chan
// statistics streamed over the row in chunks, then a second read of the row (mostly from L2).
//
// Prediction (65536 x 4096 bf16, tpr = 256, one row per 256-thread block, 8 rows in flight per SM):
// bytes = 2*2*M*N + 2*2*N = 1.07 GB, ~0.26 ms at ~4.1 TB/s; the load shape of `rmsnorm_regs`. Unlike
// RMSNorm, the arithmetic is no longer free: per element ~5 instructions of Welford update (a chain
// through `mean`) and ~4.5 to normalise and pack, plus 8 merge steps (~70 instructions) per 16
// elements: ~14 instructions per element against ~6 for rmsnorm_regs. At the copy bandwidth an SM must
// finish ~3.9 elements per cycle, ~55 of its 128 thread-instruction issue slots per cycle, while the
// row's loads wait behind a barrier. Expect ~90-95% of the copy bandwidth, a few points under
// rmsnorm_regs, and ~1.3x F.layer_norm.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "layernorm"):
//   welford at 65536x4096: 0.2822 ms, 3805 GB/s, 90.7% of copy, 1.41x torch.nn.functional.layer_norm
#include <cuda_bf16.h>
#include "common/reductions.cuh"   // FULL_MASK (Chan's merge brings its own shuffles)
#include "common/bf16_pack.cuh"    // unpack8, pack2
#include "common/row_io.cuh"       // keep_packed
#include "common/row_regs.cuh"     // RowThread, row_thread, load_row

#ifndef VECS_PER_THREAD
#define VECS_PER_THREAD 2      // 16 bf16 per thread: with Welford's extra state, 4 vectors would spill at 32 registers
#endif

// Chan's merge of (nb, mean_b, m2b) into (n, mean, m2). Empty sets (n = 0) merge to the other set.
__device__ __forceinline__ void chan_merge(float& n, float& mean, float& m2, float nb, float mean_b, float m2b)
{
    const float nn = n + nb;
    const float r = nn > 0.f ? __fdividef(nb, nn) : 0.f;   // nb / n_total
    const float d = mean_b - mean;
    mean = fmaf(d, r, mean);
    m2 = m2 + m2b + d * d * n * r;
    n = nn;
}

// Butterfly merge over groups of `width` lanes (width a power of two <= 32): after it, every lane of a
// group holds the merge of the group. `equal`: every lane of the row holds the same count (N fills all
// of its threads' vectors, e.g. N = 4096 with tpr = 256 and 2 vectors each), so each step merges two
// halves of equal size: r = 1/2, no division, and n need not travel. Otherwise the general rule above.
// `equal` is the same for the whole block, so the shuffles are never divergent.
__device__ __forceinline__ void warp_welford(float& n, float& mean, float& m2, int width, bool equal)
{
#pragma unroll
    for (int o = width >> 1; o > 0; o >>= 1) {
        const float mb = __shfl_xor_sync(FULL_MASK, mean, o);
        const float m2b = __shfl_xor_sync(FULL_MASK, m2, o);
        if (equal) {
            const float d = mb - mean;
            mean = 0.5f * (mean + mb);
            m2 = (m2 + m2b) + d * d * (0.5f * n);     // Chan with na = nb = n: d^2 * n * n / (2n)
            n = n + n;
        } else {
            const float nb = __shfl_xor_sync(FULL_MASK, n, o);
            chan_merge(n, mean, m2, nb, mb, m2b);
        }
    }
}

// Merge the (n, mean, m2) of the 2^tpr_log2 threads of this thread's row (rows are consecutive groups of
// tpr threads, tpr a power of two >= 32, uniform over the block): the 32 lanes of each warp, then the
// row's wpr warps through shared memory (a butterfly over wpr lanes only). Chan's merge is not
// symmetric to the last bit, so lanes can differ by rounding: lane 0's result is broadcast to the warp.
__device__ __forceinline__ void row_welford(float& n, float& mean, float& m2, float* rn, float* rmean,
                                            float* rm2, int tpr_log2, bool equal)
{
    warp_welford(n, mean, m2, 32, equal);
    if (tpr_log2 > 5) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int wpr = 1 << (tpr_log2 - 5);
        if (lane == 0) {
            rn[warp] = n; rmean[warp] = mean; rm2[warp] = m2;
        }
        __syncthreads();
        const int src = (warp & ~(wpr - 1)) + lane;
        n = 0.f; mean = 0.f; m2 = 0.f;
        if (lane < wpr) {
            n = rn[src]; mean = rmean[src]; m2 = rm2[src];
        }
        warp_welford(n, mean, m2, wpr, equal);       // lanes >= wpr only meet each other
    }
    mean = __shfl_sync(FULL_MASK, mean, 0);
    m2 = __shfl_sync(FULL_MASK, m2, 0);
}

// y for one vector of 8: (x - mean) * rstd * w + b
__device__ __forceinline__ uint4 normalise8(const uint4 xv, const uint4 wv, const uint4 bv, float mean, float rstd)
{
    float f[8], g[8], h[8];
    unpack8(xv, f);
    unpack8(wv, g);
    unpack8(bv, h);
    uint4 o;
    o.x = pack2(fmaf((f[0] - mean) * rstd, g[0], h[0]), fmaf((f[1] - mean) * rstd, g[1], h[1]));
    o.y = pack2(fmaf((f[2] - mean) * rstd, g[2], h[2]), fmaf((f[3] - mean) * rstd, g[3], h[3]));
    o.z = pack2(fmaf((f[4] - mean) * rstd, g[4], h[4]), fmaf((f[5] - mean) * rstd, g[5], h[5]));
    o.w = pack2(fmaf((f[6] - mean) * rstd, g[6], h[6]), fmaf((f[7] - mean) * rstd, g[7], h[7]));
    return o;
}

template <int VPT>
__device__ __forceinline__ void layernorm_welford_body(const __nv_bfloat16* __restrict__ x,
                                                       const __nv_bfloat16* __restrict__ w,
                                                       const __nv_bfloat16* __restrict__ b,
                                                       __nv_bfloat16* __restrict__ y,
                                                       int M, int N, float eps, int tpr_log2)
{
    __shared__ float rn[32], rmean[32], rm2[32];
    const RowThread r = row_thread(M, N, tpr_log2);

    uint4 v[VPT];
    load_row(x, r, v, make_uint4(0u, 0u, 0u, 0u));

    // Welford over this thread's elements: the j-th element of vector k is element 8k+j+1 of the thread
    float n = 0.f, mean = 0.f, m2 = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        if (r.owns(k)) {
            float f[8];
            unpack8(v[k], f);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float d = f[j] - mean;
                mean = fmaf(d, 1.f / (float)(8 * k + j + 1), mean);   // a constant after unrolling
                m2 = fmaf(d, f[j] - mean, m2);
            }
            n = (float)(8 * (k + 1));
        }
    }
    row_welford(n, mean, m2, rn, rmean, rm2, tpr_log2, r.nvec == VPT * r.tpr);   // equal counts: N fills the row's threads
    const float rstd = rsqrtf(m2 / (float)N + eps);
    // keep the row packed (4 registers per vector) across the reduction; see 02_rmsnorm_regs.cu
    keep_packed(v);

    const uint4* __restrict__ wv = reinterpret_cast<const uint4*>(w);
    const uint4* __restrict__ bv = reinterpret_cast<const uint4*>(b);
    uint4* __restrict__ yr = reinterpret_cast<uint4*>(y + r.base);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = r.vec(k);
        if (r.owns(k)) {
            yr[i] = normalise8(v[k], wv[i], bv[i], mean, rstd);
        }
    }
}

// N % 8 == 0 and N <= 8 * VECS_PER_THREAD * tpr, tpr = 2^tpr_log2 in [32, 1024], blockDim a multiple of tpr
extern "C" __global__ void __launch_bounds__(1024, 2)
layernorm_welford(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                  const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y,
                  int M, int N, float eps, int tpr_log2)
{
    layernorm_welford_body<VECS_PER_THREAD>(x, w, b, y, M, N, eps, tpr_log2);
}

// Any N: one block (a power of two, 32 to 512 threads) per row. Pass 1 streams the row: per 16-byte
// vector, the exact mean and M2 of its 8 values, merged into the thread's running triple with Chan's
// rule (single elements with Welford's update when N % 8 != 0); then the row merge as above. Pass 2
// reads the row again and normalises.
extern "C" __global__ void __launch_bounds__(512)
layernorm_welford_chunked(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                          const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y,
                          int M, int N, float eps)
{
    __shared__ float rn[32], rmean[32], rm2[32];
    const int T = blockDim.x;
    const long long base = (long long)blockIdx.x * N;
    const __nv_bfloat16* __restrict__ xr = x + base;
    __nv_bfloat16* __restrict__ yr = y + base;
    const bool vec = (N & 7) == 0;
    const int nvec = N >> 3;
    const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(xr);

    float n = 0.f, mean = 0.f, m2 = 0.f;
    if (vec) {
        for (int c = threadIdx.x; c < nvec; c += 4 * T) {
            uint4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                v[k] = i < nvec ? xv[i] : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (c + k * T < nvec) {
                    float f[8];
                    unpack8(v[k], f);
                    const float mb = (((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]))) * 0.125f;
                    float m2b = 0.f;
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        m2b = fmaf(f[j] - mb, f[j] - mb, m2b);
                    }
                    chan_merge(n, mean, m2, 8.f, mb, m2b);
                }
            }
        }
    } else {
        for (int c = threadIdx.x; c < N; c += 4 * T) {
            float f[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                f[k] = i < N ? __bfloat162float(xr[i]) : 0.f;
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (c + k * T < N) {
                    n += 1.f;
                    const float d = f[k] - mean;
                    mean += d / n;
                    m2 = fmaf(d, f[k] - mean, m2);
                }
            }
        }
    }
    row_welford(n, mean, m2, rn, rmean, rm2, 31 - __clz(T), false);
    const float rstd = rsqrtf(m2 / (float)N + eps);

    if (vec) {
        const uint4* __restrict__ wv = reinterpret_cast<const uint4*>(w);
        const uint4* __restrict__ bv = reinterpret_cast<const uint4*>(b);
        uint4* __restrict__ yv = reinterpret_cast<uint4*>(yr);
#pragma unroll 4
        for (int i = threadIdx.x; i < nvec; i += T) {
            yv[i] = normalise8(xv[i], wv[i], bv[i], mean, rstd);
        }
    } else {
        for (int i = threadIdx.x; i < N; i += T) {
            const float v = __bfloat162float(xr[i]);
            yr[i] = __float2bfloat16_rn(fmaf((v - mean) * rstd, __bfloat162float(w[i]), __bfloat162float(b[i])));
        }
    }
}

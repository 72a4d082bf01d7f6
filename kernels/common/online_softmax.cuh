// The online softmax state (Milakov & Gimelshein, 2018) that chapter 04's softmax and chapter 10's fused
// cross-entropy keep: a running max m and normaliser d = sum exp(x - m), updated a few values at a time
// and merged between threads as (m, d) + (m', d') = (M, d exp(m - M) + d' exp(m' - M)), M = max(m, m').
// A state that has seen no finite value (m = -inf) is rescaled by 0, never by exp(-inf - -inf) = NaN.
#pragma once
#include <cuda_bf16.h>
#include "common/fast_exp.cuh"     // fast_exp2, LOG2E, NEG_INF
#include "common/reductions.cuh"   // FULL_MASK
#include "common/bf16_pack.cuh"    // unpack8

// exp(m_old - m_new): the factor that moves a normaliser from max m_old to max m_new (>= m_old).
// A state that has seen no finite value (m_old = -inf) is scaled by 0, never by exp(-inf - -inf) = NaN.
__device__ __forceinline__ float rescale(float m_old, float m_new)
{
    return m_old == NEG_INF ? 0.f : fast_exp2((m_old - m_new) * LOG2E);
}

// merge the state (mb, db) into (m, d)
__device__ __forceinline__ void merge(float& m, float& d, float mb, float db)
{
    const float mm = fmaxf(m, mb);
    d = d * rescale(m, mm) + db * rescale(mb, mm);
    m = mm;
}

// fold CNT values (absent ones passed as -inf) into the running state (m, d)
template <int CNT>
__device__ __forceinline__ void online_update(float& m, float& d, const float* v)
{
    float c = v[0];
#pragma unroll
    for (int j = 1; j < CNT; ++j) {
        c = fmaxf(c, v[j]);                          // fmaxf ignores NaN; the sum below catches it
    }
    const float m_new = fmaxf(m, c);
    const float ref = m_new == NEG_INF ? 0.f : m_new; // nothing finite yet: exp(v - 0) is 0 (or NaN)
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < CNT; ++j) {
        s += fast_exp2((v[j] - ref) * LOG2E);
    }
    d = d * rescale(m, m_new) + s;
    m = m_new;
}

// Merge every thread's (m, d) into the block's: 32 lanes by shuffles, then the warps' states through
// shared memory (red_m, red_d: 32 floats each). Every thread returns with the block's state. blockDim.x:
// a multiple of 32. The merge is not bit-symmetric (a*b + c*d may fuse either way), so lane 0's result is
// taken everywhere.
__device__ __forceinline__ void online_block_merge(float& m, float& d, float* red_m, float* red_d)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        merge(m, d, __shfl_xor_sync(FULL_MASK, m, o), __shfl_xor_sync(FULL_MASK, d, o));
    }
    const int nwarps = blockDim.x >> 5;
    if (nwarps > 1) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (lane == 0) {
            red_m[warp] = m;
            red_d[warp] = d;
        }
        __syncthreads();
        m = lane < nwarps ? red_m[lane] : NEG_INF;
        d = lane < nwarps ? red_d[lane] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            merge(m, d, __shfl_xor_sync(FULL_MASK, m, o), __shfl_xor_sync(FULL_MASK, d, o));
        }
    }
    m = __shfl_sync(FULL_MASK, m, 0);
    d = __shfl_sync(FULL_MASK, d, 0);
}

// This thread's (m, d) over its part of a bf16 row of N values: elements c, c + T, ... (T = blockDim.x),
// 16-byte vectors with four loads in flight when N % 8 == 0 (the row then starts 16-byte aligned), else
// single elements. Absent values count as -inf (exp = 0). Merge the threads' states with
// online_block_merge.
__device__ __forceinline__ void online_row_state(const __nv_bfloat16* __restrict__ xr, int N, float& m, float& d)
{
    const int T = blockDim.x;
    const bool vec = (N & 7) == 0;
    const int nvec = N >> 3;
    const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(xr);
    const uint4 neg_inf8 = make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u);  // 8 x bf16 -inf
    m = NEG_INF;
    d = 0.f;
    if (vec) {
        for (int c = threadIdx.x; c < nvec; c += 4 * T) {
            uint4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                v[k] = i < nvec ? xv[i] : neg_inf8;      // absent vectors count as exp(-inf) = 0
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float f[8];
                unpack8(v[k], f);
                online_update<8>(m, d, f);
            }
        }
    } else {
        for (int c = threadIdx.x; c < N; c += 4 * T) {
            float f[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                f[k] = i < N ? __bfloat162float(xr[i]) : NEG_INF;
            }
            online_update<4>(m, d, f);
        }
    }
}

// Reductions across threads in two levels. Introduced in chapter 04 (RMSNorm, LayerNorm, softmax).
//
// Level 1, a warp: five __shfl_xor_sync butterfly steps (offsets 16, 8, 4, 2, 1). No shared memory and no
// barrier, and every lane ends with the same result.
// Level 2, several warps: lane 0 of each warp posts its warp's result to shared memory, ONE __syncthreads(),
// then each warp reduces the posted values of its group with level 1 again.
// A group is the whole block (block_*) or one row of a block that holds several rows (row_*: a row is
// 2^tpr_log2 consecutive threads). Block sizes and tpr are powers of two >= 32, uniform over the block, so
// no barrier or shuffle is ever divergent. `red` holds one float per warp of the block (32 is enough) and
// must not be reused by another reduction before a barrier: give each reduction its own array.
#pragma once
#include "common/fast_exp.cuh"   // NEG_INF

#define FULL_MASK 0xffffffffu     // all 32 lanes take part in every shuffle

struct SumOp { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct MaxOp { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };

// level 1: every lane gets op over the warp's 32 values
template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v = op(v, __shfl_xor_sync(FULL_MASK, v, o));   // butterfly: lane i meets lane i ^ o
    }
    return v;
}

// level 2 over the whole block (blockDim a power of two, 32..1024): lane 0 of each warp posts its warp's
// result, and after the barrier every warp reduces the nwarps posted values (lanes past them: the identity)
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, float* red, float identity, Op op)
{
    v = warp_reduce(v, op);
    const int nwarps = blockDim.x >> 5;
    if (nwarps > 1) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (lane == 0) {
            red[warp] = v;
        }
        __syncthreads();
        v = warp_reduce(lane < nwarps ? red[lane] : identity, op);
    }
    return v;
}

// level 2 over the 2^tpr_log2 threads of this thread's row: the same exchange, but each warp reduces only
// the wpr results of its own row's warps, which start at its row's first warp (warp & ~(wpr - 1))
template <typename Op>
__device__ __forceinline__ float row_reduce(float v, float* red, int tpr_log2, float identity, Op op)
{
    v = warp_reduce(v, op);
    if (tpr_log2 > 5) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int wpr = 1 << (tpr_log2 - 5);                  // warps per row
        if (lane == 0) {
            red[warp] = v;
        }
        __syncthreads();
        v = warp_reduce(lane < wpr ? red[(warp & ~(wpr - 1)) + lane] : identity, op);
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp()); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, MaxOp()); }
__device__ __forceinline__ float block_sum(float v, float* red) { return block_reduce(v, red, 0.f, SumOp()); }
__device__ __forceinline__ float block_max(float v, float* red) { return block_reduce(v, red, NEG_INF, MaxOp()); }
__device__ __forceinline__ float row_sum(float v, float* red, int tpr_log2) { return row_reduce(v, red, tpr_log2, 0.f, SumOp()); }
__device__ __forceinline__ float row_max(float v, float* red, int tpr_log2) { return row_reduce(v, red, tpr_log2, NEG_INF, MaxOp()); }

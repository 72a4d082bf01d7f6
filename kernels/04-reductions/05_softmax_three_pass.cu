// Chapter 04, version 5: softmax in three passes over global memory, one block per row.
//
//   m = max_i x[r, i],  s = sum_i exp(x[r, i] - m),  y[r, i] = exp(x[r, i] - m) / s    (bf16, fp32 inside)
//
// Idea: the safe softmax exactly as written. Subtracting the row max first keeps exp() from overflowing
// (x up to the bf16 maximum, 3.4e38, works: x - m <= 0). Pass 1 reads the row and reduces the max;
// pass 2 reads it again and reduces the sum of exponentials; pass 3 reads it a third time and writes.
// Each reduction: warp shuffles, one shared-memory exchange. exp(z) = 2^(z * log2 e), one ex2.approx
// (MUFU) instruction: about 2 ulp of fp32, far below what a bf16 output can show.
// Numerics (the same as torch.softmax): a row of all -inf has m = -inf and x - m = NaN, so the row is
// NaN; -inf entries in a finite row give exp(-inf) = 0; a NaN anywhere makes s NaN, so the row is NaN
// (fmaxf ignores NaN in the max, the sum does not).
//
// Prediction (65536 x 4096 bf16): bytes that must move = 2*2*M*N = 1.07 GB, ~0.26 ms at ~4.1 TB/s.
// The row is read three times; the second and third reads hit L1/L2 (8.6 MB of rows in flight vs a
// 60 MB L2), so DRAM traffic stays ~1x, but each row goes through three load phases and two barriers.
// Expect ~70-85% of the copy bandwidth: already well ahead of torch.softmax (~1.3 TB/s in ANCHORS.md),
// behind the one-read `softmax_regs`.
// Result (NVIDIA H200, 2026-11-30, labs/results/nvidia-h200.json, op "softmax"):
//   three_pass at 65536x4096: 0.3354 ms, 3202 GB/s, 77.7% of copy, 2.48x torch.softmax
#include <cuda_bf16.h>

#define FULL_MASK 0xffffffffu
#define LOG2E 1.4426950408889634f
#define NEG_INF __uint_as_float(0xff800000u)   // -inf (NVRTC has no math.h INFINITY)

__device__ __forceinline__ float fast_exp2(float z)   // 2^z; -inf -> 0, NaN -> NaN
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(z));
    return r;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(FULL_MASK, v, o);
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    }
    return v;
}

// reductions over the whole block (blockDim a power of two, 32..1024); every thread gets the result
__device__ __forceinline__ float block_sum(float v, float* red)
{
    v = warp_sum(v);
    const int nwarps = blockDim.x >> 5;
    if (nwarps > 1) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (lane == 0) {
            red[warp] = v;
        }
        __syncthreads();
        v = warp_sum(lane < nwarps ? red[lane] : 0.f);
    }
    return v;
}

__device__ __forceinline__ float block_max(float v, float* red)
{
    v = warp_max(v);
    const int nwarps = blockDim.x >> 5;
    if (nwarps > 1) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (lane == 0) {
            red[warp] = v;
        }
        __syncthreads();
        v = warp_max(lane < nwarps ? red[lane] : NEG_INF);
    }
    return v;
}

__device__ __forceinline__ void unpack8(const uint4 v, float f[8])
{
    f[0] = __uint_as_float(v.x << 16); f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16); f[3] = __uint_as_float(v.y & 0xffff0000u);
    f[4] = __uint_as_float(v.z << 16); f[5] = __uint_as_float(v.z & 0xffff0000u);
    f[6] = __uint_as_float(v.w << 16); f[7] = __uint_as_float(v.w & 0xffff0000u);
}

__device__ __forceinline__ unsigned int pack2(float a, float b)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<unsigned int*>(&h);
}

// Call f(value) for each element of the row this thread owns (16-byte vectors c, c + T, ... when
// N % 8 == 0, else single elements), four loads in flight per step.
template <typename F>
__device__ __forceinline__ void for_each_element(const __nv_bfloat16* __restrict__ xr, int N, F f)
{
    const int T = blockDim.x;
    if ((N & 7) == 0) {
        const int nvec = N >> 3;
        const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(xr);
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
                    float e[8];
                    unpack8(v[k], e);
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        f(e[j]);
                    }
                }
            }
        }
    } else {
        for (int c = threadIdx.x; c < N; c += 4 * T) {
            float e[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                e[k] = i < N ? __bfloat162float(xr[i]) : 0.f;
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (c + k * T < N) {
                    f(e[k]);
                }
            }
        }
    }
}

// grid = M blocks, blockDim a power of two from 32 to 1024
extern "C" __global__ void __launch_bounds__(1024)
softmax_three_pass(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int M, int N)
{
    __shared__ float red_max[32], red_sum[32];
    const long long base = (long long)blockIdx.x * N;   // 64-bit: M*N may exceed 2^31
    const __nv_bfloat16* __restrict__ xr = x + base;
    __nv_bfloat16* __restrict__ yr = y + base;

    // pass 1: the row max
    float m = NEG_INF;
    for_each_element(xr, N, [&](float v) { m = fmaxf(m, v); });
    m = block_max(m, red_max);

    // pass 2: the sum of exp(x - m), re-reading the row
    float s = 0.f;
    for_each_element(xr, N, [&](float v) { s += fast_exp2((v - m) * LOG2E); });
    const float inv = 1.f / block_sum(s, red_sum);

    // pass 3: y = exp(x - m) / s, re-reading the row once more
    const int T = blockDim.x;
    if ((N & 7) == 0) {
        const int nvec = N >> 3;
        const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(xr);
        uint4* __restrict__ yv = reinterpret_cast<uint4*>(yr);
#pragma unroll 4
        for (int i = threadIdx.x; i < nvec; i += T) {
            float f[8];
            unpack8(xv[i], f);
            uint4 o;
            o.x = pack2(fast_exp2((f[0] - m) * LOG2E) * inv, fast_exp2((f[1] - m) * LOG2E) * inv);
            o.y = pack2(fast_exp2((f[2] - m) * LOG2E) * inv, fast_exp2((f[3] - m) * LOG2E) * inv);
            o.z = pack2(fast_exp2((f[4] - m) * LOG2E) * inv, fast_exp2((f[5] - m) * LOG2E) * inv);
            o.w = pack2(fast_exp2((f[6] - m) * LOG2E) * inv, fast_exp2((f[7] - m) * LOG2E) * inv);
            yv[i] = o;
        }
    } else {
        for (int i = threadIdx.x; i < N; i += T) {
            yr[i] = __float2bfloat16_rn(fast_exp2((__bfloat162float(xr[i]) - m) * LOG2E) * inv);
        }
    }
}

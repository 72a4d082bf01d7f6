// How a thread gets at its share of a row of bf16. Introduced in chapter 04 (RMSNorm, LayerNorm, softmax).
//  - for_each_element: stream the row through the block with several loads in flight per thread, for the
//    kernels that read a row more than once (two-pass LayerNorm, three-pass softmax);
//  - keep_packed: for the kernels that hold their share of the row in registers across a reduction.
#pragma once
#include <cuda_bf16.h>
#include "common/bf16_pack.cuh"

// Call f(value) for each element of the row xr[0, N) that this thread owns: 16-byte vectors c, c + T,
// c + 2T, ... (T = blockDim.x) when N % 8 == 0 (the row then starts 16-byte aligned), else single elements.
// Four loads are issued before any is used, so four are in flight per thread; slots past the row are
// loaded as 0 but never passed to f. f runs in element order within a thread, so a running state works.
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

// Keep the row as packed bf16 (4 registers per vector) across a reduction. Left alone, the compiler keeps
// the 8 floats per vector that it unpacked before the reduction alive through it instead: twice the
// registers, fewer resident threads. This empty asm "may change" v, so the floats cannot be reused and are
// unpacked again afterwards (a shift or a mask each: cheap).
template <int VPT>
__device__ __forceinline__ void keep_packed(uint4 (&v)[VPT])
{
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        asm volatile("" : "+r"(v[k].x), "+r"(v[k].y), "+r"(v[k].z), "+r"(v[k].w));
    }
}

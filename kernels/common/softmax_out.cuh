// The write pass of the streaming softmax kernels: y = exp(x - m) * inv over a row, re-reading x.
// Introduced in chapter 04 (05_softmax_three_pass, 06_softmax_online).
#pragma once
#include <cuda_bf16.h>
#include "common/fast_exp.cuh"    // fast_exp2, LOG2E
#include "common/bf16_pack.cuh"   // unpack8, pack2

// yr[i] = exp(xr[i] - m) * inv for the elements of the row [0, N) that this thread owns (c, c + T, ...,
// T = blockDim.x): 16-byte vectors when N % 8 == 0 (the row then starts 16-byte aligned, and the loop is
// unrolled 4 times), else single elements. m: the row max, inv: 1 / the row's sum of exp(x - m).
__device__ __forceinline__ void softmax_write_row(const __nv_bfloat16* __restrict__ xr,
                                                  __nv_bfloat16* __restrict__ yr, int N, float m, float inv)
{
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

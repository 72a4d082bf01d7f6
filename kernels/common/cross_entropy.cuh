// The gradient pass of a cross-entropy over a row of bf16 logits (chapter 10): g = (softmax(x) - onehot(t))
// x scale, re-reading the row. In place is allowed (gr == xr): each element is read by the thread that then
// writes it, so neither pointer is __restrict__.
#pragma once
#include <cuda_bf16.h>
#include "common/fast_exp.cuh"     // fast_exp2, LOG2E
#include "common/bf16_pack.cuh"    // unpack8, pack2

// g[i] = (exp(x[i] - lse) - [i == t]) * scale for the row's units i = first, first + stride, ... (16-byte
// vectors of 8 when N % 8 == 0, the row then 16-byte aligned; else single elements); t outside [0, N): no
// one-hot term. zero: write zeros without reading x (a row whose target is ignored).
__device__ __forceinline__ void ce_write_grad(const __nv_bfloat16* xr, __nv_bfloat16* gr, int N, float lse,
                                              int t, float scale, bool zero, int first, int stride)
{
    if ((N & 7) == 0) {
        const int nvec = N >> 3;
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        uint4* gv = reinterpret_cast<uint4*>(gr);
        if (zero) {
            for (int i = first; i < nvec; i += stride) gv[i] = make_uint4(0u, 0u, 0u, 0u);
            return;
        }
        // Four vectors loaded before any is written: with x and g allowed to alias, the compiler may not
        // move a later load above an earlier store, so a plain loop waits one L2 round trip per vector.
        for (int c = first; c < nvec; c += 4 * stride) {
            uint4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (c + k * stride < nvec) v[k] = xv[c + k * stride];
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * stride;
                if (i >= nvec) break;
                float f[8];
                unpack8(v[k], f);
                const int j0 = 8 * i;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    f[j] = (fast_exp2((f[j] - lse) * LOG2E) - (j0 + j == t ? 1.f : 0.f)) * scale;
                }
                gv[i] = make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
            }
        }
    } else {
        for (int i = first; i < N; i += stride) {
            const float p = zero ? 0.f : fast_exp2((__bfloat162float(xr[i]) - lse) * LOG2E);
            gr[i] = __float2bfloat16_rn(zero ? 0.f : (p - (i == t ? 1.f : 0.f)) * scale);
        }
    }
}

// The row's loss from its lse and target logit: 0 for an ignored row, NaN for a target outside [0, N)
// (the wrappers refuse those before launching).
__device__ __forceinline__ float ce_row_loss(float lse, float x_t, bool ignored, bool valid)
{
    return ignored ? 0.f : (valid ? lse - x_t : __int_as_float(0x7fffffff));
}

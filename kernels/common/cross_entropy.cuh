// The gradient pass of a cross-entropy over a row of bf16 logits (chapter 10): g = (softmax(x) - onehot(t))
// x scale, re-reading the row. In place is allowed (gr == xr): each element is read by the thread that then
// writes it, so neither pointer is __restrict__.
#pragma once
#include <cuda_bf16.h>
#include "common/fast_exp.cuh"     // fast_exp2, LOG2E
#include "common/bf16_pack.cuh"    // unpack8, pack2
#include "common/online_softmax.cuh" // online_row_state, online_update

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

// L2 hints for the two reads of a row and the gradient's writes (HINTS 1): the first read asks the L2 to
// keep the row (evict_last), the second marks it last use and the gradient streams through (evict_first):
// the L2 then holds the rows waiting for their second read rather than gradient lines no one reads again.
#ifndef HINTS
#define HINTS 0
#endif
__device__ __forceinline__ uint4 ce_load_keep(const uint4* p)
{
#if HINTS
    uint4 v;
    asm("{\n\t.reg .b64 pol;\n\tcreatepolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
        "ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#else
    return *p;
#endif
}
__device__ __forceinline__ uint4 ce_load_last(const uint4* p)
{
#if HINTS
    return __ldcs(p);
#else
    return *p;
#endif
}
__device__ __forceinline__ void ce_store_stream(uint4* p, uint4 v)
{
#if HINTS
    __stcs(p, v);
#else
    *p = v;
#endif
}

// The same two passes with the next K vectors' loads issued before the current K are worked on, for a grid
// of one block per SM: every warp is then in the same phase, and without the prefetch the SFU's exp2 and
// the memory system take turns instead of overlapping. Rows whose length is not a multiple of 8 take the
// plain versions above.
template <int K>
__device__ __forceinline__ void ce_row_state_prefetch(const __nv_bfloat16* __restrict__ xr, int N, float& m,
                                                      float& d)
{
    if ((N & 7) != 0) {
        online_row_state(xr, N, m, d);
        return;
    }
    const int T = blockDim.x, nvec = N >> 3;
    const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(xr);
    const uint4 neg_inf8 = make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u);  // exp(-inf) = 0
    m = NEG_INF;
    d = 0.f;
    uint4 v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int i = threadIdx.x + k * T;
        v[k] = i < nvec ? ce_load_keep(xv + i) : neg_inf8;
    }
    for (int c = threadIdx.x; c < nvec; c += K * T) {
        uint4 w[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int i = c + (K + k) * T;
            w[k] = i < nvec ? ce_load_keep(xv + i) : neg_inf8;
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
            float f[8];
            unpack8(v[k], f);
            online_update<8>(m, d, f);
            v[k] = w[k];
        }
    }
}

template <int K>
__device__ __forceinline__ void ce_write_grad_prefetch(const __nv_bfloat16* xr, __nv_bfloat16* gr, int N,
                                                       float lse, int t, float scale, bool zero, int first,
                                                       int stride)
{
    if ((N & 7) != 0 || zero) {
        ce_write_grad(xr, gr, N, lse, t, scale, zero, first, stride);
        return;
    }
    const int nvec = N >> 3;
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    uint4* gv = reinterpret_cast<uint4*>(gr);
    uint4 v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        if (first + k * stride < nvec) v[k] = ce_load_last(xv + first + k * stride);
    }
    for (int c = first; c < nvec; c += K * stride) {
        uint4 w[K];                      // loads of later elements than the stores below: safe in place
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (c + (K + k) * stride < nvec) w[k] = ce_load_last(xv + c + (K + k) * stride);
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int i = c + k * stride;
            if (i < nvec) {
                float f[8];
                unpack8(v[k], f);
                const int j0 = 8 * i;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    f[j] = (fast_exp2((f[j] - lse) * LOG2E) - (j0 + j == t ? 1.f : 0.f)) * scale;
                }
                ce_store_stream(gv + i, make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]),
                                                   pack2(f[6], f[7])));
            }
            v[k] = w[k];
        }
    }
}

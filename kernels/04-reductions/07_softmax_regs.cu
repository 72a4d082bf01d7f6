// Chapter 04, version 7: softmax with the row in registers: one read, one write.
//
// Idea: as in 02_rmsnorm_regs.cu, the row is split among tpr threads (a power of two, 32..1024), each
// holding VECS_PER_THREAD 16-byte vectors loaded up front (consecutive threads, consecutive 16 bytes).
// With the whole row on chip, the max costs no extra memory pass, so the plain max-then-sum order is
// used: reduce the max (shuffles + one shared-memory exchange), compute e = exp(x - m) = 2^((x - m) log2 e)
// (one ex2.approx each, accurate far beyond what bf16 shows), reduce the sum, write e / s. An online
// (m, d) merge would save one barrier but costs two extra exps per merge step; with the row in
// registers the barrier is the cheaper one. Numerics are torch's: a fully -inf row gives NaN
// (x - m = -inf - -inf), a NaN anywhere gives a NaN row (fmaxf skips NaN, the sum does not), -inf
// entries give 0, and magnitudes up to the bf16 maximum are safe (x - m <= 0).
// Two builds of the same code:
//  - softmax_regs (rows up to 8 * VECS_PER_THREAD * 256 = 8192; blocks of 256 threads holding
//    256/tpr rows): keeps the exponentials as fp32 in registers between the sum and the write, one exp
//    per element;
//  - softmax_regs_long (rows up to 8 * LONG_VECS_PER_THREAD * 512 = 32768, one 512-thread block per
//    64 KB row): 64 bf16 per thread. Their fp32 exps would need 64 registers on their own, so it keeps
//    only the packed bf16 row (32 registers) and computes each exp twice (for the sum, then for the
//    write): 2 MUFU ops per element, still under half the SFU rate at the copy bandwidth. Capped at
//    64 registers, so two rows (two 512-thread blocks) are in flight per SM. (A 1024-thread row with 32
//    elements per thread would need <= 32 registers for two rows per SM: it spills.)
// Other N (not a multiple of 8, or longer) are sent to softmax_online by the wrapper.
//
// Prediction (65536 x 4096 bf16, tpr = 128, 2 rows per block): 1.07 GB must move, ~0.26 ms at
// ~4.1 TB/s. Same memory shape as rmsnorm_regs (one 16-byte load per 8 elements, all in flight before
// any use) plus ~6 operations and one exp per element: exps need ~3.9 elements/cycle/SM x 1 = ~4 of the
// SM's 16 ex2/cycle at full bandwidth. Expect >= 95% of copy, ~3x torch.softmax (taken as ~1.3 TB/s
// at this shape), level with a Triton one-program-per-row kernel. At 16384 x 32768 (softmax_regs_long):
// only 2 rows x 64 KB in flight per SM, each row's loads idle while it reduces, and twice the exps:
// expect >= 85% of copy.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "softmax"):
//   regs at 16384x32768: 0.5150 ms, 4170 GB/s, 98.3% of copy, 1.79x torch.softmax
//   regs at 65536x4096: 0.2564 ms, 4187 GB/s, 99.1% of copy, 3.26x torch.softmax
#include <cuda_bf16.h>
#include "common/fast_exp.cuh"     // fast_exp2, LOG2E, NEG_INF
#include "common/reductions.cuh"   // row_max, row_sum
#include "common/bf16_pack.cuh"    // unpack8, pack2
#include "common/row_io.cuh"       // keep_packed
#include "common/row_regs.cuh"     // RowThread, row_thread, load_row

#ifndef VECS_PER_THREAD
#define VECS_PER_THREAD 4          // softmax_regs: 32 elements per thread, their exps kept as fp32
#endif
#ifndef LONG_VECS_PER_THREAD
#define LONG_VECS_PER_THREAD 8     // softmax_regs_long: 64 elements per thread, kept as packed bf16
#endif

template <int VPT, bool KEEP_EXP>
__device__ __forceinline__ void softmax_regs_body(const __nv_bfloat16* __restrict__ x,
                                                  __nv_bfloat16* __restrict__ y, int M, int N, int tpr_log2)
{
    __shared__ float red_max[32], red_sum[32];       // one array per reduction: no barrier between them
    const RowThread r = row_thread(M, N, tpr_log2);
    const uint4 neg_inf8 = make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u);  // 8 x bf16 -inf

    // all loads first; slots past the row hold -inf, which the max ignores and exp turns into 0
    uint4 v[VPT];
    load_row(x, r, v, neg_inf8);

    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        float f[8];
        unpack8(v[k], f);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            m = fmaxf(m, f[j]);
        }
    }
    m = row_max(m, red_max, tpr_log2);

    float e[KEEP_EXP ? VPT : 1][8];
    float s = 0.f;
    if (!KEEP_EXP) {
        keep_packed(v);   // keep the row packed across the reduction: 4 registers per vector
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        float f[8];
        unpack8(v[k], f);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float ej = fast_exp2((f[j] - m) * LOG2E);
            s += ej;
            if (KEEP_EXP) {
                e[KEEP_EXP ? k : 0][j] = ej;
            }
        }
    }
    const float inv = 1.f / row_sum(s, red_sum, tpr_log2);
    if (!KEEP_EXP) {
        keep_packed(v);
    }

    uint4* __restrict__ yr = reinterpret_cast<uint4*>(y + r.base);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = r.vec(k);
        if (r.owns(k)) {
            float p[8];
            if (KEEP_EXP) {
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    p[j] = e[KEEP_EXP ? k : 0][j] * inv;
                }
            } else {
                float f[8];
                unpack8(v[k], f);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    p[j] = fast_exp2((f[j] - m) * LOG2E) * inv;
                }
            }
            uint4 o;
            o.x = pack2(p[0], p[1]);
            o.y = pack2(p[2], p[3]);
            o.z = pack2(p[4], p[5]);
            o.w = pack2(p[6], p[7]);
            yr[i] = o;
        }
    }
}

// N % 8 == 0, N <= 8 * VECS_PER_THREAD * tpr, tpr = 2^tpr_log2 in [32, 256], blockDim a multiple of tpr,
// at most 256.
extern "C" __global__ void __launch_bounds__(256)
softmax_regs(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int M, int N, int tpr_log2)
{
    softmax_regs_body<VECS_PER_THREAD, true>(x, y, M, N, tpr_log2);
}

// N % 8 == 0, N <= 8 * LONG_VECS_PER_THREAD * tpr, tpr = 2^tpr_log2 in [32, 512], blockDim a multiple of
// tpr, at most 512. At most 64 registers: two 512-thread blocks (two 64 KB rows) per SM.
extern "C" __global__ void __launch_bounds__(512, 2)
softmax_regs_long(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int M, int N, int tpr_log2)
{
    softmax_regs_body<LONG_VECS_PER_THREAD, false>(x, y, M, N, tpr_log2);
}

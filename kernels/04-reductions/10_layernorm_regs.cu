// Chapter 04, version 10: LayerNorm with the row in registers and two passes over the registers.
//
//   mean = sum_i x[r, i] / N,  var = sum_i (x[r, i] - mean)^2 / N,
//   y[r, i] = (x[r, i] - mean) * rsqrt(var + eps) * w[i] + b[i]      (bf16 in and out, fp32 inside)
//
// Idea: `twopass`'s arithmetic on `rmsnorm_regs`'s layout. A row is split among tpr threads (a power of two
// from 32 to 512); each thread issues all its VECS_PER_THREAD 16-byte loads first and keeps the raw
// vectors in registers. Pass 1 sums the thread's values and the row's sum is reduced (warp shuffles and
// one exchange through shared memory) to the mean; pass 2 reads the same registers again and sums
// (x - mean)^2, reduced the same way to the variance; the normalise step reads them a third time and
// writes y. Subtracting the mean before squaring is what keeps the variance accurate when |mean| >> std
// (as in `twopass` and Welford), and no pass goes back to memory: x is read from DRAM exactly once, as in
// Welford, but with `twopass`'s cheap updates (an add; a subtract and a fused multiply-add) instead of
// Welford's dependent chain per element and its merges of (n, mean, M2) triples. Two barriers per row
// instead of Welford's one (each reduction has its own shared array, so none is needed between them):
// the layout and the two reductions of `softmax_regs`. Short rows share a block (rows_per_block =
// blockDim / tpr). With 4 vectors per thread (Welford holds 2) a row of 4096 takes 128 threads, as in
// `rmsnorm_regs`; the row (16 registers), the mean and rstd and the w and b vectors of the normalise step
// do not fit in 32 registers (ptxas spills), so the kernel is capped at 40 (__launch_bounds__(512, 3)):
// 1,536 threads, 12 rows of 4096, per SM. Rows longer than 8 * VECS_PER_THREAD * 512 = 16384, or N not a
// multiple of 8, go to `layernorm_welford_chunked` (04_layernorm_welford.cu).
//
// Prediction (65536 x 4096 bf16, tpr = 128, 4 vectors per thread, 2 rows per 256-thread block):
// bytes = 2*2*M*N + 2*2*N = 1.07 GB, ~0.26 ms at ~4.1 TB/s: the load shape of `rmsnorm_regs`, 64 bytes of
// loads in flight per thread, 96 KiB per SM at 1,536 threads (about eight times the 12.4 KiB that Little's
// law asks for). Per element about 11 instructions in the three loops (pass 1: an unpack and an add; pass
// 2: an unpack, a subtract, an FMA; the normalise step: three unpacks, two FMAs, half a pack); with the
// set-up and the two reductions the SASS holds about 620 instructions for a thread's 32 elements (~19
// each; counted to the last EXIT, past which lies the division's slow path), against about 390 (~12) for
// `rmsnorm_regs` and about 470 (~15) for `softmax_regs`. At the copy bandwidth an SM finishes ~3.9
// elements per cycle: ~75 of its 128 issue slots per cycle, busy but with room for the loads.
// Shuffles: two row reductions of 40 warp-wide shuffles each, 80 per row against Welford's 144 (chapter
// 04's count), some 80 of the ~900 clocks an SM has per row at the floor. The second barrier is covered by
// the other 11 rows resident on the SM. So within a point or two of `rmsnorm_regs`: 97% of copy or
// better, ahead of both `twopass` and Welford, with their accuracy.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "layernorm"):
//   regs at 65536x4096: 0.2576 ms, 4168 GB/s, 99.3% of copy, 1.54x torch.nn.functional.layer_norm
#include <cuda_bf16.h>
#include "common/reductions.cuh"   // row_sum
#include "common/bf16_pack.cuh"    // unpack8, pack2
#include "common/row_io.cuh"       // keep_packed
#include "common/row_regs.cuh"     // RowThread, row_thread, load_row

#ifndef VECS_PER_THREAD
#define VECS_PER_THREAD 4      // 16-byte vectors per thread: 32 bf16 of the row live in 16 registers
#endif

template <int VPT>
__device__ __forceinline__ void layernorm_regs_body(const __nv_bfloat16* __restrict__ x,
                                                    const __nv_bfloat16* __restrict__ w,
                                                    const __nv_bfloat16* __restrict__ b,
                                                    __nv_bfloat16* __restrict__ y,
                                                    int M, int N, float eps, int tpr_log2)
{
    __shared__ float red_mean[32], red_var[32];      // one array per reduction: no barrier between them
    const RowThread r = row_thread(M, N, tpr_log2);

    // all loads first; vectors the thread does not own are zeros, which add nothing to the sum
    uint4 v[VPT];
    load_row(x, r, v, make_uint4(0u, 0u, 0u, 0u));

    // pass 1 over the registers: the mean
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        float f[8];
        unpack8(v[k], f);
        s += ((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]));
    }
    const float mean = row_sum(s, red_mean, tpr_log2) / (float)N;
    keep_packed(v);            // keep the row packed across the reduction (see 02_rmsnorm_regs.cu)

    // pass 2 over the registers: the variance around the mean (owned vectors only: an absent one is not 0 - mean)
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        if (r.owns(k)) {
            float f[8];
            unpack8(v[k], f);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float d = f[j] - mean;
                q = fmaf(d, d, q);
            }
        }
    }
    const float rstd = rsqrtf(row_sum(q, red_var, tpr_log2) / (float)N + eps);
    const float shift = -mean * rstd;                // (x - mean) * rstd = fma(x, rstd, shift): one instruction
    keep_packed(v);

    // normalise from the registers; w and b (8 KB each for N = 4096) are shared by all rows: L1/L2 hits
    const uint4* __restrict__ wv = reinterpret_cast<const uint4*>(w);
    const uint4* __restrict__ bv = reinterpret_cast<const uint4*>(b);
    uint4* __restrict__ yr = reinterpret_cast<uint4*>(y + r.base);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = r.vec(k);
        if (r.owns(k)) {
            float f[8], g[8], h[8];
            unpack8(v[k], f);
            unpack8(wv[i], g);
            unpack8(bv[i], h);
            uint4 o;
            o.x = pack2(fmaf(fmaf(f[0], rstd, shift), g[0], h[0]), fmaf(fmaf(f[1], rstd, shift), g[1], h[1]));
            o.y = pack2(fmaf(fmaf(f[2], rstd, shift), g[2], h[2]), fmaf(fmaf(f[3], rstd, shift), g[3], h[3]));
            o.z = pack2(fmaf(fmaf(f[4], rstd, shift), g[4], h[4]), fmaf(fmaf(f[5], rstd, shift), g[5], h[5]));
            o.w = pack2(fmaf(fmaf(f[6], rstd, shift), g[6], h[6]), fmaf(fmaf(f[7], rstd, shift), g[7], h[7]));
            yr[i] = o;
        }
    }
}

// N % 8 == 0 and N <= 8 * VECS_PER_THREAD * tpr, tpr = 2^tpr_log2 in [32, 512], blockDim a multiple of
// tpr (rows_per_block = blockDim / tpr) and at most 512. __launch_bounds__(512, 3): at most 40 registers
// per thread, so that 1,536 threads (six 256-thread blocks) fit on an SM.
extern "C" __global__ void __launch_bounds__(512, 3)
layernorm_regs(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
               const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y,
               int M, int N, float eps, int tpr_log2)
{
    layernorm_regs_body<VECS_PER_THREAD>(x, w, b, y, M, N, eps, tpr_log2);
}

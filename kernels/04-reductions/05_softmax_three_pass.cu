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
// The row is read three times; the second and third reads hit L1/L2 (8.25 MiB of rows in flight vs a
// 60 MiB L2), so DRAM traffic stays ~1x, but each row goes through three load phases and two barriers.
// Expect ~70-85% of the copy bandwidth: already well ahead of torch.softmax (taken as ~1.3 TB/s at this
// shape), behind the one-read `softmax_regs`.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "softmax"):
//   three_pass at 65536x4096: 0.2856 ms, 3760 GB/s, 89.0% of copy, 2.93x torch.softmax
#include <cuda_bf16.h>
#include "common/fast_exp.cuh"     // fast_exp2, LOG2E, NEG_INF
#include "common/reductions.cuh"   // block_max, block_sum
#include "common/row_io.cuh"       // for_each_element
#include "common/softmax_out.cuh"  // softmax_write_row

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
    softmax_write_row(xr, yr, N, m, inv);
}

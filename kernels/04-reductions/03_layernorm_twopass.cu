// Chapter 04, version 3: LayerNorm in two reductions, mean first, then the variance around it.
//
//   mean = sum_i x[r, i] / N,  var = sum_i (x[r, i] - mean)^2 / N,
//   y[r, i] = (x[r, i] - mean) * rsqrt(var + eps) * w[i] + b[i]      (bf16 in and out, fp32 inside)
//
// Idea: the textbook algorithm, one block per row, written for any N. Pass 1 reads the row and reduces
// sum(x) -> mean. Pass 2 reads the row AGAIN and reduces sum((x - mean)^2) -> var: subtracting the mean
// before squaring is what makes it accurate (var = E[x^2] - mean^2 in fp32 loses every digit when
// |mean| >> std). Pass 3 reads the row a third time and writes y. Each reduction: warp shuffles, one
// shared-memory exchange of per-warp partials. Loads are 16-byte vectors when N % 8 == 0 (single elements
// otherwise), four in flight per thread.
//
// Prediction (65536 x 4096 bf16): bytes that must move = 2*2*M*N + 2*2*N = 1.07 GB, ~0.26 ms at
// ~4.1 TB/s. This kernel reads each row three times. The second and third reads are of a row the block
// touched microseconds ago: at N = 4096 a block has 128 threads and 38 registers, so ~12 blocks (12 rows,
// 96 KB) are resident per SM, which fits in the SM's L1 (up to 256 KB shared with shared memory), and
// all rows in flight (~13 MB) fit in the 60 MB L2. So DRAM traffic stays ~1x; what costs is the extra
// L1 traffic and instructions (~10 per element over the three passes) and three load phases and two
// barriers per row, during which its DRAM loads are not in flight. Expect ~80-95% of the copy
// bandwidth, depending on how many re-reads hit L1 rather than L2. Whether `layernorm_welford` (one
// read, rows in registers) beats it depends on whether Welford's extra arithmetic costs less than two
// L1 re-reads.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "layernorm"):
//   twopass at 65536x4096: 0.2606 ms, 4121 GB/s, 98.2% of copy, 1.52x torch.nn.functional.layer_norm
#include <cuda_bf16.h>
#include "common/reductions.cuh"   // block_sum
#include "common/bf16_pack.cuh"    // unpack8, pack2
#include "common/row_io.cuh"       // for_each_element

// grid = M blocks, blockDim a power of two from 32 to 512
extern "C" __global__ void __launch_bounds__(512)
layernorm_twopass(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                  const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y,
                  int M, int N, float eps)
{
    __shared__ float red_mean[32], red_var[32];      // one array per reduction: no barrier between them
    const long long base = (long long)blockIdx.x * N;  // 64-bit: M*N may exceed 2^31
    const __nv_bfloat16* __restrict__ xr = x + base;
    __nv_bfloat16* __restrict__ yr = y + base;

    // pass 1: the mean
    float s = 0.f;
    for_each_element(xr, N, [&](float v) { s += v; });
    const float mean = block_sum(s, red_mean) / (float)N;

    // pass 2: the variance around it (re-reading the row)
    float q = 0.f;
    for_each_element(xr, N, [&](float v) { const float d = v - mean; q = fmaf(d, d, q); });
    const float rstd = rsqrtf(block_sum(q, red_var) / (float)N + eps);

    // pass 3: normalise (re-reading the row once more)
    const int T = blockDim.x;
    if ((N & 7) == 0) {
        const int nvec = N >> 3;
        const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(xr);
        const uint4* __restrict__ wv = reinterpret_cast<const uint4*>(w);
        const uint4* __restrict__ bv = reinterpret_cast<const uint4*>(b);
        uint4* __restrict__ yv = reinterpret_cast<uint4*>(yr);
#pragma unroll 4
        for (int i = threadIdx.x; i < nvec; i += T) {
            float f[8], g[8], h[8];
            unpack8(xv[i], f);
            unpack8(wv[i], g);
            unpack8(bv[i], h);
            uint4 o;
            o.x = pack2(fmaf((f[0] - mean) * rstd, g[0], h[0]), fmaf((f[1] - mean) * rstd, g[1], h[1]));
            o.y = pack2(fmaf((f[2] - mean) * rstd, g[2], h[2]), fmaf((f[3] - mean) * rstd, g[3], h[3]));
            o.z = pack2(fmaf((f[4] - mean) * rstd, g[4], h[4]), fmaf((f[5] - mean) * rstd, g[5], h[5]));
            o.w = pack2(fmaf((f[6] - mean) * rstd, g[6], h[6]), fmaf((f[7] - mean) * rstd, g[7], h[7]));
            yv[i] = o;
        }
    } else {
        for (int i = threadIdx.x; i < N; i += T) {
            const float v = __bfloat162float(xr[i]);
            yr[i] = __float2bfloat16_rn(fmaf((v - mean) * rstd, __bfloat162float(w[i]), __bfloat162float(b[i])));
        }
    }
}

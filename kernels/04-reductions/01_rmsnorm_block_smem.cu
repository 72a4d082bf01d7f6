// Chapter 04, version 1: RMSNorm, one block per row, the textbook shared-memory tree reduction.
//
//   y[r, i] = x[r, i] * rsqrt(mean_i(x[r, i]^2) + eps) * w[i]        (bf16 in and out, fp32 inside)
//
// Idea: a block of 256 threads owns one row. Pass 1: each thread walks the row with stride 256,
// one bf16 (2 bytes) at a time, summing x^2 in fp32; the 256 partial sums go to shared memory and are
// added pairwise in a tree (128, 64, ..., 1 active threads, a __syncthreads() between levels).
// Pass 2: every thread reads its elements of the row from global memory again and writes x*rstd*w.
// Works for any N (no alignment or register-capacity requirement).
//
// Prediction (65536 x 4096 bf16): bytes that must move = 2*2*M*N + 2*N = 1.07 GB (x read, y written,
// w once), a floor of about 0.26 ms at ~4.1 TB/s. This kernel moves more and hides less:
//  - scalar 2-byte loads: a warp instruction fetches 64 bytes, an eighth of what 16-byte vectors fetch,
//    so each SM needs 8x more load instructions for the same bytes, and one load in flight per thread is
//    2048 threads x 2 B = 4 KiB of loads per SM, a third of the 12.4 KiB that Little's law asks for
//    (chapter 01's table of bytes in flight, 1 : 1 traffic); if the compiler unrolls the strided loop to
//    ~4 loads per thread (~16 KiB) the need is met, and the other two costs carry the estimate;
//  - the second read of the row mostly hits L1/L2 (rows in flight: 132 SMs x 8 blocks x 8 KiB = 8.25 MiB
//    of a 60 MiB L2), so DRAM traffic stays near 1x, but the row goes through the load path twice;
//  - 9 __syncthreads() for the tree, in which most threads idle.
// Expect clearly under the copy bandwidth: roughly 65-85% of it.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "rmsnorm"):
//   block_smem at 65536x4096: 0.3055 ms, 3515 GB/s, 82.8% of copy, 0.98x torch.nn.functional.rms_norm
#include <cuda_bf16.h>

#define BLOCK 256   // threads per block: a power of two (the tree halves it each level)

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_block_smem(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                   __nv_bfloat16* __restrict__ y, int M, int N, float eps)
{
    __shared__ float partial[BLOCK];
    const int tid = threadIdx.x;
    const long long row = blockIdx.x;                      // grid = M blocks
    const __nv_bfloat16* xr = x + row * N;                 // 64-bit: M*N may exceed 2^31
    __nv_bfloat16* yr = y + row * N;

    // pass 1: each thread's share of sum(x^2)
    float ss = 0.f;
    for (int i = tid; i < N; i += BLOCK) {
        const float v = __bfloat162float(xr[i]);
        ss = fmaf(v, v, ss);
    }
    partial[tid] = ss;
    __syncthreads();

    // the tree: at each level the lower half adds the upper half
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) {
            partial[tid] += partial[tid + s];
        }
        __syncthreads();
    }
    const float rstd = rsqrtf(partial[0] / (float)N + eps);

    // pass 2: read the row again, normalise, scale
    for (int i = tid; i < N; i += BLOCK) {
        const float v = __bfloat162float(xr[i]);
        yr[i] = __float2bfloat16_rn(v * rstd * __bfloat162float(w[i]));
    }
}

// Chapter 02, version 2: y = x + b in bf16, `ept` elements per thread (the launch-configuration sweep).
//
// Idea: give each thread more independent work instead of more threads. Thread t of a grid of G threads
// handles elements t, t + G, t + 2G, ... (EPT of them), so each warp instruction still reads 64
// contiguous bytes (coalesced). All loads are issued before the first add. EPT is a compile-time constant
// (the wrapper compiles one variant per value with -DEPT=...), so the loops unroll to exactly EPT slots,
// the registers are indexed by constants only (no local memory), and EPT = 1 is version 1's code.
// The grid is ceil(n / (threads x EPT)) blocks, so G x EPT >= n and every element is handled exactly once.
//
// Prediction: bytes = 6n, FLOPs = n, as for version 1. Loads in flight per thread grow EPT-fold (4 B x EPT):
// 8 KiB per SM at EPT = 1 (version 1), 16 KiB at 2, 32 KiB at 4, 64 KiB at 8, against the 16.6 KiB needed
// (chapter 01's table of bytes in flight, 2 : 1 traffic), so the bandwidth should rise from about half of
// copy at EPT = 1 towards the copy ceiling at EPT = 4-8 (issue and sector-request rates of 2-byte loads
// keep it a little under the 128-bit kernels of chapter 03). Block size: 32 threads per block caps an SM
// at 32 blocks = 1024 threads (half the bytes in flight: slowest); 64 to 1024 all fill the 2048 thread
// slots, a plateau within a few percent.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "add_bf16_launch"):
//   t0032_ept1 at 67108864: 1.2667 ms, 318 GB/s, 7.6% of copy
//   t0256_ept1 at 67108864: 0.1927 ms, 2089 GB/s, 49.8% of copy
//   t0256_ept2 at 67108864: 0.1270 ms, 3169 GB/s, 75.6% of copy
//   t0256_ept4 at 67108864: 0.1145 ms, 3515 GB/s, 83.8% of copy
//   t0256_ept8 at 67108864: 0.1174 ms, 3430 GB/s, 81.8% of copy
//   t1024_ept4 at 67108864: 0.1240 ms, 3246 GB/s, 77.4% of copy
#include <cuda_bf16.h>

#ifndef EPT
#define EPT 1
#endif

extern "C" __global__ void add_bf16_ept(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                        __nv_bfloat16* __restrict__ y, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;             // G, the threads in the grid
    const long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float xs[EPT], bs[EPT];
#pragma unroll
    for (int k = 0; k < EPT; ++k) {              // every load first: 2 x EPT loads in flight
        const long long i = i0 + k * stride;
        if (i < n) {
            xs[k] = __bfloat162float(x[i]);
            bs[k] = __bfloat162float(b[i]);
        }
    }
#pragma unroll
    for (int k = 0; k < EPT; ++k) {              // then the adds and stores
        const long long i = i0 + k * stride;
        if (i < n) {
            y[i] = __float2bfloat16_rn(xs[k] + bs[k]);
        }
    }
}

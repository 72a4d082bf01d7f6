// Chapter 02, version 2: y = x + b in bf16, `ept` elements per thread (the launch-configuration sweep).
//
// Idea: give each thread more independent work instead of more threads. Thread t of a grid of G threads
// handles elements t, t + G, t + 2G, ... (ept of them), so each warp instruction still reads 64
// contiguous bytes (coalesced). All loads are issued before the first add: the loop is unrolled to the
// largest ept (8) at compile time, and the slots above the run-time `ept` are switched off by a predicate,
// so the registers are indexed by constants only (no local memory) and no template is needed.
// The grid is ceil(n / (threads x ept)) blocks, so G x ept >= n and every element is handled exactly once.
//
// Prediction: bytes = 6n, FLOPs = n, as for version 1. Bytes in flight per thread grow ept-fold (4 B x ept):
// 8 KB per SM at ept = 1 (version 1), 16 KB at 2, 32 KB at 4, 64 KB at 8, against ~25 KB needed, so the
// bandwidth should rise from about half of copy at ept = 1 towards the copy ceiling at ept = 4-8 (issue and
// sector-request rates of 2-byte loads keep it a little under the 128-bit kernels of chapter 03). Block
// size: 32 threads per block caps an SM at 32 blocks = 1024 threads (half the bytes in flight: slowest);
// 64 to 1024 all fill the 2048 thread slots, a plateau within a few percent.
// Result (H200, the lab's sweep over block size and ept): see the chapter 02 lab.
#include <cuda_bf16.h>

#define EPT_MAX 8

extern "C" __global__ void add_bf16_ept(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                        __nv_bfloat16* __restrict__ y, long long n, int ept)
{
    const long long stride = (long long)gridDim.x * blockDim.x;             // G, the threads in the grid
    const long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float xs[EPT_MAX], bs[EPT_MAX];
#pragma unroll
    for (int k = 0; k < EPT_MAX; ++k) {          // every load first: up to 2 x ept loads in flight
        const long long i = i0 + k * stride;
        if (k < ept && i < n) {
            xs[k] = __bfloat162float(x[i]);
            bs[k] = __bfloat162float(b[i]);
        }
    }
#pragma unroll
    for (int k = 0; k < EPT_MAX; ++k) {          // then the adds and stores
        const long long i = i0 + k * stride;
        if (k < ept && i < n) {
            y[i] = __float2bfloat16_rn(xs[k] + bs[k]);
        }
    }
}

// Chapter 03, version 2: y = x + b in bf16 with 128-bit vectors, one vector per thread (`vec128`).
//
// Idea: thread t loads 8 bf16 of x and 8 of b with one 16-byte load each (a uint4: LDG.E.128), adds the
// eight pairs in fp32, rounds them back to bf16 two at a time and stores 16 bytes. The grid has one thread
// per whole vector, ceil((n / 8) / 256) blocks (at least one); the last n % 8 elements (the tail) are done
// one per thread by the first n % 8 threads of the grid. Vector accesses need x, b and y to start on
// 16-byte boundaries: the wrapper checks that and otherwise runs chapter 02's scalar kernel (a slice such as
// x[1:] starts 2 bytes off).
//
// Prediction: bytes = 6n, FLOPs = n, as before. Each warp load now moves 512 contiguous bytes (16 sectors:
// fully coalesced), and a thread has 2 x 16 = 32 B of loads in flight instead of 4: 2048 threads x 32 B =
// 64 KiB per SM, about four times the 16.6 KiB that Little's law asks for (chapter 01's table of bytes in
// flight, 2 : 1 traffic). Index arithmetic and instructions per byte fall 8x. So the kernel stops being
// latency-bound: above 90% of copy, a little under 2x the naive kernel. What is left is the
// per-block cost of 2^25 / 256 = 131,072 short-lived blocks (launch, index set-up, retire).
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "add_bf16"):
//   vec128 at 268435456: 0.3672 ms, 4386 GB/s, 102.8% of copy, 1.00x torch.add
#include <cuda_bf16.h>
#include "common/bf16_pack.cuh"   // add_bf16x2: two packed bf16 plus two more, in fp32, rounded back (RNE)

extern "C" __global__ void add_bf16_vec128(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                           __nv_bfloat16* __restrict__ y, long long n)
{
    const long long n_vec = n / 8;                                          // whole 16-byte vectors
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n_vec) {
        const uint4 xv = reinterpret_cast<const uint4*>(x)[t];              // 8 bf16 in one load
        const uint4 bv = reinterpret_cast<const uint4*>(b)[t];
        uint4 yv;
        yv.x = add_bf16x2(xv.x, bv.x);
        yv.y = add_bf16x2(xv.y, bv.y);
        yv.z = add_bf16x2(xv.z, bv.z);
        yv.w = add_bf16x2(xv.w, bv.w);
        reinterpret_cast<uint4*>(y)[t] = yv;
    }
    if (t < n - 8 * n_vec) {                                                // the tail: at most 7 elements
        const long long i = 8 * n_vec + t;
        y[i] = __float2bfloat16_rn(__bfloat162float(x[i]) + __bfloat162float(b[i]));
    }
}

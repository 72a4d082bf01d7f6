// Chapter 02, version 1: y = x + b in bf16, one element per thread (the "naive" kernel).
//
// Idea: the simplest correct elementwise kernel. Thread i (a 64-bit global index) loads x[i] and b[i],
// adds them in fp32 and stores the sum rounded to bf16 (round to nearest even). Threads past the end of
// the array do nothing (bounds check), so any n works with a grid of ceil(n / 256) blocks of 256 threads.
// The fp32 sum rounded once more to bf16 equals the correctly rounded bf16 sum (fp32's 24-bit significand
// is at least 2 x 8 + 2 bits, so the double rounding is harmless): the check demands bit equality.
//
// Prediction: bytes = 6n (2 read from x, 2 from b, 2 written to y), FLOPs = n. At n = 2^28 that is 1.61 GB,
// a floor of 0.39 ms at the 4.1 TB/s that a copy reaches on an H200. Each warp load moves 64 contiguous
// bytes (2 sectors: coalesced), but each thread has only its two 2-byte loads in flight: 2048 resident
// threads x 4 B = 8 KiB of loads per SM, about half the 16.6 KiB per SM that Little's law asks for (chapter
// 01's table of bytes in flight, 2 : 1 traffic: 3.2 TB/s of reads x 700 ns / 132 SMs). So about a third to
// a half of the copy bandwidth, ~0.7-0.9 ms, whatever the block size.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "add_bf16"):
//   naive at 268435456: 0.7588 ms, 2123 GB/s, 49.5% of copy, 0.48x torch.add
#include <cuda_bf16.h>

extern "C" __global__ void add_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                    __nv_bfloat16* __restrict__ y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;   // widen before multiplying
    if (i < n) {
        y[i] = __float2bfloat16_rn(__bfloat162float(x[i]) + __bfloat162float(b[i]));
    }
}

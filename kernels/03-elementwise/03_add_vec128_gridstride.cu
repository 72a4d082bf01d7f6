// Chapter 03, version 3: y = x + b in bf16, 128-bit vectors in an unrolled grid-stride loop
// (`vec128_gridstride`), with 64- and 32-bit variants for the lab's vector-width control.
//
// Idea: launch only as many threads as the GPU holds at once (SMs x blocks_per_sm x 256, default 8 blocks
// per SM) and let each thread loop over the array of W-element vectors: thread t of a grid of G threads
// takes vectors t, t + G, t + 2G, ..., so every pass is still coalesced. The loop body is unrolled 4-fold:
// it issues the loads of 4 vectors of x and 4 of b (8 independent loads) before the first add, then does
// the 4 adds and 4 stores; a plain loop finishes the last passes, and the first n % W threads do the tail
// (at most W - 1 elements) one element each. One body, three widths: W = 8 bf16 per access (uint4, 16 B),
// W = 4 (uint2, 8 B) and W = 2 (one 32-bit word), each its own extern "C" kernel. The wrapper checks that
// x, b and y are aligned to 2W bytes (else it runs chapter 02's scalar kernel).
// __launch_bounds__(256, 8) asks ptxas for at most 32 registers per thread, so that 8 blocks of 256 threads
// fit on an SM and the default grid is a single wave (without it the 16-byte variant took 36 registers,
// which leaves room for only 6 blocks per SM); ptxas reports 32 registers and no spills for each width.
//
// Prediction: bytes = 6n, FLOPs = n. Per thread, one unrolled iteration holds 8 x 16 B = 128 B of loads in
// flight at W = 8 (64 B at W = 4, 32 B at W = 2); 8 blocks x 256 threads hold 256 KiB per SM, fifteen
// times the 16.6 KiB that Little's law asks for (chapter 01's table of bytes in flight, 2 : 1 traffic), so
// latency stays covered even at 1-2 blocks per SM. Setup is paid once per thread (about 124 vectors each
// at n = 2^28) instead of once per vector. Expect a few percent over
// `vec128`: 97-100% of copy, about 1x torch. Narrower vectors need 2x / 4x the load instructions per byte:
// W = 4 should still reach the ceiling, W = 2 may fall short of it at low blocks per SM.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "add_bf16"):
//   vec128_gridstride at 268435456: 0.3832 ms, 4203 GB/s, 98.5% of copy, 0.96x torch.add
// (The lab sweeps the vector width and blocks per SM.)
#include <cuda_bf16.h>
#include "common/vector_io.cuh"   // Vec<W>: the type that moves W bf16 per access (W = 2, 4, 8)
#include "common/bf16_pack.cuh"   // add_bf16x2

#define UNROLL 4
#define THREADS 256     // the wrapper launches blocks of at most this many threads

__device__ __forceinline__ unsigned int add_vec(unsigned int a, unsigned int b) { return add_bf16x2(a, b); }
__device__ __forceinline__ uint2 add_vec(uint2 a, uint2 b)
{
    return make_uint2(add_bf16x2(a.x, b.x), add_bf16x2(a.y, b.y));
}
__device__ __forceinline__ uint4 add_vec(uint4 a, uint4 b)
{
    return make_uint4(add_bf16x2(a.x, b.x), add_bf16x2(a.y, b.y), add_bf16x2(a.z, b.z), add_bf16x2(a.w, b.w));
}

template <int W>
__device__ __forceinline__ void add_gridstride(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                               __nv_bfloat16* __restrict__ y, long long n)
{
    typedef typename Vec<W>::T V;
    const V* __restrict__ xv = reinterpret_cast<const V*>(x);
    const V* __restrict__ bv = reinterpret_cast<const V*>(b);
    V* __restrict__ yv = reinterpret_cast<V*>(y);
    const long long n_vec = n / W;                                          // whole vectors
    const long long stride = (long long)gridDim.x * blockDim.x;             // G
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;

    long long i = t;
    for (; i + (UNROLL - 1) * stride < n_vec; i += UNROLL * stride) {       // UNROLL passes per iteration
        V xa[UNROLL], ba[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {                                  // 2 x UNROLL loads in flight
            xa[u] = xv[i + u * stride];
            ba[u] = bv[i + u * stride];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            yv[i + u * stride] = add_vec(xa[u], ba[u]);
        }
    }
    for (; i < n_vec; i += stride) {                                        // the last (< UNROLL) passes
        yv[i] = add_vec(xv[i], bv[i]);
    }
    if (t < n - W * n_vec) {                                                // the tail: at most W - 1 elements
        const long long k = W * n_vec + t;
        y[k] = __float2bfloat16_rn(__bfloat162float(x[k]) + __bfloat162float(b[k]));
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 8) add_bf16_vec128_gridstride(const __nv_bfloat16* __restrict__ x,
                                                      const __nv_bfloat16* __restrict__ b,
                                                      __nv_bfloat16* __restrict__ y, long long n)
{
    add_gridstride<8>(x, b, y, n);
}

extern "C" __global__ void __launch_bounds__(THREADS, 8) add_bf16_vec64_gridstride(const __nv_bfloat16* __restrict__ x,
                                                     const __nv_bfloat16* __restrict__ b,
                                                     __nv_bfloat16* __restrict__ y, long long n)
{
    add_gridstride<4>(x, b, y, n);
}

extern "C" __global__ void __launch_bounds__(THREADS, 8) add_bf16_vec32_gridstride(const __nv_bfloat16* __restrict__ x,
                                                     const __nv_bfloat16* __restrict__ b,
                                                     __nv_bfloat16* __restrict__ y, long long n)
{
    add_gridstride<2>(x, b, y, n);
}

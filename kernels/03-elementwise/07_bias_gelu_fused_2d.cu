// Chapter 03, version 7: y = gelu_tanh(x + b[col]) in one pass on a 2-D grid (`fused_2d`), x and y [M, N]
// row-major bf16, b [N] bf16, fp32 inside: version 5's operation and math, with what its profile points to
// taken out.
//
// Idea: version 5 is a grid-stride loop, and its recorded profile puts it with the unfused chain's bias-add pass
// (the same loop with an add for OP) rather than with the add ladder's `vec128`: about the same DRAM
// throughput as that pass, below `vec128`'s, with GELU's instructions on top. So keep its bytes and change
// two things. (1) The launch of `vec128`, which the add ladder recorded at the copy ceiling: short-lived
// blocks that each do a fixed piece of work and leave, swept through memory in launch order, instead of a
// grid of long-lived threads whose unrolled loads lie a grid apart. The grid is 2-D: blockIdx.x *
// blockDim.x + threadIdx.x is a column vector (8 bf16; a warp covers 512 contiguous bytes of a row) and
// blockIdx.y a group of ROWS_PER_THREAD rows. A thread loads its 8 biases once, then issues the loads of
// its rows' vectors before the first GELU, computes and stores them: no column arithmetic at all (version
// 5 tracks the column with a 64-bit step per vector), and one bias load per ROWS_PER_THREAD vectors of x.
// Grids taller than 65535 row groups loop (gridDim.y is capped; at 16384 x 8192 there is no loop).
// (2) Fewer instructions per element for the same GELU, u / (1 + exp(-2z)): exp2f and __fdividef carry
// range fix-ups (scalings for results near the denormal range, a test for denominators above 2^126)
// that this form does not need, so the exponential and the reciprocal are the bare PTX instructions
// ex2.approx.ftz.f32 and rcp.approx.ftz.f32 (one MUFU each; about 2 ulp and 1 ulp of fp32, far finer than
// the bf16 output shows). Large |u| stays safe: exp(-2z) overflows to inf for u below about -10,
// rcp(inf) = 0 and u * 0 = -0; for u above about 5 it flushes to 0 and the result is u; NaN stays NaN.
// tanh.approx.f32 would save the reciprocal, but its error of about 2^-11 is absolute near tanh = -1, and
// 0.5 u (1 + tanh z) would lose its digits for negative u (at u = -3, where 1 + tanh z is about 0.0024, the
// error is about a fifth of gelu(u)), far outside the chapter's tolerance. When N % 8 != 0 or a pointer is
// not 16-byte aligned the wrapper runs `bias_gelu_fused_2d_scalar`: the same grid and body over single
// elements.
//
// Prediction: bytes = 4MN + 2N = 0.537 GB at 16384 x 8192, as for version 5 (the bias is read once per
// ROWS_PER_THREAD rows, from L1/L2). Per element about 11 instructions in the SASS (unpacking x and the
// bias, the bias add, 3 fp32 operations for the exponent's argument, 1 + e, the product u * r, half a pack,
// 2 MUFU) and about 13 with the addressing and the row loop, against about 16 for version 5's loop
// (labkit.measure.compile.sass shows both); 2 MUFU per element still use about half of what the SFUs
// sustain at HBM speed.
// Loads in flight: ROWS_PER_THREAD = 2 vectors of x (32 B) per thread, with at most 32 registers 2048
// threads per SM: 64 KiB per SM, five times the 12.4 KiB that Little's law asks for (1 : 1 traffic). So
// the traffic and launch shape of `vec128` with a short computation in between: 97-100% of copy, a few
// percent ahead of version 5.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "bias_gelu"):
//   fused_2d at 16384x8192: 0.1279 ms, 4199 GB/s, 98.2% of copy, 3.65x torch.nn.functional.gelu(x + b, approximate="tanh")
#include <cuda_bf16.h>
#include "common/vector_io.cuh"   // Vec<W> (W = 1, 8), unpack / pack: W bf16 <-> W floats
#include "common/fast_exp.cuh"    // fast_exp2: ex2.approx.ftz.f32

#define THREADS 256     // the wrapper launches blocks of at most this many threads
#ifndef ROWS_PER_THREAD
#define ROWS_PER_THREAD 2
#endif

__device__ __forceinline__ float fast_rcp(float d)   // 1 / d in one MUFU.RCP; rcp(inf) = 0
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
}

// gelu(u) = u / (1 + exp(-2z)) with exp(-2z) = 2^(u (k0 + k1 u^2)), as kernels/common/gelu.cuh
__device__ __forceinline__ float gelu_fast(float u)
{
    const float k0 = -2.0f * 0.7978845608028654f * 1.4426950408889634f;   // -2 sqrt(2/pi) log2(e)
    const float k1 = k0 * 0.044715f;
    const float e = fast_exp2(u * fmaf(k1, u * u, k0));                     // exp(-2z); inf for u < ~ -10
    return u * fast_rcp(1.0f + e);
}

// One thread: column vector `c` (W bf16) of rows r0, r0 + 1, ..., r0 + ROWS_PER_THREAD - 1 (those below M).
template <int W>
__device__ __forceinline__ void bias_gelu_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                               __nv_bfloat16* __restrict__ y, long long M, long long N)
{
    typedef typename Vec<W>::T V;
    const long long row_vec = N / W;                                        // vectors per row
    const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;   // this thread's column vector
    if (c >= row_vec) {
        return;                                                             // no barrier below: safe
    }
    const V* __restrict__ xv = reinterpret_cast<const V*>(x) + c;
    V* __restrict__ yv = reinterpret_cast<V*>(y) + c;
    float bf[W];
    unpack(reinterpret_cast<const V*>(b)[c], bf);                           // the biases, once

    for (long long r0 = (long long)blockIdx.y * ROWS_PER_THREAD; r0 < M;
         r0 += (long long)gridDim.y * ROWS_PER_THREAD) {
        V xa[ROWS_PER_THREAD];
#pragma unroll
        for (int k = 0; k < ROWS_PER_THREAD; ++k) {                         // all loads first
            if (r0 + k < M) {
                xa[k] = xv[(r0 + k) * row_vec];
            }
        }
#pragma unroll
        for (int k = 0; k < ROWS_PER_THREAD; ++k) {
            if (r0 + k < M) {
                float f[W];
                unpack(xa[k], f);
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    f[j] = gelu_fast(f[j] + bf[j]);
                }
                V o;
                pack(f, o);
                yv[(r0 + k) * row_vec] = o;
            }
        }
    }
}

// N % 8 == 0, x, b and y 16-byte aligned; grid (ceil(N / 8 / blockDim.x), min(ceil(M / ROWS_PER_THREAD), 65535))
extern "C" __global__ void __launch_bounds__(THREADS) bias_gelu_fused_2d(const __nv_bfloat16* __restrict__ x,
                                                                         const __nv_bfloat16* __restrict__ b,
                                                                         __nv_bfloat16* __restrict__ y,
                                                                         long long M, long long N)
{
    bias_gelu_rows<8>(x, b, y, M, N);
}

// any N and alignment; grid (ceil(N / blockDim.x), min(ceil(M / ROWS_PER_THREAD), 65535))
extern "C" __global__ void __launch_bounds__(THREADS) bias_gelu_fused_2d_scalar(const __nv_bfloat16* __restrict__ x,
                                                                                const __nv_bfloat16* __restrict__ b,
                                                                                __nv_bfloat16* __restrict__ y,
                                                                                long long M, long long N)
{
    bias_gelu_rows<1>(x, b, y, M, N);
}

// Chapter 04, version 2: RMSNorm with the row held in registers: one read, one write, one barrier.
//
//   y[r, i] = x[r, i] * rsqrt(mean_i(x[r, i]^2) + eps) * w[i]        (bf16 in and out, fp32 inside)
//
// Idea: a row is split among tpr threads (threads per row, a power of two from 32 to 1024). Thread t of
// the row owns the 16-byte vectors t, t + tpr, t + 2*tpr, ... (8 bf16 each; consecutive threads read
// consecutive 16 bytes, so every warp load is 512 contiguous bytes). It issues all VECS_PER_THREAD
// loads before it uses any of them, keeps the raw vectors in registers, squares and sums them in fp32,
// and the row's sum is reduced with warp shuffles (__shfl_xor_sync, 5 steps) and ONE exchange of
// per-warp partials through shared memory. The normalise step reuses the registers: x is read from DRAM
// exactly once. Short rows share a block (rows_per_block = blockDim / tpr), so blocks stay >= 256
// threads. The kernel is capped at 32 registers, so an SM holds its full 2048 threads (16 rows of 4096
// in flight per SM with tpr = 128). Rows the registers cannot hold (N > 8 * VECS_PER_THREAD *
// 1024 = 32768), or N not a multiple of 8, go to `rmsnorm_regs_chunked`: it loops over the row in
// 16-byte chunks (single elements when N % 8 != 0) and reads it twice (the second read mostly hits L2).
//
// Prediction (65536 x 4096 bf16, tpr = 128, 4 vectors per thread, 2 rows per 256-thread block):
// bytes = 2*2*M*N + 2*N = 1.07 GB, floor ~0.26 ms at ~4.1 TB/s. Each thread has 64 bytes of loads in
// flight; at 2048 resident threads per SM that is up to 128 KiB per SM, ten times the 12.4 KiB that
// Little's law asks for (chapter 01's table of bytes in flight, 1 : 1 traffic), even though a row's loads
// stop while it reduces and stores. Arithmetic: ~4 FLOPs per element, far below the fp32 rate. So: within
// a few percent of the copy bandwidth (>= 95%), like a plain Triton kernel of the same shape, and ahead
// of F.rms_norm.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "rmsnorm"):
//   regs at 65536x4096: 0.2553 ms, 4205 GB/s, 99.1% of copy, 1.17x torch.nn.functional.rms_norm
#include <cuda_bf16.h>
#include "common/reductions.cuh"   // row_sum
#include "common/bf16_pack.cuh"    // unpack8, pack2
#include "common/row_io.cuh"       // keep_packed
#include "common/row_regs.cuh"     // RowThread, row_thread, load_row

#ifndef VECS_PER_THREAD
#define VECS_PER_THREAD 4      // 16-byte vectors per thread: 32 bf16 of the row live in 16 registers
#endif

template <int VPT>
__device__ __forceinline__ void rmsnorm_regs_body(const __nv_bfloat16* __restrict__ x,
                                                  const __nv_bfloat16* __restrict__ w,
                                                  __nv_bfloat16* __restrict__ y,
                                                  int M, int N, float eps, int tpr_log2)
{
    __shared__ float red[32];
    const RowThread r = row_thread(M, N, tpr_log2);                   // this thread's row and place in it

    // all loads first: VPT independent 16-byte loads in flight per thread
    uint4 v[VPT];
    load_row(x, r, v, make_uint4(0u, 0u, 0u, 0u));

    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        float f[8];
        unpack8(v[k], f);
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s = fmaf(f[j], f[j], s);
        }
        ss += s;
    }
    ss = row_sum(ss, red, tpr_log2);
    const float rstd = rsqrtf(ss / (float)N + eps);
    // Keep the row as packed bf16 (4 registers per vector) across the reduction: without this empty asm
    // the compiler keeps the 8 floats per vector it unpacked above alive instead, twice the registers
    // (fewer resident threads). The asm "may change" v, so the floats are unpacked again below (cheap).
    keep_packed(v);

    // normalise from the registers; w (8 KB for N = 4096) is shared by all rows and stays in L1/L2
    const uint4* __restrict__ wv = reinterpret_cast<const uint4*>(w);
    uint4* __restrict__ yr = reinterpret_cast<uint4*>(y + r.base);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = r.vec(k);
        if (r.owns(k)) {
            float f[8], g[8];
            unpack8(v[k], f);
            unpack8(wv[i], g);
            uint4 o;
            o.x = pack2(f[0] * rstd * g[0], f[1] * rstd * g[1]);
            o.y = pack2(f[2] * rstd * g[2], f[3] * rstd * g[3]);
            o.z = pack2(f[4] * rstd * g[4], f[5] * rstd * g[5]);
            o.w = pack2(f[6] * rstd * g[6], f[7] * rstd * g[7]);
            yr[i] = o;
        }
    }
}

// N % 8 == 0 and N <= 8 * VECS_PER_THREAD * tpr, tpr = 2^tpr_log2 in [32, 1024], blockDim a multiple of
// tpr (rows_per_block = blockDim / tpr). At most 32 registers per thread (__launch_bounds__(1024, 2)):
// two 1024-thread blocks, or eight 256-thread blocks, fill an SM's 2048 thread slots.
extern "C" __global__ void __launch_bounds__(1024, 2)
rmsnorm_regs(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
             __nv_bfloat16* __restrict__ y, int M, int N, float eps, int tpr_log2)
{
    rmsnorm_regs_body<VECS_PER_THREAD>(x, w, y, M, N, eps, tpr_log2);
}

// Any N: one block (a power of two, 32 to 512 threads) per row, two passes over the row in chunks, four loads
// in flight per thread per chunk; 16-byte vectors when N % 8 == 0, single elements otherwise.
extern "C" __global__ void __launch_bounds__(512)
rmsnorm_regs_chunked(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     __nv_bfloat16* __restrict__ y, int M, int N, float eps)
{
    __shared__ float red[32];
    const int T = blockDim.x;
    const long long base = (long long)blockIdx.x * N;
    const __nv_bfloat16* __restrict__ xr = x + base;
    __nv_bfloat16* __restrict__ yr = y + base;
    const bool vec = (N & 7) == 0;
    const int nvec = N >> 3;
    const uint4* __restrict__ xv = reinterpret_cast<const uint4*>(xr);
    const uint4* __restrict__ wv = reinterpret_cast<const uint4*>(w);
    uint4* __restrict__ yv = reinterpret_cast<uint4*>(yr);

    float ss = 0.f;
    if (vec) {
        for (int c = threadIdx.x; c < nvec; c += 4 * T) {
            uint4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                v[k] = i < nvec ? xv[i] : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float f[8];
                unpack8(v[k], f);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    ss = fmaf(f[j], f[j], ss);
                }
            }
        }
    } else {
        for (int c = threadIdx.x; c < N; c += 4 * T) {
            float f[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                f[k] = i < N ? __bfloat162float(xr[i]) : 0.f;
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                ss = fmaf(f[k], f[k], ss);
            }
        }
    }
    ss = row_sum(ss, red, 31 - __clz(T));   // T: a power of two
    const float rstd = rsqrtf(ss / (float)N + eps);

    if (vec) {
        for (int c = threadIdx.x; c < nvec; c += 4 * T) {
            uint4 v[4], g[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                if (i < nvec) {
                    v[k] = xv[i];
                    g[k] = wv[i];
                }
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int i = c + k * T;
                if (i < nvec) {
                    float f[8], h[8];
                    unpack8(v[k], f);
                    unpack8(g[k], h);
                    uint4 o;
                    o.x = pack2(f[0] * rstd * h[0], f[1] * rstd * h[1]);
                    o.y = pack2(f[2] * rstd * h[2], f[3] * rstd * h[3]);
                    o.z = pack2(f[4] * rstd * h[4], f[5] * rstd * h[5]);
                    o.w = pack2(f[6] * rstd * h[6], f[7] * rstd * h[7]);
                    yv[i] = o;
                }
            }
        }
    } else {
        for (int i = threadIdx.x; i < N; i += T) {
            yr[i] = __float2bfloat16_rn(__bfloat162float(xr[i]) * rstd * __bfloat162float(w[i]));
        }
    }
}

// Chapter 06, version 3: cp.async copies global -> shared, first in one slot, then in two.
//
// Idea: 02_mma_ldmatrix.cu moves every tile through registers (ld.global into a register, wait for it,
// st.shared), and the whole block waits for each k-tile before computing it. cp.async.cg.shared.global
// [dst], [src], 16, src_size copies 16 bytes from global to shared memory without a register and
// without blocking the thread (.cg: cached in L2 only); src_size 0 turns it into a zero fill, which is
// how rows and k-chunks outside the matrix are handled. cp.async.commit_group closes a group of copies,
// cp.async.wait_group n waits until at most n of this thread's groups are still in flight; a barrier
// then makes every thread's copies visible to the block.
//  - STAGES=1: copy k-tile kt, wait_group 0, barrier, compute, barrier. Registers are freed but the
//    latency is still exposed once per k-tile.
//  - STAGES=2 (default): two slots. While k-tile kt is computed from one slot, k-tile kt+1 is copied
//    into the other: issue kt+1, commit, wait_group 1 (all but the newest group done: kt has landed),
//    barrier, compute kt, barrier (every warp is done with the slot before it is refilled).
// Tiles, warps and padding as in 02 (128x128x32, 8 warps of 64x32, rows padded by 16 bytes).
// Shapes: any M and N, K a multiple of 8; gemm_cp_async needs N % 8 == 0, gemm_cp_async_anyn takes any
// N (its B tile is loaded synchronously, element by element, into the same slots).
// contract: K % 8 == 0, pointers 16-byte aligned
// Launch: grid (ceil(N/BN), ceil(M/BM)), block 256 threads, dynamic shared memory STAGES x 18,944 bytes.
//
// Prediction: STAGES=1 ~ 02 (+-10%, ~220 TFLOP/s): the same exposed latency per k-tile. STAGES=2: a
// k-tile's copies (~700 cycles) now overlap the previous k-tile's compute, 435 cycles per block at the
// roof, ~870 with the 2 blocks per SM (122 registers, 37.9 KB) sharing the tensor pipe, so the latency
// hides; what is left is two barriers per k-tile and the fragment loads of each k16-step waiting on
// ldmatrix. Expect ~48% of the mma.sync roof, ~300 TFLOP/s (range 250-360), ~38% of cuBLAS, at both
// sizes.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   cp_async_1stage at 4096x4096x4096: 0.6500 ms, 211.5 TFLOP/s, 33.5% of mma, 0.28x cuBLAS bf16
//   cp_async_1stage at 8192x8192x8192: 5.0979 ms, 215.7 TFLOP/s, 34.2% of mma, 0.27x cuBLAS bf16
//   cp_async at 4096x4096x4096: 0.4502 ms, 305.3 TFLOP/s, 48.4% of mma, 0.40x cuBLAS bf16
//   cp_async at 8192x8192x8192: 3.9406 ms, 279.0 TFLOP/s, 44.3% of mma, 0.39x cuBLAS bf16
#include <cuda_bf16.h>

#ifndef ANYN_ENTRY
#define ANYN_ENTRY 1                     // 0: build only the N % 8 == 0 entry point (faster compile)
#endif
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 32
#endif
#ifndef STAGES
#define STAGES 2                         // 1 or 2
#endif
#ifndef SWIZZLE
#define SWIZZLE 0                        // padded rows here; 04_swizzle.cu compares the XOR swizzle
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2                     // blocks per SM the register budget is sized for
#endif

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define NTHREADS (WARPS_M * WARPS_N * 32)
#define MI (WM / 16)                     // m16 tiles per warp
#define NI (WN / 8)                      // n8 tiles per warp
#define KSTEPS (BK / 16)                 // k16 steps per k-tile
#define A_CHUNKS (BK / 8)                // 16-byte chunks per row of the A tile
#define B_CHUNKS (BN / 8)                // 16-byte chunks per row of the B tile
#if SWIZZLE
#define A_LD BK                          // row length in elements
#define B_LD BN
#else
#define A_LD (BK + 8)                    // padded by 16 bytes: 8 consecutive rows, 8 bank groups
#define B_LD (BN + 8)
#endif
#define A_STAGE_BYTES (BM * A_LD * 2)
#define B_STAGE_BYTES (BK * B_LD * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define SMEM_BYTES (STAGES * STAGE_BYTES)
#define A_LOADS (BM * A_CHUNKS / NTHREADS) // cp.asyncs per thread per k-tile
#define B_LOADS (BK * B_CHUNKS / NTHREADS)
#define A_ROW_STEP (NTHREADS / A_CHUNKS)
#define B_ROW_STEP (NTHREADS / B_CHUNKS)

static_assert(BM % WM == 0 && BN % WN == 0, "block tile must be a whole number of warp tiles");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: multiples of 16 (ldmatrix.x4 loads 16x16)");
static_assert(BK % 16 == 0, "BK: a multiple of 16");
static_assert(STAGES == 1 || STAGES == 2, "STAGES: 1 or 2");
static_assert(NTHREADS % A_CHUNKS == 0 && NTHREADS % B_CHUNKS == 0, "loader mapping");
static_assert((BM * A_CHUNKS) % NTHREADS == 0 && (BK * B_CHUNKS) % NTHREADS == 0, "loader mapping");
static_assert(SWIZZLE == 0 || A_CHUNKS == 4 || A_CHUNKS >= 8, "swizzle: A rows of 64 or >= 128 bytes");
static_assert(B_CHUNKS >= 8, "B tile rows of at least 128 bytes");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

typedef __nv_bfloat16 bf16;

#include "common/smem_addr.cuh"        // smem_u32
#include "common/cp_async.cuh"         // cp_async16, cp_async_commit, cp_async_wait
#include "common/mma_sm80.cuh"         // ldmatrix_x4, ldmatrix_x4_trans, mma_bf16
#include "common/mma_epilogue.cuh"     // store_acc_direct
#include "common/smem_swizzle.cuh"     // swz (by SWIZZLE, defined above)
#include "common/gemm_tile_load.cuh"   // load_tile (sized by the tile macros above)

template <bool VEC_N>
__device__ __forceinline__ void gemm_body(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                          bf16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const unsigned s_base = smem_u32(smem);
    const int ktiles = (K + BK - 1) / BK;

    // ldmatrix addresses within a slot (02_mma_ldmatrix.cu explains the lane -> fragment map).
    const int a_row = warp_m * WM + (lane & 15);
    const int b_row = lane & 15;
    unsigned a_off[KSTEPS], b_off[NI / 2];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        a_off[kk] = a_row * (A_LD * 2) + swz(a_row, kk * 2 + (lane >> 4), A_CHUNKS) * 16;
    }
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
        const int c = warp_n * (WN / 8) + nj * 2 + (lane >> 4);
        b_off[nj] = A_STAGE_BYTES + b_row * (B_LD * 2) + swz(b_row, c, B_CHUNKS) * 16;
    }

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    // STAGES 1: copy k-tile kt, wait for it, compute it; nothing overlaps within the block.
    // STAGES 2: k-tile kt+1 is copied into the other slot while k-tile kt is computed. Two barriers per
    // k-tile: one before reading the slot (its copies landed for every thread), one after (every warp
    // is done with it before it is refilled).
#if STAGES == 2
    load_tile<VEC_N>(A, B, M, N, K, m0, n0, 0, s_base, s_base + A_STAGE_BYTES, smem + A_STAGE_BYTES, tid, 0,
                     A_LOADS + B_LOADS);
    cp_async_commit();
#endif
    for (int kt = 0; kt < ktiles; ++kt) {
#if STAGES == 2
        if (kt + 1 < ktiles) {
            const int ws = ((kt + 1) & 1) * STAGE_BYTES;
            load_tile<VEC_N>(A, B, M, N, K, m0, n0, (kt + 1) * BK, s_base + ws, s_base + ws + A_STAGE_BYTES,
                             smem + ws + A_STAGE_BYTES, tid, 0, A_LOADS + B_LOADS);
        }
        cp_async_commit();
        cp_async_wait<1>();              // all but the newest group done: k-tile kt has landed
        const unsigned rs = s_base + (kt & 1) * STAGE_BYTES;
#else
        load_tile<VEC_N>(A, B, M, N, K, m0, n0, kt * BK, s_base, s_base + A_STAGE_BYTES, smem + A_STAGE_BYTES,
                         tid, 0, A_LOADS + B_LOADS);
        cp_async_commit();
        cp_async_wait<0>();
        const unsigned rs = s_base;
#endif
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            unsigned af[MI][4], bfr[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                ldmatrix_x4(af[mi], rs + a_off[kk] + mi * 16 * (A_LD * 2));
            }
#pragma unroll
            for (int nj = 0; nj < NI / 2; ++nj) {
                ldmatrix_x4_trans(bfr[2 * nj][0], bfr[2 * nj][1], bfr[2 * nj + 1][0], bfr[2 * nj + 1][1],
                                  rs + b_off[nj] + kk * 16 * (B_LD * 2));
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < NI; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
        }
        __syncthreads();
    }
    cp_async_wait<0>();

    // Epilogue: straight from registers (common/mma_epilogue.cuh).
    store_acc_direct<VEC_N>(C, M, N, m0 + warp_m * WM, n0 + warp_n * WN, acc, lane);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_cp_async(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_body<true>(A, B, C, M, N, K);
}

#if ANYN_ENTRY
extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_cp_async_anyn(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N,
                     int K)
{
    gemm_body<false>(A, B, C, M, N, K);
}
#endif

// The launch configuration of this build, for the host: out[0..10] = BM, BN, threads per block, dynamic
// shared memory bytes, 1 if the grid is 1D, BK, WM, WN, stages, swizzled (1) or padded (0) tiles, GROUP_M.
// Grid: (ceil(N / BN), ceil(M / BM)) blocks.
extern "C" __global__ void launch_config(int* out)
{
    out[0] = BM;
    out[1] = BN;
    out[2] = NTHREADS;
    out[3] = SMEM_BYTES;
    out[4] = 0;
    out[5] = BK;
    out[6] = WM;
    out[7] = WN;
    out[8] = STAGES;
    out[9] = SWIZZLE;
    out[10] = 1;
}

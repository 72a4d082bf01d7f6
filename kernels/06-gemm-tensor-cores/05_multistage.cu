// Chapter 06, version 5: a ring of STAGES cp.async slots (2-4), one barrier per k-tile.
//
// Idea: 04_swizzle.cu keeps one k-tile in flight and pays two barriers per k-tile. Here the shared
// memory holds a ring of STAGES slots with STAGES-1 k-tiles in flight. Per k-tile: wait_group
// STAGES-2 (this thread's copies of k-tile kt have landed), one barrier (every thread's have, and every
// warp has finished k-tile kt-1), then issue k-tile kt+STAGES-1 into the slot kt-1 used, commit (an
// empty group past the end of K, which keeps the counting uniform), and compute kt. The barrier that
// publishes kt is also the one that frees kt-1's slot, so the trailing barrier of 03/04 is gone, and a
// copy has STAGES-1 k-tiles of compute to land instead of one. Tiles as before: 128x128x32, 8 warps of
// 64x32, swizzled (SWIZZLE=0: padded rows).
// Shapes: any M and N, K a multiple of 8; gemm_multistage needs N % 8 == 0, gemm_multistage_anyn takes any
// N.
// contract: K % 8 == 0, pointers 16-byte aligned
// Launch: grid (ceil(N/BN), ceil(M/BM)), block 256 threads, dynamic shared memory STAGES x 16,384 bytes
// (49,152 at the default STAGES=3: above 48 KB, so the kernel's max dynamic shared size attribute must be
// raised before the launch).
//
// Prediction: 126 registers and 32-64 KB keep 2 blocks (16 warps) per SM at STAGES 2-4. STAGES=2: the
// same overlap as 04 minus one barrier, +5%: ~315 TFLOP/s. STAGES=3/4: two or three k-tiles in
// flight hide L2 latency spikes too: ~350/360 TFLOP/s (56-57% of the mma.sync roof, 45% of cuBLAS).
// The next limit is this warp tile: a 64x32 tile reads (64 + 32) x 32 B by ldmatrix per 16 mma's, with
// the cp.async stores 0.0625 shared-memory bytes per FLOP: at 360 TFLOP/s, 86 of the 128 B/clk an SM's
// shared memory delivers (at 1.98 GHz); tensor cores and shared memory can both only get near their
// peaks with larger warp tiles.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   multistage at 4096x4096x4096: 0.4140 ms, 331.9 TFLOP/s, 52.6% of mma, 0.44x cuBLAS bf16
//   multistage at 8192x8192x8192: 3.5497 ms, 309.7 TFLOP/s, 49.1% of mma, 0.42x cuBLAS bf16
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
#define STAGES 3
#endif
#ifndef SWIZZLE
#define SWIZZLE 1
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
static_assert(BK % 16 == 0 && BK >= 32, "BK: a multiple of 16, at least 32");
static_assert(STAGES >= 2 && STAGES <= 8, "STAGES: 2..8");
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

    // Prologue: k-tiles 0 .. STAGES-2 in flight, one commit group each (empty past the end of K).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) {
            const unsigned st = s_base + s * STAGE_BYTES;
            load_tile<VEC_N>(A, B, M, N, K, m0, n0, s * BK, st, st + A_STAGE_BYTES,
                             smem + s * STAGE_BYTES + A_STAGE_BYTES, tid, 0, A_LOADS + B_LOADS);
        }
        cp_async_commit();
    }

    // Main loop: a ring of STAGES slots. Before computing k-tile kt: wait until at most STAGES-2 of
    // this thread's groups are pending (k-tile kt has landed), then a block barrier (it has landed for
    // every thread, and every warp has finished k-tile kt-1, whose slot is refilled next). Then issue
    // k-tile kt+STAGES-1 into that slot and compute kt: STAGES-1 k-tiles of copies stay in flight behind
    // the mma's. One barrier per k-tile.
    int read_stage = 0, write_stage = STAGES - 1;
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < ktiles) {
            const unsigned ws = s_base + write_stage * STAGE_BYTES;
            load_tile<VEC_N>(A, B, M, N, K, m0, n0, (kt + STAGES - 1) * BK, ws, ws + A_STAGE_BYTES,
                             smem + write_stage * STAGE_BYTES + A_STAGE_BYTES, tid, 0, A_LOADS + B_LOADS);
        }
        cp_async_commit();
        write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;

        const unsigned rs = s_base + read_stage * STAGE_BYTES;
        read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
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
    }
    cp_async_wait<0>();   // only empty groups can be left; drain them before the block exits

    // Epilogue: straight from registers (common/mma_epilogue.cuh).
    store_acc_direct<VEC_N>(C, M, N, m0 + warp_m * WM, n0 + warp_n * WN, acc, lane);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_multistage(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_body<true>(A, B, C, M, N, K);
}

#if ANYN_ENTRY
extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_multistage_anyn(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N,
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

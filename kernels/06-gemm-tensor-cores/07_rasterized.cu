// Chapter 06, version 7: grouped tile order for L2 reuse, and a coalesced epilogue: the best kernel.
//
// Idea: 06_warp_tiles.cu keeps the tensor cores fed from shared memory (128x256x32 block tiles, 64x64
// warp tiles, a 4-stage cp.async ring, XOR-swizzled tiles, ldmatrix.x4 for both operands, fragments
// reloaded in place). Two things it leaves on the table are outside the main loop:
//  1. Tile order. With a 2D grid, blocks start in row-major tile order: the 132 blocks resident at once
//     (one per SM) cover about 4 rows of tiles and every column of C, so each wave streams all of B
//     (8192 x 8192 bf16 = 128 MiB at 8192^3, twice the 60 MiB L2) from DRAM again. Here the grid is 1D
//     and block b is mapped to its tile through groups of GROUP_M tile rows: consecutive blocks walk
//     down a column of GROUP_M tiles, then step right. A wave then touches ~GROUP_M rows of A tiles and
//     ~132/GROUP_M columns of B tiles, a squarer footprint whose panels L2 can hold and share.
//  2. The epilogue. Each thread of an mma accumulator holds 2 adjacent columns of 2 rows: stored
//     directly, one warp instruction writes 8 rows x 16 bytes, half-filled 32-byte sectors. Here the
//     block stages its bf16 tile through shared memory (rows padded by 16 bytes: conflict-free 4-byte
//     writes) and writes C back in 16-byte vectors, whole 128-byte lines per 8 threads.
// The main loop is 06's. Everything is a macro, so the chapter's sweep compiles variants of this one file:
// BM, BN, BK (block tile), WM, WN (warp tile), STAGES (2-8), SWIZZLE (1: XOR-swizzled tiles, 0: rows
// padded by 16 bytes), GROUP_M (tile rows per group; 1 = plain row-major order), ANYN_ENTRY (0: build only
// the N % 8 == 0 entry point).
// Shapes: any M and N (rows of A and columns of B outside the matrix are zero-filled through cp.async's
// src-size operand, stores are predicated), K a multiple of 8 (a 16-byte row chunk is all in or all out
// of the matrix; a K tail inside the last k-tile is zero-filled the same way). gemm_rasterized needs
// N % 8 == 0 (16-byte rows of B and C); gemm_rasterized_anyn takes any N, loading B and storing C one
// element at a time (synchronously, so slower; for odd shapes only).
// contract: K % 8 == 0, pointers 16-byte aligned
// Launch: grid (ceil(M/BM) * ceil(N/BN)), block (BM/WM * BN/WN * 32) = 256 threads, dynamic shared
// memory max(STAGES * (BM*BK + BK*BN) * 2, BM * (BN + 8) * 2) bytes (98,304 at the defaults; above 48 KB,
// so the kernel's max dynamic shared size attribute must be raised first).
//
// Prediction (8192^3, defaults 128x256x32, 64x64 warp tiles, 4 stages, GROUP_M 8): 1.10e12 FLOPs;
// DRAM floor 403 MB (A, B, C once) = 0.10 ms at 4.1 TB/s, so compute-bound by 17x at the mma.sync
// roof (1.75 ms at 630 TFLOP/s). L2 -> SM: each block reads (128 + 256) x 8192 x 2 B = 6.3 MB, 2048
// tiles = 12.9 GB, 85 FLOP/B, ~5.8 TB/s at 490 TFLOP/s (22 B/clk/SM at 1.98 GHz). DRAM: row-major
// order re-reads B every wave, ~2.2 GB in all; grouped by 8: ~86 MB per wave, ~1.3 GB (by 16: ~1.1 GB);
// at ~1 TB/s both hide under compute, so the order is worth only 0-5% at 8192^3 and nothing at 4096^3
// (a whole wave's panels, 42 MB, already fit in L2). Shared memory per SM: 24 KB per stage, 96 KB ring,
// 66 KB epilogue tile reusing it; 0.043 B/FLOP of ldmatrix and cp.async traffic, 81 of the 128 B/clk
// at 490 TFLOP/s. Occupancy: 230 registers x 256 threads -> 1 block (8 warps, 2 per scheduler) per SM;
// 15.5 waves of 132 (97% wave efficiency). The coalesced epilogue saves ~1-2% (C is 0.13 GB of the
// 13 GB moved). Expect 440-500 TFLOP/s: 70-80% of the measured mma.sync roof, 55-65% of cuBLAS bf16
// (710-818 TFLOP/s); +0-5% over 06_warp_tiles.cu at 8192^3, level with it at 4096^3.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   rasterized at 4096x4096x4096: 0.3313 ms, 414.9 TFLOP/s, 65.8% of mma, 0.55x cuBLAS bf16
//   rasterized at 8192x8192x8192: 2.8550 ms, 385.1 TFLOP/s, 61.1% of mma, 0.54x cuBLAS bf16
//   tuned at 4096x4096x4096: 0.3286 ms, 418.2 TFLOP/s, 66.3% of mma, 0.55x cuBLAS bf16
//   tuned at 8192x8192x8192: 2.8699 ms, 383.1 TFLOP/s, 60.8% of mma, 0.54x cuBLAS bf16
#include <cuda_bf16.h>

#ifndef ANYN_ENTRY
#define ANYN_ENTRY 1                     // 0: build only the N % 8 == 0 entry point (faster compile)
#endif
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef SWIZZLE
#define SWIZZLE 1
#endif
#ifndef GROUP_M
#define GROUP_M 8
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
#define C_LD (BN + 8)                    // epilogue tile row, padded: conflict-free 4-byte writes
#define PIPE_BYTES (STAGES * STAGE_BYTES)
#define EPI_BYTES (BM * C_LD * 2)
#define SMEM_BYTES (PIPE_BYTES > EPI_BYTES ? PIPE_BYTES : EPI_BYTES)
#define A_LOADS (BM * A_CHUNKS / NTHREADS) // cp.asyncs per thread per k-tile
#define B_LOADS (BK * B_CHUNKS / NTHREADS)
#define A_ROW_STEP (NTHREADS / A_CHUNKS)
#define B_ROW_STEP (NTHREADS / B_CHUNKS)

static_assert(BM % WM == 0 && BN % WN == 0, "block tile must be a whole number of warp tiles");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: multiples of 16 (ldmatrix.x4 loads 16x16)");
static_assert(BK % 16 == 0 && BK >= 32, "BK: a multiple of 16, at least 32 (two k-steps per k-tile)");
static_assert(STAGES >= 2 && STAGES <= 8, "STAGES: 2..8");
static_assert(NTHREADS % A_CHUNKS == 0 && NTHREADS % B_CHUNKS == 0, "loader mapping");
static_assert((BM * A_CHUNKS) % NTHREADS == 0 && (BK * B_CHUNKS) % NTHREADS == 0, "loader mapping");
static_assert((BM * B_CHUNKS) % NTHREADS == 0, "epilogue mapping");
static_assert(SWIZZLE == 0 || A_CHUNKS == 4 || A_CHUNKS >= 8, "swizzle: A rows of 64 or >= 128 bytes");
static_assert(B_CHUNKS >= 8, "B tile rows of at least 128 bytes");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

typedef __nv_bfloat16 bf16;

#include "common/smem_addr.cuh"        // smem_u32
#include "common/cp_async.cuh"         // cp_async16, cp_async_commit, cp_async_wait
#include "common/mma_sm80.cuh"         // ldmatrix_x4, ldmatrix_x4_trans, mma_bf16
#include "common/smem_swizzle.cuh"     // swz (by SWIZZLE, defined above)
#include "common/gemm_tile_load.cuh"   // load_tile (sized by the tile macros above)

template <bool VEC_N>
__device__ __forceinline__ void gemm_body(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                          bf16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;

    // Grouped tile order: blocks b, b+1, ... go down a column of GROUP_M tiles, then step right.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    const int tile_m = first_m + (pid % per_group) % group_rows;
    const int tile_n = (pid % per_group) / group_rows;
    const int m0 = tile_m * BM, n0 = tile_n * BN;

    const unsigned s_base = smem_u32(smem);
    const int ktiles = (K + BK - 1) / BK;

    // ldmatrix addresses (bytes within a stage). A: lanes 0-15 give rows 0-15 at k-chunk 0, lanes 16-31
    // the same rows at k-chunk 1: the four 8x8 matrices are a0a1 / a2a3 / a4a5 / a6a7 of m16n8k16.
    // B (.trans): lanes 0-15 give k rows 0-15 at n-chunk 0, lanes 16-31 at n-chunk 1: b0b1, b2b3 of two
    // n8 tiles. The XOR depends on the row only through row % 8 (or row / 2 % 4) = lane bits.
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

    // Fragments of one k-step: A for MI m16 tiles, B for NI n8 tiles. They are reloaded in place for the
    // next k-step as soon as the current one has finished with them: A[mi] after row mi of mma's, B in
    // pairs during the last row. So the loads for step kk+1 overlap step kk's mma's without a second set
    // of 32 fragment registers (CUTLASS-style double buffering needs 64 here and spills at 255).
    unsigned af[MI][4], bfr[NI][2];
    auto load_a = [&](int mi, unsigned stage, int kk) {
        ldmatrix_x4(af[mi], stage + a_off[kk] + mi * 16 * (A_LD * 2));
    };
    auto load_b = [&](int nj, unsigned stage, int kk) {
        ldmatrix_x4_trans(bfr[2 * nj][0], bfr[2 * nj][1], bfr[2 * nj + 1][0], bfr[2 * nj + 1][1],
                          stage + b_off[nj] + kk * 16 * (B_LD * 2));
    };

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
    cp_async_wait<STAGES - 2>();
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) load_a(mi, s_base, 0);
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) load_b(nj, s_base, 0);

    // Main loop. k-tile kt is read from slot kt % STAGES; at its k-steps 0 .. KSTEPS-2 this thread
    // issues its share of the copies of k-tile kt+STAGES-1 into the slot read during kt-1 (every warp
    // finished reading that slot before the barrier of kt-1), committed as one group at step KSTEPS-2.
    // In the last k-step the fragments of the next k-tile's step 0 come from the next slot: after one
    // row of mma's (kept in flight) the warp waits until at most STAGES-2 groups are pending (the next
    // slot has landed for this thread) and at the block barrier (it has landed for every thread, and
    // every warp is done with the slot that kt+1 will overwrite). One barrier per k-tile.
    constexpr int LOADS = A_LOADS + B_LOADS;
    constexpr int PER_STEP = (LOADS + KSTEPS - 2) / (KSTEPS - 1);
    int read_stage = 0, write_stage = STAGES - 1;
    for (int kt = 0; kt < ktiles; ++kt) {
        const unsigned rs = s_base + read_stage * STAGE_BYTES;
        const unsigned ws = s_base + write_stage * STAGE_BYTES;
        unsigned char* ws_ptr = smem + write_stage * STAGE_BYTES + A_STAGE_BYTES;
        const bool do_load = kt + STAGES - 1 < ktiles;
        const int k_next = (kt + STAGES - 1) * BK;
        read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
        const unsigned rs_next = s_base + read_stage * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            const bool last = kk == KSTEPS - 1;
            const unsigned next = last ? rs_next : rs;    // where step kk+1's fragments come from
            const int kn = last ? 0 : kk + 1;
            if (!last) {
                if (do_load) {   // this step's share of the next k-tile's copies
                    const int lo = kk * PER_STEP < LOADS ? kk * PER_STEP : LOADS;
                    const int hi = (kk + 1) * PER_STEP < LOADS ? (kk + 1) * PER_STEP : LOADS;
                    load_tile<VEC_N>(A, B, M, N, K, m0, n0, k_next, ws, ws + A_STAGE_BYTES, ws_ptr, tid, lo, hi);
                }
                if (kk == KSTEPS - 2) {
                    cp_async_commit();
                    write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
                }
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                if (last && mi == 0 && MI == 1) {   // the only row also loads B: wait before it
                    cp_async_wait<STAGES - 2>();
                    __syncthreads();
                }
#pragma unroll
                for (int ni = 0; ni < NI; ++ni) {
                    mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
                    if (mi == MI - 1 && (ni & 1)) load_b(ni / 2, next, kn);
                }
                if (last && mi == 0 && MI > 1) {
                    cp_async_wait<STAGES - 2>();
                    __syncthreads();
                }
                load_a(mi, next, kn);
            }
        }
    }

    // Epilogue: drain the (empty) groups still open, then stage the bf16 tile in shared memory.
    cp_async_wait<0>();
    __syncthreads();
    bf16* sC = reinterpret_cast<bf16*>(smem);
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
            const int r = warp_m * WM + mi * 16 + g, c = warp_n * WN + ni * 8 + 2 * t;
            *reinterpret_cast<__nv_bfloat162*>(sC + r * C_LD + c) =
                __floats2bfloat162_rn(acc[mi][ni][0], acc[mi][ni][1]);
            *reinterpret_cast<__nv_bfloat162*>(sC + (r + 8) * C_LD + c) =
                __floats2bfloat162_rn(acc[mi][ni][2], acc[mi][ni][3]);
        }
    __syncthreads();
#pragma unroll
    for (int q = tid; q < BM * B_CHUNKS; q += NTHREADS) {
        const int r = q / B_CHUNKS, c = (q % B_CHUNKS) * 8;
        const int m = m0 + r, n = n0 + c;
        if (m >= M) continue;
        if (VEC_N) {
            if (n < N) {
                *reinterpret_cast<uint4*>(C + (size_t)m * N + n) = *reinterpret_cast<const uint4*>(sC + r * C_LD + c);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if (n + j < N) C[(size_t)m * N + n + j] = sC[r * C_LD + c + j];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
gemm_rasterized(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_body<true>(A, B, C, M, N, K);
}

#if ANYN_ENTRY
extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
gemm_rasterized_anyn(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N,
                     int K)
{
    gemm_body<false>(A, B, C, M, N, K);
}
#endif

// The launch configuration of this build, for the host: out[0..10] = BM, BN, threads per block, dynamic
// shared memory bytes, 1 if the grid is 1D, BK, WM, WN, stages, swizzled (1) or padded (0) tiles, GROUP_M.
// Grid: (ceil(M / BM) * ceil(N / BN)) blocks.
extern "C" __global__ void launch_config(int* out)
{
    out[0] = BM;
    out[1] = BN;
    out[2] = NTHREADS;
    out[3] = SMEM_BYTES;
    out[4] = 1;
    out[5] = BK;
    out[6] = WM;
    out[7] = WN;
    out[8] = STAGES;
    out[9] = SWIZZLE;
    out[10] = GROUP_M;
}

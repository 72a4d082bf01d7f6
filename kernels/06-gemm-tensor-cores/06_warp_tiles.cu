// Chapter 06, version 6: 128x256 block tiles, 64x64 warp tiles, fragments reloaded in place.
//
// Idea: 05_multistage.cu reads 96 shared-memory bytes per 16 mma's per warp (64x32 warp tile) and 16 KB
// of global memory per 1 MFLOP per block (128x128 block tile). Doubling both: a 128x256x32 block tile
// (8 warps, 2 x 4) with 64x64 warp tiles (4 m16 x 8 n8 tiles, 32 mma's per 4 + 4 ldmatrix.x4 per
// k16-step), a 4-stage ring (24 KB per slot, 96 KB). Per FLOP: ldmatrix bytes fall by 1/3 (1/32 B/FLOP
// instead of 3/64), L2 -> SM bytes by 1/4 (85 FLOP/B instead of 64). The price is registers: 128 fp32
// accumulators per thread, so one block (8 warps) per SM. Holding a second set of fragments (the usual
// double buffering, 64 registers) would spill at the 255-register cap, so the next k16-step's fragments
// are loaded into the same registers as soon as the current step is done with them: A[mi] right after
// row mi of mma's, B in pairs during the last row; the loads overlap the remaining mma's, and ptxas
// renames into free registers where it can (221-226 registers, no spills). The copies of the next k-tile are
// issued across the first KSTEPS-1 k-steps (between mma's, not in one burst), and the one barrier per
// k-tile sits after the first row of mma's of the last k-step, so the tensor pipe has independent work
// while warps wait. Macros: BM, BN, BK, WM, WN, STAGES (2-8), SWIZZLE.
// Shapes: any M and N, K a multiple of 8; gemm_warp_tiles needs N % 8 == 0, gemm_warp_tiles_anyn takes any
// N.
// contract: K % 8 == 0, pointers 16-byte aligned
// Launch: grid (ceil(N/BN), ceil(M/BM)), block (BM/WM * BN/WN * 32) = 256 threads, dynamic shared memory
// STAGES x (BM*BK + BK*BN) x 2 = 98,304 bytes at the defaults (raise the attribute first).
//
// Prediction (8192^3): 2048 tiles = 15.5 waves of 132 blocks (97% wave efficiency). L2 -> SM 12.9 GB,
// ~5.8 TB/s at 490 TFLOP/s. Shared memory: 4 KB of ldmatrix per 32 mma's per warp plus 12 KB of cp.async
// per k16-step per block, 0.043 B/FLOP: 81 of 128 B/clk/SM at 490 TFLOP/s, no longer the limit. 2 warps
// per scheduler must keep the tensor pipe busy through barriers and ldmatrix latency; expect 70-76% of
// the mma.sync roof: 440-480 TFLOP/s (55-62% of cuBLAS at 710-818), +25-35% over 05. At 4096^3:
// 512 tiles, 3.9 waves (97%), about the same rate.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   warp_tiles at 4096x4096x4096: 0.3654 ms, 376.1 TFLOP/s, 59.6% of mma, 0.51x cuBLAS bf16
//   warp_tiles at 8192x8192x8192: 3.0153 ms, 364.6 TFLOP/s, 57.8% of mma, 0.50x cuBLAS bf16
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
#define PIPE_BYTES (STAGES * STAGE_BYTES)
#define SMEM_BYTES PIPE_BYTES
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

    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;   // 2D grid: x walks the tiles of a row of C

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
    cp_async_wait<0>();   // only empty groups can be left; drain them before the block exits

    // Epilogue: straight from registers (common/mma_epilogue.cuh).
    store_acc_direct<VEC_N>(C, M, N, m0 + warp_m * WM, n0 + warp_n * WN, acc, lane);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
gemm_warp_tiles(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_body<true>(A, B, C, M, N, K);
}

#if ANYN_ENTRY
extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
gemm_warp_tiles_anyn(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N,
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

// Chapter 07, version 5: persistent blocks, a static tile scheduler, grouped tile order.
//
// Idea: launch one block per SM (grid = min(tiles, SMs)) and let each block walk tiles
// blockIdx.x, blockIdx.x + gridDim.x, ... The ring and its parities carry on from tile to tile, so the
// producer starts loading the next tile's first slices while the consumers are still converting and
// storing the last tile's accumulators: the prologue of every tile but the first disappears and the
// epilogue overlaps with loads. The order of tiles is grouped: GROUP_M tile rows are walked top to
// bottom before the next column, so the 132 tiles in flight at once touch ~GROUP_M row blocks of A
// and ~132/GROUP_M column blocks of B: the same operands are read by many SMs at nearly the same time
// and mostly hit L2. Everything else is version 4 (producer + 2 consumers, setmaxnreg, 128 x 256 x 64),
// except one thing inside the k-loop: a consumer no longer waits for its k-tile's wgmma group to finish
// before it issues the next one (IN_FLIGHT=1: wgmma.wait_group 1, then the slot of the PREVIOUS k-tile is
// released), so the tensor cores always have the next group queued and the wait's drain disappears; the
// accumulators are touched by nothing but wgmma until the tile's last wait_group 0. IN_FLIGHT=0 builds
// version 4's wait_group 0 per k-tile, for comparison.
//
// Prediction (H200, 132 SMs, wgmma roof ~950 TFLOP/s):
//  - shared memory as version 4: 48 KB per stage, 4 stages = 192 KB (+1 KB, barriers); 1 block per SM;
//  - tiles per SM: 3.88 at 4096^3 (wave quantisation as before: 97%), 15.5 at 8192^3, 54.3 at
//    8192 x 28672 x 8192; the ~1.5 us ring fill per tile goes away (4% of a 37 us tile at K = 4096) and
//    the epilogue now overlaps with the next tile's loads (though not with its MMAs);
//  - HBM traffic with GROUP_M = 8 at 8192^3: a wave (132 tiles ~ 8 x 16.5) reads 1024 rows of A and
//    4224 rows of B, 86 MB per 89 us of compute (at 800 TFLOP/s): ~1 TB/s; in row-major launch order
//    (version 4: 4 x 32 tiles) it is 143 MB, ~1.6 TB/s, with more of it missing L2;
//  - expect ~680-750 TFLOP/s at 4096^3 and 8192^3: 72-78% of the roof, 88-100% of cuBLAS; a group in
//    flight across k-tiles should add ~5% (the drain of 4 wgmma per k-tile, ~0.3 us of a ~6 us k-loop step
//    pair, no longer exposed).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   persistent at 4096x4096x4096: 0.2150 ms, 639.1 TFLOP/s, 68.8% of wgmma, 0.91x cuBLAS bf16
//   persistent at 8192x8192x8192: 1.7075 ms, 643.9 TFLOP/s, 69.3% of wgmma, 0.97x cuBLAS bf16
//   persistent at 8192x28672x8192: 6.0650 ms, 634.5 TFLOP/s, 68.3% of wgmma, 0.96x cuBLAS bf16
// contract: K % 8 == 0 and N % 8 == 0; M, N, K otherwise arbitrary (TMA zero fill, masked stores).
// requires: sm_90a
// ------------------------------------------------------------------------------------------------
// PTX helpers. No CUDA header is needed: bf16 values travel as raw 16-bit patterns, a tensor map as
// its 128 opaque bytes.
#include "common/bf16_bits.cuh"        // bf16_t
#include "common/smem_addr.cuh"        // smem_u32
#include "common/wgmma.cuh"            // desc_sw128, wgmma_fence, wgmma_commit, wgmma_wait, fence_acc
#include "common/wgmma_tile.cuh"       // wgmma_tile
#include "common/mbarrier.cuh"         // mbar_init, fence_barrier_init, mbar_arrive_expect_tx, mbar_arrive, mbar_wait
#include "common/hopper_tma.cuh"       // TmaDesc, tma_load_2d
#include "common/setmaxnreg.cuh"       // regs_dealloc, regs_alloc
#include "common/launch_check.cuh"     // check_launch
#include "common/tile_order.cuh"       // tile_of
#include "common/wgmma_epilogue.cuh"   // store_tile_direct

#ifndef BN
#define BN 256          // tile width: 128 or 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8       // tile rows per band of the tile order
#endif
#ifndef IN_FLIGHT
#define IN_FLIGHT 1     // 1: wait for all but the newest wgmma group (wait_group 1); 0: for all of them
#endif
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS (128 * (CONSUMERS + 1))
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + 16 * STAGES)

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_persistent(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
                bf16_t* __restrict__ C, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned full0 = base + STAGES * STAGE_BYTES, empty0 = full0 + 8 * STAGES;

    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {                                           // ---- producer
        regs_dealloc<40>();
        if (t == 0) {
            int s = 0;
            unsigned ph = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tm, tn;
                tile_of(tile, tiles_m, tiles_n, GROUP_M, tm, tn);
                for (int kt = 0; kt < KT; ++kt) {
                    const unsigned full = full0 + 8 * s, sA = base + s * STAGE_BYTES;
                    mbar_wait(empty0 + 8 * s, ph ^ 1);
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    tma_load_2d(sA, &tmA, full, kt * BK, tm * BM);
                    tma_load_2d(sA + A_BYTES, &tmB, full, kt * BK, tn * BN);
                    if (++s == STAGES) { s = 0; ph ^= 1; }
                }
            }
        }
    } else {                                                 // ---- consumers
        regs_alloc<232>();
        const int c = wg - 1;
        const unsigned long long d0 = desc_sw128(base);
        int s = 0;
        unsigned ph = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int tm, tn;
            tile_of(tile, tiles_m, tiles_n, GROUP_M, tm, tn);
            float acc[BN / 2];
            #pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
            int prev = -1;                                   // the slot of the group still in flight
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(full0 + 8 * s, ph);
                const unsigned long long dA = d0 + ((s * STAGE_BYTES + c * 64 * 128) >> 4);
                const unsigned long long dB = d0 + ((s * STAGE_BYTES + A_BYTES) >> 4);
                wgmma_fence();
                #pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    wgmma_tile<BN>(acc, dA + 2 * kk, dB + 2 * kk);
                wgmma_commit();
#if IN_FLIGHT
                // All but this k-tile's group are done: the previous slot is free, while this group runs on
                // and the next k-tile's wgmma queue behind it (the accumulators are not touched in between).
                wgmma_wait<1>();
                if (prev >= 0 && t == 0) mbar_arrive(empty0 + 8 * prev);
                prev = s;
#else
                wgmma_wait<0>();
                fence_acc(acc);
                if (t == 0) mbar_arrive(empty0 + 8 * s);
#endif
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
#if IN_FLIGHT
            wgmma_wait<0>();
            fence_acc(acc);
            if (prev >= 0 && t == 0) mbar_arrive(empty0 + 8 * prev);
#endif
            store_tile_direct<BN>(acc, C, M, N, tm * BM + c * 64, tn * BN, t);
        }
    }
}

#define SCHEDULE 1    // persistent blocks
#define OPERANDS 1    // tensor maps of A and B, C pointer
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

// Chapter 07, version 8: ping-pong consumers: each consumer warpgroup owns a whole tile, and the two
// take turns on the tensor cores.
//
// Idea: in version 5 both consumer warpgroups split the rows of ONE 128 x 256 tile, so they finish its
// k-loop together and store together: for the length of the epilogue (and the drain of the last wgmma
// group) no wgmma is issued on the SM. Here consumer warpgroup c takes every other tile of the block's
// persistent sequence (tiles j = c, c + 2, ...; block tile j is blockIdx.x + j * gridDim.x in the grouped
// order) and computes all of it: a 128 x 128 tile, two m64n128k16 per 16-wide K slice, 2 x 64 = 128 fp32
// accumulators per thread (version 5's register budget). An ordered hand-over makes the two mainloops
// follow one another instead of interleaving: a warpgroup issues its tile's first wgmma only once the
// other has issued its tile's last one (named barrier 1 + c, `bar.sync` by the waiting warpgroup and
// `bar.arrive` by the other, 256 threads), so when warpgroup 0 leaves its k-loop the tensor cores still
// hold its last group and already receive warpgroup 1's first, and warpgroup 0's wait_group 0 and
// epilogue (store_tile_direct, from registers) run under warpgroup 1's mainloop. The producer is version
// 5's, one thread walking the block's tiles in order through one ring of STAGES slots: k-tile g of the
// block (g = j * KT + kt) lives in slot g % STAGES, phase g / STAGES. A consumer derives (slot, parity)
// of its tile's first k-tile from j * KT, skipping the other's KT slots; only the owner releases a slot
// (empty count 1), IN_FLIGHT=1 as in version 5 (wait_group 1, then the previous k-tile's slot).
//
// Why the parities hold: a parity wait is right only if the barrier is at most one phase short of the
// phase waited for. full[s]: when a consumer waits for k-tile g, the phase of g - STAGES is complete,
// either because it waited for it itself (same tile) or because every k-tile before its tile was
// waited for by the previous tile's owner before it handed over (the hand-over chain is transitive,
// and it is what makes this true: without it, consumer 1 would wait for k-tile KT while slot KT % STAGES
// is several phases behind, and a parity wait can pass on a phase two short). And full[s] cannot
// complete g + STAGES before g is released by its owner. empty[s]: the producer waits for the release of
// g - STAGES before loading g, and it waited for the release of g - 2 STAGES before loading g - STAGES;
// a release can only follow its own load. Every bar.sync has its bar.arrive: a warpgroup waits before
// each tile j >= 1 it owns, and the owner of tile j - 1 arrives after its mainloop when tile j exists;
// a barrier never receives two arrivals in one round (the next arrival on 1 + c needs c's own next hand-
// over first). No wait depends on a later one: deadlock-free for any KT >= 1 and STAGES >= 2.
//
// Why it should help (H200, 132 SMs, wgmma roof 947 TFLOP/s measured = 7.2 TFLOP/s per SM):
//  - version 5's bubble: a 128 x 256 tile's k-loop takes 37 us at the roof at K = 4096 (75 us at
//    8192) and the epilogue (64 KB of bf16 from 256 threads, 64 4-byte stores each) ~1-2 us plus the
//    drain and refill of the wgmma queue (~0.3 us): 3-5% of the tensor time at 4096^3, 1.5-3% at
//    8192^3, exposed once per tile. Here the epilogue of a 128 x 128 tile (32 KB, 64 stores per thread
//    of one warpgroup, ~1 us) runs under the other warpgroup's 18.7 us (K = 4096) or 37 us (K = 8192)
//    k-loop: it is hidden 20-40 times over, and only the block's very last epilogue is exposed;
//  - a consumer's group per k-tile is 8 wgmma (512 tensor cycles at the roof), as in version 5, so
//    wait_group 1 keeps the same cover;
//  - tiles: 1024 at 4096^3 (7.76 per SM, 8 waves, 97%), 4096 at 8192^3 (31.0 per SM, 97%), 14336 at
//    8192 x 28672 x 8192 (108.6 per SM, 99.6%): no change in quantisation;
//  - the cost: operands per FLOP. A k-tile is 32 KB for 2.1 MFLOP (65.5 FLOP/B) against version 5's
//    48 KB for 4.2 MFLOP (87 FLOP/B): 12.2 TB/s from L2 into shared memory at 800 TFLOP/s instead of
//    9.2, and the tensor cores read B twice per K slice (96 B/clk of shared memory at the roof plus 64
//    of TMA writes, against 80 + 48). Version 5 at BN = 128 (cooperative 128 x 128) lost 5-6% to BN =
//    256 in the chapter's sweep (659 vs 700, 663 vs 698 TFLOP/s) with the same bytes per FLOP;
//  - shared memory: 6 stages x 32 KB = 192 KB (+1 KB alignment, barriers), 1 block of 384 threads per
//    SM; registers as version 5 (setmaxnreg: producer 40, consumers 232; ptxas reports 168, 0 spills).
// Prediction: the hidden epilogue (+3-5% at 4096^3, +2-3% at 8192^3) against 33% more operand bytes
// per FLOP (0 to -6%): about version 5, +-5%: 680-740 TFLOP/s at 4096^3 (0.88-0.97x cuBLAS), 650-720 at
// 8192^3 and 8192 x 28672 x 8192 (0.85-0.95x; cuBLAS 730-800), 70-78% of the wgmma roof; more likely
// ahead of version 5 at 4096^3 (K = 4096 halves the k-loop each epilogue is set against, so the bubble
// hidden weighs twice as much) than at 8192^3. If it trails version 5 everywhere, operand traffic, not the epilogue, bounds these kernels,
// and the next step is multicast of B across a 2-CTA cluster (version 6 with its fence fixed) under
// this schedule. BM=64 BN=256 builds the other ping-pong shape (one m64n256k16 per K slice, 40 KB per
// k-tile: 52 FLOP/B, expected slower); STAGES=7 fits (230,512 B).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   pingpong at 4096x4096x4096: 0.2125 ms, 646.8 TFLOP/s, 69.7% of wgmma, 0.91x cuBLAS bf16
//   pingpong at 8192x8192x8192: 1.8059 ms, 608.8 TFLOP/s, 65.6% of wgmma, 0.98x cuBLAS bf16
//   pingpong at 8192x28672x8192: 6.1527 ms, 625.5 TFLOP/s, 67.4% of wgmma, 0.99x cuBLAS bf16
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

// Named hardware barriers (0 is __syncthreads()): `bar.sync` waits until 256 threads have arrived,
// counting itself; `bar.arrive` counts without waiting. Barrier 1 + c says "consumer c may issue": c
// waits on it (its 128 threads) and the other consumer arrives on it (its 128). Immediate ids, so ptxas
// reserves 3 hardware barriers, not all 16.
template <int ID> __device__ __forceinline__ void bar_sync_256()   { asm volatile("bar.sync %0, 256;\n" :: "n"(ID) : "memory"); }
template <int ID> __device__ __forceinline__ void bar_arrive_256() { asm volatile("bar.arrive %0, 256;\n" :: "n"(ID) : "memory"); }
__device__ __forceinline__ void wait_my_turn(int c)    { if (c == 0) bar_sync_256<1>();   else bar_sync_256<2>(); }
__device__ __forceinline__ void pass_the_turn(int c)   { if (c == 0) bar_arrive_256<2>(); else bar_arrive_256<1>(); }

#ifndef BM
#define BM 128          // rows of one consumer's tile: 128 (two m64 halves) or 64
#endif
#ifndef BN
#define BN 128          // columns of one consumer's tile: 128 or 256 (BM x BN / 128 accumulators <= 128)
#endif
#ifndef STAGES
#define STAGES 6
#endif
#ifndef GROUP_M
#define GROUP_M 8       // tile rows per band of the tile order
#endif
#ifndef IN_FLIGHT
#define IN_FLIGHT 1     // 1: wait for all but the newest wgmma group (wait_group 1); 0: for all of them
#endif
#define BK 64
#define MH (BM / 64)    // m64 halves of a consumer's tile
#define CONSUMERS 2
#define THREADS (128 * (CONSUMERS + 1))
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + 16 * STAGES)
#if (BM != 64 && BM != 128) || (BN != 128 && BN != 256) || MH * BN > 256
#error "BM x BN must be 128 x 128, 64 x 128 or 64 x 256 (at most 128 accumulators per thread)"
#endif
#if STAGES < 2
#error "STAGES must be at least 2 (IN_FLIGHT keeps one slot held while the next is waited for)"
#endif

// tmA: box 64 x BM; tmB: box 64 x BN; both 128-byte swizzle.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_pingpong(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
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
            mbar_init(empty0 + 8 * s, 1);                    // released by the k-tile's one owner
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {                                           // ---- producer: version 5's
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
    } else {                                                 // ---- consumers: every other tile
        regs_alloc<232>();
        const int c = wg - 1;
        const unsigned long long d0 = desc_sw128(base);
        unsigned j = c;                                      // this tile's index in the block's sequence
        for (int tile = blockIdx.x + c * gridDim.x; tile < tiles; tile += 2 * gridDim.x, j += 2) {
            int tm, tn;
            tile_of(tile, tiles_m, tiles_n, GROUP_M, tm, tn);
            float acc[MH][BN / 2];
            #pragma unroll
            for (int h = 0; h < MH; ++h)
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0.f;
            // the ring position of this tile's first k-tile: the block's j earlier tiles used j * KT slots
            const unsigned g0 = j * (unsigned)KT;
            int s = (int)(g0 % STAGES);
            unsigned ph = (g0 / STAGES) & 1u;
            if (j > 0) wait_my_turn(c);                      // the tensor cores are ours once the owner of
                                                             // tile j - 1 has issued all of its wgmma
            int prev = -1;                                   // the slot of the group still in flight
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(full0 + 8 * s, ph);
                const unsigned long long dA = d0 + ((s * STAGE_BYTES) >> 4);
                const unsigned long long dB = d0 + ((s * STAGE_BYTES + A_BYTES) >> 4);
                wgmma_fence();
                #pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    #pragma unroll
                    for (int h = 0; h < MH; ++h)             // rows 64h.. of A: 64 rows x 128 B further on
                        wgmma_tile<BN>(acc[h], dA + h * (64 * 128 >> 4) + 2 * kk, dB + 2 * kk);
                wgmma_commit();
#if IN_FLIGHT
                wgmma_wait<1>();                             // all but this k-tile's group are done
                if (prev >= 0 && t == 0) mbar_arrive(empty0 + 8 * prev);
                prev = s;
#else
                wgmma_wait<0>();
                #pragma unroll
                for (int h = 0; h < MH; ++h) fence_acc(acc[h]);
                if (t == 0) mbar_arrive(empty0 + 8 * s);
#endif
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
            // hand the tensor cores over while this tile's last group still runs: the other warpgroup's
            // first wgmma queue behind it, and this warpgroup's epilogue runs under them
            if (tile + (int)gridDim.x < tiles) pass_the_turn(c);
#if IN_FLIGHT
            wgmma_wait<0>();
            #pragma unroll
            for (int h = 0; h < MH; ++h) fence_acc(acc[h]);
            if (prev >= 0 && t == 0) mbar_arrive(empty0 + 8 * prev);
#endif
            #pragma unroll
            for (int h = 0; h < MH; ++h)
                store_tile_direct<BN>(acc[h], C, M, N, tm * BM + h * 64, tn * BN, t);
        }
    }
}

#define SCHEDULE 1    // persistent blocks
#define OPERANDS 1    // tensor maps of A and B, C pointer
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

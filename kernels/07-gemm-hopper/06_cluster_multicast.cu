// Chapter 07, version 6: 2-CTA clusters, TMA multicast of the shared operand.
//
// Idea: two CTAs of a cluster compute vertically adjacent tiles (rows tm = 2cm and 2cm+1, the same
// columns tn), so they need the same 256 x 64 slice of B at every K step. Each CTA loads its own A
// slice and HALF of the B slice, multicast into both CTAs' shared memory (same offset, bytes counted
// on the same-offset full barrier of each CTA): B is read from L2 once per pair instead of twice. A
// stage of CTA r is now written by both producers, so it may be refilled only when the consumers of
// BOTH CTAs are done with it: every consumer warpgroup arrives on the empty barrier of each CTA of the
// cluster (mapa + remote mbarrier.arrive), and empty barriers count CONSUMERS x CLUSTER arrivals. Each
// full barrier expects A + both B halves (48 KB); a peer's half may land before the local producer
// arms the barrier, which only makes the transaction count dip below zero for a while (the phase
// cannot complete without the local arrival). Cluster barriers after the barrier inits (before any
// remote access) and at the end (no CTA leaves while its peer may still signal it). The scheduler of
// version 5 now hands out cluster tiles (256 x 256); CLUSTER=1 builds version 5 again.
//
// Prediction (H200, 132 SMs, wgmma roof ~950 TFLOP/s):
//  - shared memory as before: 48 KB per stage (16 KB A, 2 x 16 KB B halves), 4 stages, 1 CTA per SM,
//    66 clusters of 2 if every GPC has an even number of usable SMs (a persistent grid larger than what
//    fits at once would run its last clusters after the others: the host caps the grid at what
//    cuOccupancyMaxActiveClusters reports, and the sweep also tries 128 CTAs);
//  - L2 -> SM traffic per CTA and K step: 16 + 16 = 32 KB instead of 48 KB for 4.19 MFLOP: 5.6 TB/s
//    at 720 TFLOP/s instead of 8.2, out of the range where the L2 feed limits;
//  - tiles per SM unchanged (3.88 / 15.5 / 54.3 at 4096^3 / 8192^3 / 8192 x 28672 x 8192);
//  - expect ~720-800 TFLOP/s at 4096^3 and 8192^3: 76-84% of the roof, 92-103% of cuBLAS.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   cluster_multicast at 4096x4096x4096: 0.2984 ms, 460.5 TFLOP/s, 49.6% of wgmma, 0.61x cuBLAS bf16
//   cluster_multicast at 8192x8192x8192: 2.3688 ms, 464.2 TFLOP/s, 50.0% of wgmma, 0.64x cuBLAS bf16
//   cluster_multicast at 8192x28672x8192: 8.0848 ms, 476.0 TFLOP/s, 51.3% of wgmma, 0.62x cuBLAS bf16
// contract: K % 8 == 0 and N % 8 == 0; M, N, K otherwise arbitrary (TMA zero fill, masked stores; a part
//           of a cluster tile wholly past M or N loads a clamped, valid box and stores nothing).
// requires: sm_90a
// ------------------------------------------------------------------------------------------------
// PTX helpers. No CUDA header is needed: bf16 values travel as raw 16-bit patterns, a tensor map as
// its 128 opaque bytes.
#include "common/bf16_bits.cuh"        // bf16_t
#include "common/smem_addr.cuh"        // smem_u32
#include "common/wgmma.cuh"            // desc_sw128, wgmma_fence, wgmma_commit, wgmma_wait, fence_acc
#include "common/wgmma_tile.cuh"       // wgmma_tile
#include "common/mbarrier.cuh"         // mbar_init, fence_barrier_init, mbar_arrive_expect_tx, mbar_arrive, mbar_wait
#include "common/hopper_tma.cuh"       // TmaDesc, tma_load_2d, tma_load_2d_multicast
#include "common/cluster.cuh"          // cluster_ctarank, cluster_id_x, cluster_count_x, cluster_sync, mbar_arrive_cluster
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
#define GROUP_M 8       // tile rows per band of the tile order (GROUP_M / CLUSTER cluster rows)
#endif
#ifndef CLUSTER
#define CLUSTER 2       // CTAs per cluster along M: 1 or 2
#endif
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS (128 * (CONSUMERS + 1))
#define A_BYTES (BM * BK * 2)
#define B_PART_BYTES (BN / CLUSTER * BK * 2)   // the part of the B slice each CTA loads (and multicasts)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + 16 * STAGES)
#if CLUSTER != 1 && CLUSTER != 2
#error "CLUSTER must be 1 or 2"
#endif
#if CLUSTER > 1
#define CLUSTER_ATTR __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_ATTR
#endif

// tmB's box is 64 x (BN / CLUSTER): the part of B one CTA fetches.
extern "C" __global__ void __launch_bounds__(THREADS, 1) CLUSTER_ATTR
gemm_cluster_multicast(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
                       bf16_t* __restrict__ C, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;   // the same offset in every CTA
    const unsigned full0 = base + STAGES * STAGE_BYTES, empty0 = full0 + 8 * STAGES;

    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
#if CLUSTER > 1
    const int rank = (int)cluster_ctarank(), cid = (int)cluster_id_x(), ncl = (int)cluster_count_x();
#else
    const int rank = 0, cid = blockIdx.x, ncl = gridDim.x;
#endif
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int crows = (tiles_m + CLUSTER - 1) / CLUSTER, ctiles = crows * tiles_n;
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, CONSUMERS * CLUSTER);
        }
        fence_barrier_init();
    }
#if CLUSTER > 1
    cluster_sync();                                          // peers' barriers exist before any remote use
#else
    __syncthreads();
#endif

    if (wg == 0) {                                           // ---- producer
        regs_dealloc<40>();
        if (t == 0) {
            int s = 0;
            unsigned ph = 0;
            for (int ct = cid; ct < ctiles; ct += ncl) {
                int cm, tn;
                tile_of(ct, crows, tiles_n, (GROUP_M / CLUSTER > 0 ? GROUP_M / CLUSTER : 1), cm, tn);
                // a part of a cluster tile that lies wholly past M (odd tile-row count) or N (narrow last
                // column block) loads a clamped, valid box instead: its outputs are never stored
                const int a_row = min(cm * CLUSTER + rank, tiles_m - 1) * BM;
                const int b_row = min(tn * BN + rank * (BN / CLUSTER), N - 1);   // clamp a row block past M
                for (int kt = 0; kt < KT; ++kt) {
                    const unsigned full = full0 + 8 * s, sA = base + s * STAGE_BYTES;
                    mbar_wait(empty0 + 8 * s, ph ^ 1);       // both CTAs' consumers released stage s
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    tma_load_2d(sA, &tmA, full, kt * BK, a_row);
#if CLUSTER > 1
                    tma_load_2d_multicast(sA + A_BYTES + rank * B_PART_BYTES, &tmB, full, kt * BK, b_row,
                                          (unsigned short)((1u << CLUSTER) - 1));
#else
                    tma_load_2d(sA + A_BYTES, &tmB, full, kt * BK, tn * BN);
#endif
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
        for (int ct = cid; ct < ctiles; ct += ncl) {
            int cm, tn;
            tile_of(ct, crows, tiles_n, (GROUP_M / CLUSTER > 0 ? GROUP_M / CLUSTER : 1), cm, tn);
            const int tm = cm * CLUSTER + rank;
            float acc[BN / 2];
            #pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(full0 + 8 * s, ph);
                const unsigned long long dA = d0 + ((s * STAGE_BYTES + c * 64 * 128) >> 4);
                const unsigned long long dB = d0 + ((s * STAGE_BYTES + A_BYTES) >> 4);
                wgmma_fence();
                #pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    wgmma_tile<BN>(acc, dA + 2 * kk, dB + 2 * kk);
                wgmma_commit();
                wgmma_wait<0>();
                fence_acc(acc);
#if CLUSTER > 1
                if (t < CLUSTER) mbar_arrive_cluster(empty0 + 8 * s, t);   // thread t signals CTA t
#else
                if (t == 0) mbar_arrive(empty0 + 8 * s);
#endif
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
            store_tile_direct<BN>(acc, C, M, N, tm * BM + c * 64, tn * BN, t);
        }
    }
#if CLUSTER > 1
    __syncwarp();
    cluster_sync();                                          // no CTA exits while its peer may signal it
#endif
}

#define SCHEDULE 2    // persistent clusters along M
#define OPERANDS 1    // tensor maps of A and B, C pointer
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

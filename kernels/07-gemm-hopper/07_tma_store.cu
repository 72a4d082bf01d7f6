// Chapter 07, version 7: epilogue through shared memory and a TMA store.
//
// Idea: version 6 writes C straight from the accumulator registers: 64 4-byte stores per thread per
// tile, each warp instruction touching 8 rows x 16 bytes, while the tensor cores of that SM idle. Here
// each consumer warpgroup converts its 64 x 256 fp32 block to bf16 in four 64 x 64 pieces: the piece
// is written into an 8 KB staging buffer in the 128-byte swizzle layout (lane l of warp w writes word
// l%4 of chunk j ^ (row % 8) of row 16w + l/4 (+8): the 8 rows of a store land on 8 different 16-byte
// chunks, so the 32 lanes hit 32 different banks), `fence.proxy.async` hands it to the async proxy, a
// named barrier (one per warpgroup) gathers the 128 threads, and one thread issues a TMA store of the
// piece (the tensor map clips rows and columns past the end). Two buffers per warpgroup alternate; a
// buffer is rewritten only after `cp.async.bulk.wait_group.read 1` says the store before last has read
// it, so the stores drain while the next piece is converted and while the next tile's MMAs run. Also:
// 2-CTA clusters with multicast B (version 6; CLUSTER=1 builds the single-CTA variant).
//
// Prediction (H200, 132 SMs, wgmma roof ~950 TFLOP/s):
//  - shared memory: 4 stages x 48 KB = 192 KB + 2 warpgroups x 2 x 8 KB staging = 224 KB, +1 KB
//    alignment, 64 B barriers: 230,464 B of the 232,448 B (227 KB) a block may have; 3 stages leave
//    room to spare (181 KB) if 4 turn out not to fit with the driver's reserve;
//  - the epilogue's issue cost drops from 64 global stores to 64 shared stores + 4 TMA stores per
//    thread and its latency moves off the critical path: ~1-2% of a 37 us tile at 4096^3;
//  - expect ~730-810 TFLOP/s at 4096^3 and 8192^3: 77-85% of the wgmma roof, 94-104% of cuBLAS.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   tma_store at 4096x4096x4096: 0.2773 ms, 495.7 TFLOP/s, 53.4% of wgmma, 0.65x cuBLAS bf16
//   tma_store at 8192x8192x8192: 2.3704 ms, 463.8 TFLOP/s, 50.0% of wgmma, 0.65x cuBLAS bf16
//   tma_store at 8192x28672x8192: 8.0709 ms, 476.8 TFLOP/s, 51.3% of wgmma, 0.64x cuBLAS bf16
// contract: K % 8 == 0 and N % 8 == 0; M, N, K otherwise arbitrary (TMA zero fill on loads, clipped stores;
//           boxes wholly past the end are clamped (loads) or skipped (stores)).
// requires: sm_90a
// ------------------------------------------------------------------------------------------------
// PTX helpers. No CUDA header is needed: bf16 values travel as raw 16-bit patterns, a tensor map as
// its 128 opaque bytes.
#include "common/bf16_bits.cuh"      // pack_bf16x2
#include "common/smem_addr.cuh"      // smem_u32
#include "common/wgmma.cuh"          // desc_sw128, wgmma_fence, wgmma_commit, wgmma_wait, fence_acc
#include "common/wgmma_tile.cuh"     // wgmma_tile
#include "common/mbarrier.cuh"       // mbar_init, fence_barrier_init, mbar_arrive_expect_tx, mbar_arrive, mbar_wait
#include "common/hopper_tma.cuh"     // TmaDesc, tma_load_2d, tma_load_2d_multicast
#include "common/cluster.cuh"        // cluster_ctarank, cluster_id_x, cluster_count_x, cluster_sync, mbar_arrive_cluster
#include "common/setmaxnreg.cuh"     // regs_dealloc, regs_alloc
#include "common/launch_check.cuh"   // check_launch
#include "common/tile_order.cuh"     // tile_of

// TMA store: the box at (c0 = column, c1 = row) of the tensor map is written from shared memory;
// rows and columns past the tensor's end are not written. Completion is tracked per thread in bulk
// groups: wait_group.read N returns once at most N of this thread's groups still read shared memory.
__device__ __forceinline__ void tma_store_2d(const TmaDesc* map, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(src), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void st_shared_u32(unsigned addr, unsigned v) {
    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
}
template <int ID> __device__ __forceinline__ void named_bar_sync_128() {   // barrier 0 is __syncthreads()
    asm volatile("bar.sync %0, 128;\n" :: "n"(ID) : "memory");
}
// the 128 threads of consumer warpgroup c (0 or 1) meet at hardware barrier 1 + c
__device__ __forceinline__ void warpgroup_bar(int c) {
    if (c == 0) named_bar_sync_128<1>(); else named_bar_sync_128<2>();
}

#ifndef BN
#define BN 256          // tile width: 128 or 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 8       // tile rows per band of the tile order
#endif
#ifndef CLUSTER
#define CLUSTER 2       // CTAs per cluster along M: 1 or 2
#endif
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS (128 * (CONSUMERS + 1))
#define A_BYTES (BM * BK * 2)
#define B_PART_BYTES (BN / CLUSTER * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define CBUF_BYTES (64 * 64 * 2)                 // one 64 x 64 bf16 piece of C
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + CONSUMERS * 2 * CBUF_BYTES + 16 * STAGES)
#if CLUSTER != 1 && CLUSTER != 2
#error "CLUSTER must be 1 or 2"
#endif
#if CLUSTER > 1
#define CLUSTER_ATTR __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_ATTR
#endif

// tmA: box 64 x BM; tmB: box 64 x (BN / CLUSTER); tmC: C (M x N) box 64 x 64; all 128-byte swizzle.
extern "C" __global__ void __launch_bounds__(THREADS, 1) CLUSTER_ATTR
gemm_tma_store(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
               const __grid_constant__ TmaDesc tmC, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned cbuf0 = base + STAGES * STAGE_BYTES;
    const unsigned full0 = cbuf0 + CONSUMERS * 2 * CBUF_BYTES, empty0 = full0 + 8 * STAGES;

    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
#if CLUSTER > 1
    const int rank = (int)cluster_ctarank(), cid = (int)cluster_id_x(), ncl = (int)cluster_count_x();
#else
    const int rank = 0, cid = blockIdx.x, ncl = gridDim.x;
#endif
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int crows = (tiles_m + CLUSTER - 1) / CLUSTER, ctiles = crows * tiles_n;
    const int group = GROUP_M / CLUSTER > 0 ? GROUP_M / CLUSTER : 1;
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, CONSUMERS * CLUSTER);
        }
        fence_barrier_init();
    }
#if CLUSTER > 1
    cluster_sync();
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
                tile_of(ct, crows, tiles_n, group, cm, tn);
                // a part of a cluster tile that lies wholly past M (odd tile-row count) or N (narrow last
                // column block) loads a clamped, valid box instead: its outputs are never stored
                const int a_row = min(cm * CLUSTER + rank, tiles_m - 1) * BM;
                const int b_row = min(tn * BN + rank * (BN / CLUSTER), N - 1);
                for (int kt = 0; kt < KT; ++kt) {
                    const unsigned full = full0 + 8 * s, sA = base + s * STAGE_BYTES;
                    mbar_wait(empty0 + 8 * s, ph ^ 1);
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
        const int c = wg - 1, warp = t >> 5, lane = t & 31;
        const int r = warp * 16 + (lane >> 2);               // this thread's rows r, r + 8 of a 64-row piece
        const unsigned row_off = r * 128 + (lane & 3) * 4;
        const unsigned long long d0 = desc_sw128(base);
        int s = 0, piece = 0;
        unsigned ph = 0;
        bool last_skipped = false;                           // (thread 0) the previous piece issued no store
        for (int ct = cid; ct < ctiles; ct += ncl) {
            int cm, tn;
            tile_of(ct, crows, tiles_n, group, cm, tn);
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
                if (t < CLUSTER) mbar_arrive_cluster(empty0 + 8 * s, t);
#else
                if (t == 0) mbar_arrive(empty0 + 8 * s);
#endif
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
            // epilogue: BN / 64 pieces of 64 x 64, alternating between this warpgroup's two buffers
            #pragma unroll
            for (int j = 0; j < BN / 64; ++j, ++piece) {
                const unsigned buf = cbuf0 + (c * 2 + (piece & 1)) * CBUF_BYTES;
                if (t == 0) {                                // the store that last used buf has read it:
                    if (last_skipped) bulk_wait_read<0>();   // it may be the newest group
                    else bulk_wait_read<1>();                // the newest group is the previous piece's
                }
                warpgroup_bar(c);
                #pragma unroll
                for (int q = 0; q < 8; ++q) {                // 16-byte column chunk q of the piece
                    const int i = 4 * (8 * j + q);
                    const unsigned off = row_off + ((q ^ (r & 7)) << 4);
                    st_shared_u32(buf + off, pack_bf16x2(acc[i], acc[i + 1]));
                    st_shared_u32(buf + off + 8 * 128, pack_bf16x2(acc[i + 2], acc[i + 3]));
                }
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                warpgroup_bar(c);
                if (t == 0) {
                    const int col = tn * BN + 64 * j, row = tm * BM + c * 64;
                    last_skipped = !(col < N && row < M);    // a piece wholly past the end stores nothing
                    if (!last_skipped) {
                        tma_store_2d(&tmC, buf, col, row);   // partial boxes are clipped by the tensor map
                        bulk_commit();
                    }
                }
            }
        }
        if (t == 0) bulk_wait_all();                         // stores done before the CTA's memory goes
    }
#if CLUSTER > 1
    __syncwarp();
    cluster_sync();
#endif
}

#define SCHEDULE 2    // persistent clusters along M
#define OPERANDS 2    // tensor maps of A, B and C
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

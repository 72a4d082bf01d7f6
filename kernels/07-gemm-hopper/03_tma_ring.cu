// Chapter 07, version 3: a ring of shared-memory stages with full and empty barriers.
//
// Idea: keep STAGES K slices in flight. Stage s has two mbarriers: full[s] (one arrival carrying the
// byte count, completed by the TMA bytes) and empty[s] (one arrival per consumer warpgroup once its
// wgmmas have read the stage). Slice kt lives in stage kt % STAGES; the parity to wait for is
// (kt / STAGES) & 1, the number of times the ring has wrapped. Thread 0 fills the first STAGES stages
// up front; after the block has consumed slice kt, thread 0 waits for empty[s] (both warpgroups done)
// and refills stage s with slice kt + STAGES, so the loads of the next STAGES-1 slices are in flight
// while the tensor cores work. There is still no dedicated producer: thread 0 is also a consumer, and
// its warp (hence warpgroup 0) stalls while it waits for warpgroup 1 to release the stage.
//
// Prediction (H200, wgmma roof ~950 TFLOP/s):
//  - 128 x 128 x 64 tiles: 32 KB per stage; STAGES = 4 uses 128 KB + 1 KB (227 KB would fit 7; 1 block
//    per SM), STAGES = 3 uses 97 KB and lets 2 blocks share an SM;
//  - latency is now hidden, so the limit becomes the feed: each 2.1 MFLOP K step pulls 32 KB from L2
//    (the 128 x 128 tile's intensity), 10.9 TB/s from L2 across 132 SMs at 700 TFLOP/s, more than L2
//    delivers (~9-10 TB/s is what 128 x 256 kernels imply); with BN = 128 expect ~500-580 TFLOP/s at
//    4096^3 and 8192^3 (55-60% of the wgmma roof, 65-75% of cuBLAS);
//  - the BN = 256 build (48 KB stages, 128 accumulators, 4 stages) eases the feed by a third but keeps
//    the consumer-side stalls: maybe 550-650.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   tma_ring at 4096x4096x4096: 0.2887 ms, 476.0 TFLOP/s, 51.3% of wgmma, 0.65x cuBLAS bf16
//   tma_ring at 8192x8192x8192: 2.6020 ms, 422.6 TFLOP/s, 45.5% of wgmma, 0.67x cuBLAS bf16
//   tma_ring at 8192x28672x8192: 9.3331 ms, 412.3 TFLOP/s, 44.4% of wgmma, 0.64x cuBLAS bf16
//   tma_ring_bn256 at 4096x4096x4096: 0.2192 ms, 627.1 TFLOP/s, 67.5% of wgmma, 0.89x cuBLAS bf16
//   tma_ring_bn256 at 8192x8192x8192: 1.7991 ms, 611.2 TFLOP/s, 65.8% of wgmma, 0.96x cuBLAS bf16
//   tma_ring_bn256 at 8192x28672x8192: 7.9756 ms, 482.5 TFLOP/s, 52.0% of wgmma, 0.74x cuBLAS bf16
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
#include "common/launch_check.cuh"     // check_launch
#include "common/wgmma_epilogue.cuh"   // store_tile_direct

#ifndef BN
#define BN 128          // tile width: 128 or 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#define BM 128          // two warpgroups x 64 rows
#define BK 64
#define THREADS 256
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + 16 * STAGES)

extern "C" __global__ void __launch_bounds__(THREADS, (BN == 128 ? 2 : 1))
gemm_tma_ring(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
              bf16_t* __restrict__ C, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned full0 = base + STAGES * STAGE_BYTES, empty0 = full0 + 8 * STAGES;
    const unsigned long long d0 = desc_sw128(base);          // stage s: A at s*STAGE_BYTES, B after it

    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int KT = (K + BK - 1) / BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 2);                    // one arrival per consumer warpgroup
        }
        fence_barrier_init();
    }
    __syncthreads();
    if (tid == 0) {
        for (int s = 0; s < STAGES && s < KT; ++s) {
            const unsigned sA = base + s * STAGE_BYTES;
            mbar_arrive_expect_tx(full0 + 8 * s, STAGE_BYTES);
            tma_load_2d(sA, &tmA, full0 + 8 * s, s * BK, m0);
            tma_load_2d(sA + A_BYTES, &tmB, full0 + 8 * s, s * BK, n0);
        }
    }

    float acc[BN / 2];
    #pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

    int s = 0;
    unsigned ph = 0;
    for (int kt = 0; kt < KT; ++kt) {
        const unsigned full = full0 + 8 * s, empty = empty0 + 8 * s;
        mbar_wait(full, ph);
        const unsigned long long dA = d0 + ((s * STAGE_BYTES + wg * 64 * 128) >> 4);
        const unsigned long long dB = d0 + ((s * STAGE_BYTES + A_BYTES) >> 4);
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
            wgmma_tile<BN>(acc, dA + 2 * kk, dB + 2 * kk);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(acc);
        if ((tid & 127) == 0) mbar_arrive(empty);            // this warpgroup has read stage s
        if (tid == 0 && kt + STAGES < KT) {                  // refill stage s with slice kt + STAGES
            mbar_wait(empty, ph);
            const unsigned sA = base + s * STAGE_BYTES;
            mbar_arrive_expect_tx(full, STAGE_BYTES);
            tma_load_2d(sA, &tmA, full, (kt + STAGES) * BK, m0);
            tma_load_2d(sA + A_BYTES, &tmB, full, (kt + STAGES) * BK, n0);
        }
        if (++s == STAGES) { s = 0; ph ^= 1; }
    }
    store_tile_direct<BN>(acc, C, M, N, m0 + wg * 64, n0, tid & 127);
}

#define SCHEDULE 0    // one block per tile, 2D grid
#define OPERANDS 1    // tensor maps of A and B, C pointer
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

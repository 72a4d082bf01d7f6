// Chapter 07, version 4: warp specialisation: one producer warpgroup, two consumer warpgroups.
//
// Idea: give the loads their own warpgroup. Warpgroup 0 is the producer: one of its threads walks the
// K slices, waits for empty[s], arms full[s] with the stage's byte count and issues the two TMA copies;
// it never touches the data. Warpgroups 1 and 2 are consumers: wait full[s], four wgmmas, wait for them,
// one thread arrives on empty[s]. Neither side waits for the other except through the ring, so the
// consumers no longer stall on each other, and the producer runs up to STAGES slices ahead. The
// producer needs few registers and the consumers many: setmaxnreg hands them over (producer down to
// 40, consumers up to 232 per thread: 128 x 40 + 256 x 232 = 64,512 of the SM's 65,536), which pays
// for a 128 x 256 tile, m64n256k16 per consumer, 128 fp32 accumulators per thread.
//
// Prediction (H200, 132 SMs, wgmma roof ~950 TFLOP/s, L2 feed ~9-10 TB/s):
//  - shared memory per stage: A 128 x 64 (16 KB) + B 256 x 64 (32 KB) = 48 KB; 227 KB fit 4 stages
//    (192 KB + 1 KB alignment + barriers; 5 would need 240 KB); 1 block of 384 threads per SM;
//  - a K step is 2*128*256*64 = 4.19 MFLOP for 48 KB from L2: 8.2 TB/s at 700 TFLOP/s, within the feed;
//  - tiles: 4096^3 has 32 x 16 = 512 of them, 3.88 per SM (4 waves, the last 88% full: 97%); 8192^3 has
//    2048, 15.5 per SM (97%); each tile costs 37 us at the roof (4096) and its prologue (filling the
//    ring, ~1.5 us) and epilogue (64 KB of bf16 from registers, ~1-2 us) are not overlapped;
//  - expect ~620-700 TFLOP/s at 4096^3 and 8192^3: ~70% of the wgmma roof, 80-90% of cuBLAS.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   warp_specialized at 4096x4096x4096: 0.2222 ms, 618.5 TFLOP/s, 66.6% of wgmma, 0.89x cuBLAS bf16
//   warp_specialized at 8192x8192x8192: 1.7948 ms, 612.6 TFLOP/s, 66.0% of wgmma, 0.96x cuBLAS bf16
//   warp_specialized at 8192x28672x8192: 7.9813 ms, 482.2 TFLOP/s, 51.9% of wgmma, 0.74x cuBLAS bf16
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
#include "common/wgmma_epilogue.cuh"   // store_tile_direct

#ifndef BN
#define BN 256          // tile width: 128 or 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#define BM 128          // two consumer warpgroups x 64 rows
#define BK 64
#define CONSUMERS 2
#define THREADS (128 * (CONSUMERS + 1))
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + 16 * STAGES)

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_warp_specialized(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
                      bf16_t* __restrict__ C, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned full0 = base + STAGES * STAGE_BYTES, empty0 = full0 + 8 * STAGES;

    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {                                           // ---- producer warpgroup
        regs_dealloc<40>();
        if (t == 0) {
            int s = 0;
            unsigned ph = 0;
            for (int kt = 0; kt < KT; ++kt) {
                const unsigned full = full0 + 8 * s, sA = base + s * STAGE_BYTES;
                mbar_wait(empty0 + 8 * s, ph ^ 1);           // first round: passes at once
                mbar_arrive_expect_tx(full, STAGE_BYTES);
                tma_load_2d(sA, &tmA, full, kt * BK, m0);
                tma_load_2d(sA + A_BYTES, &tmB, full, kt * BK, n0);
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
        }
    } else {                                                 // ---- consumer warpgroups 1, 2
        regs_alloc<232>();
        const int c = wg - 1;
        const unsigned long long d0 = desc_sw128(base);
        float acc[BN / 2];
        #pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
        int s = 0;
        unsigned ph = 0;
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
            if (t == 0) mbar_arrive(empty0 + 8 * s);
            if (++s == STAGES) { s = 0; ph ^= 1; }
        }
        store_tile_direct<BN>(acc, C, M, N, m0 + c * 64, n0, t);
    }
}

#define SCHEDULE 0    // one block per tile, 2D grid
#define OPERANDS 1    // tensor maps of A and B, C pointer
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

// Chapter 07, version 2: TMA loads completing on an mbarrier, one stage.
//
// Idea: replace the 256 threads' loads, the swizzling arithmetic and the proxy fence of version 1 by
// the Tensor Memory Accelerator. The host encodes a tensor map per operand (cuTensorMapEncodeTiled:
// bf16, 2-D, box 64 x 128, 128-byte swizzle, zero fill out of bounds); one thread announces the bytes
// it expects on an mbarrier (arrive.expect_tx: 2 x 16 KB) and issues two cp.async.bulk.tensor copies
// whose completion is counted against that barrier; every thread waits on the barrier's phase parity
// (it flips once per K step), then the two warpgroups issue their wgmmas as before. The copy engine
// writes exactly the swizzled layout the wgmma descriptor reads, and no register holds the data on the
// way. Still one stage: the next slice is requested only after both warpgroups finished the last one.
//
// Prediction (H200, wgmma roof ~950 TFLOP/s, 7.2 TFLOP/s per SM):
//  - shared memory: A 16 KB + B 16 KB = 32 KB per stage, 1 stage (+1 KB alignment, 8 B barrier);
//    registers: 64 accumulators + ~25, capped at 128 by __launch_bounds__(256, 2): 2 blocks per SM;
//  - per K step a block waits one TMA round trip (~0.8-1 us under load) and then computes 0.29 us;
//    its twin on the SM fills part of that wait, so ~2 x 2.1 MFLOP per ~1.2 us per SM: ~3.4 TFLOP/s
//    per SM, i.e. about 350-450 TFLOP/s at 4096^3 and 8192^3 (the first TMA + wgmma GEMM measured on
//    this H200 reached 438-481): ~45% of the wgmma roof, 50-60% of cuBLAS.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   tma_wgmma at 4096x4096x4096: 0.2890 ms, 475.6 TFLOP/s, 51.2% of wgmma, 0.62x cuBLAS bf16
//   tma_wgmma at 8192x8192x8192: 2.4716 ms, 444.9 TFLOP/s, 47.9% of wgmma, 0.65x cuBLAS bf16
//   tma_wgmma at 8192x28672x8192: 10.0918 ms, 381.3 TFLOP/s, 41.1% of wgmma, 0.56x cuBLAS bf16
// contract: K % 8 == 0 and N % 8 == 0 (16-byte row strides for the tensor maps); M, N, K otherwise
//           arbitrary: TMA zero-fills boxes past the end (the byte count stays the full box), stores are masked.
// requires: sm_90a
// ------------------------------------------------------------------------------------------------
// PTX helpers. No CUDA header is needed: bf16 values travel as raw 16-bit patterns, a tensor map as
// its 128 opaque bytes.
#include "common/bf16_bits.cuh"        // bf16_t
#include "common/smem_addr.cuh"        // smem_u32
#include "common/wgmma.cuh"            // desc_sw128, wgmma_fence, wgmma_commit, wgmma_wait, fence_acc, wgmma_m64n128k16
#include "common/mbarrier.cuh"         // mbar_init, fence_barrier_init, mbar_arrive_expect_tx, mbar_wait
#include "common/hopper_tma.cuh"       // TmaDesc, tma_load_2d
#include "common/launch_check.cuh"     // check_launch
#include "common/wgmma_epilogue.cuh"   // store_tile_direct

template <int N> __device__ __forceinline__ void wgmma_tile(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    static_assert(N == 128, "this file instantiates m64n128k16 only");
    wgmma_m64n128k16(d, da, db);
}

#ifndef BN
#define BN 128          // tile width (m64n128k16)
#endif
#define BM 128          // two warpgroups x 64 rows
#define BK 64
#define THREADS 256
#define TILE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + TILE_BYTES + 8)

// tmA: A (M x K) box 64 x BM; tmB: B^T (N x K) box 64 x BN; both 128-byte swizzle.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
gemm_tma_wgmma(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
               bf16_t* __restrict__ C, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sA = base, sB = base + BM * BK * 2, full = base + TILE_BYTES;
    const unsigned long long dA = desc_sw128(sA), dB = desc_sw128(sB);

    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (tid == 0) {
        mbar_init(full, 1);                                  // one arrival (with the byte count) per phase
        fence_barrier_init();
    }
    __syncthreads();

    float acc[BN / 2];
    #pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

    const int KT = (K + BK - 1) / BK;
    for (int kt = 0; kt < KT; ++kt) {
        if (tid == 0) {
            mbar_arrive_expect_tx(full, TILE_BYTES);
            tma_load_2d(sA, &tmA, full, kt * BK, m0);
            tma_load_2d(sB, &tmB, full, kt * BK, n0);
        }
        mbar_wait(full, kt & 1);                             // phase kt completes when all bytes landed

        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
            wgmma_tile<BN>(acc, dA + ((wg * 64 * 128 + kk * 32) >> 4), dB + ((kk * 32) >> 4));
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(acc);
        __syncthreads();                                     // both warpgroups done: the tiles may be refilled
    }
    store_tile_direct<BN>(acc, C, M, N, m0 + wg * 64, n0, tid & 127);
}

#define SCHEDULE 0    // one block per tile, 2D grid
#define OPERANDS 1    // tensor maps of A and B, C pointer
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

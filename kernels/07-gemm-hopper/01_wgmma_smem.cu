// Chapter 07, version 1: wgmma from shared memory, tiles staged by ordinary loads.
//
//   C[M, N] = A[M, K] * B[N, K]^T     (bf16 in, fp32 accumulate, bf16 out; A and B both K-major, "TN")
//
// Idea: the smallest program that drives Hopper's warpgroup MMA. A block of 256 threads (two
// warpgroups) owns a 128 x 128 tile of C; warpgroup g owns rows 64g..64g+63 and keeps its 64 x 128
// fp32 accumulator in registers (64 per thread). For each 64-wide slice of K every thread copies
// 16-byte pieces of A (128 x 64) and B (128 x 64) from global memory into shared memory, already in
// the 128-byte-swizzle layout that the wgmma descriptor describes (chunk c of row r goes to chunk
// c ^ (r % 8)); `fence.proxy.async` makes those ordinary stores visible to the tensor cores' (async)
// proxy; after a barrier each warpgroup issues four wgmma.mma_async m64n128k16 (K = 4 x 16), commits
// them as one group and waits for it, and a second barrier frees the buffers for the next slice.
// Nothing overlaps: load latency, barriers and MMA follow one another.
//
// Prediction (H200, 132 SMs, wgmma roof measured 946-962 TFLOP/s = ~7.2 TFLOP/s per SM):
//  - shared memory: one stage, A 16 KB + B 16 KB = 32 KB (+1 KB to align the swizzle atoms); with
//    __launch_bounds__(256, 2) registers allow 2 blocks per SM (64 accumulators + 32 staging registers
//    + addresses per thread, under the 128 cap), which is what hides anything at all;
//  - one 64-wide K step is 2*128*128*64 = 2.1 MFLOP, 0.29 us at the per-SM roof, but it first waits
//    ~1 us for its 8 global loads per thread (L2 hits under load), then two __syncthreads();
//    two blocks per SM interleave, so roughly 2 steps per ~1.5 us per SM: ~2.8 TFLOP/s per SM;
//  - expect about 250-350 TFLOP/s at 4096^3 and 8192^3: ~30% of the wgmma roof, 35-45% of cuBLAS
//    (777 / 710-818 TFLOP/s there). The lesson is the layout, not the speed.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   wgmma_smem at 4096x4096x4096: 0.4094 ms, 335.7 TFLOP/s, 36.2% of wgmma, 0.43x cuBLAS bf16
//   wgmma_smem at 8192x8192x8192: 3.4390 ms, 319.7 TFLOP/s, 34.4% of wgmma, 0.43x cuBLAS bf16
//   wgmma_smem at 8192x28672x8192: 12.8756 ms, 298.9 TFLOP/s, 32.2% of wgmma, 0.40x cuBLAS bf16
// contract: K % 8 == 0 and N % 8 == 0 (16-byte rows); M, N, K otherwise arbitrary: rows and K past the
//           end load as zeros, stores are masked.
// requires: sm_90a
// ------------------------------------------------------------------------------------------------
// PTX helpers. No CUDA header is needed: bf16 values travel as raw 16-bit patterns, a tensor map as
// its 128 opaque bytes.
#include "common/bf16_bits.cuh"        // bf16_t
#include "common/smem_addr.cuh"        // smem_u32
#include "common/wgmma.cuh"            // desc_sw128, wgmma_fence, wgmma_commit, wgmma_wait, fence_acc, wgmma_m64n128k16
#include "common/launch_check.cuh"     // check_launch
#include "common/wgmma_epilogue.cuh"   // store_tile_direct

template <int N> __device__ __forceinline__ void wgmma_tile(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    static_assert(N == 128, "this file instantiates m64n128k16 only");
    wgmma_m64n128k16(d, da, db);
}

#ifndef BN
#define BN 128          // tile width: 128 (m64n128k16)
#endif
#define BM 128          // two warpgroups x 64 rows
#define BK 64           // one 128-byte swizzle row of bf16
#define THREADS 256
#define SMEM_BYTES (1024 + (BM + BN) * BK * 2)   // alignment slack + A tile + B tile

extern "C" __global__ void __launch_bounds__(THREADS, 2)
gemm_wgmma_smem(const bf16_t* __restrict__ A, const bf16_t* __restrict__ B, bf16_t* __restrict__ C,
                int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;          // swizzle atoms start on 1024-byte boundaries
    unsigned char* sA = smem_raw + (base - raw);
    unsigned char* sB = sA + BM * BK * 2;
    const unsigned long long dA = desc_sw128(base);
    const unsigned long long dB = desc_sw128(base + BM * BK * 2);

    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[BN / 2];
    #pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

    const int KT = (K + BK - 1) / BK;
    for (int kt = 0; kt < KT; ++kt) {
        const int k0 = kt * BK;
        // 16-byte chunk `id` of a tile: row id / 8, chunk id % 8; 8 threads read one 128-byte row.
        #pragma unroll
        for (int i = 0; i < BM * 8 / THREADS; ++i) {
            const int id = tid + i * THREADS, r = id >> 3, c = id & 7;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (m0 + r < M && k0 + 8 * c < K)
                v = *reinterpret_cast<const uint4*>(A + (long long)(m0 + r) * K + k0 + 8 * c);
            *reinterpret_cast<uint4*>(sA + r * 128 + ((c ^ (r & 7)) << 4)) = v;
        }
        #pragma unroll
        for (int i = 0; i < BN * 8 / THREADS; ++i) {
            const int id = tid + i * THREADS, r = id >> 3, c = id & 7;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (n0 + r < N && k0 + 8 * c < K)
                v = *reinterpret_cast<const uint4*>(B + (long long)(n0 + r) * K + k0 + 8 * c);
            *reinterpret_cast<uint4*>(sB + r * 128 + ((c ^ (r & 7)) << 4)) = v;
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // generic stores -> async proxy
        __syncthreads();

        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)                 // warpgroup wg reads A rows 64wg.. (8 KB in)
            wgmma_tile<BN>(acc, dA + ((wg * 64 * 128 + kk * 32) >> 4), dB + ((kk * 32) >> 4));
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(acc);
        __syncthreads();                                     // both warpgroups are done with the tiles
    }
    store_tile_direct<BN>(acc, C, M, N, m0 + wg * 64, n0, tid & 127);
}

#define SCHEDULE 0    // one block per tile, 2D grid
#define OPERANDS 0    // A, B, C pointers
#include "common/hopper_launch_config.cuh"   // launch_config: this build's geometry, for the host

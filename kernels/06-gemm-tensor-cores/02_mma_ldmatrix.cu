// Chapter 06, version 2: mma.sync m16n8k16 and ldmatrix, written out: the fragments become visible.
//
// Idea: the same block (128x128x32 tiles, 8 warps of 64x32, padded shared tiles, register-staged loads,
// one buffer) as 01_wmma.cu, with the two instructions WMMA hides issued directly in PTX:
//  - ldmatrix.sync.aligned.m8n8.x4.shared.b16: each lane gives the address of one 16-byte row, the
//    warp receives four 8x8 bf16 matrices, each thread holding 2 adjacent elements of each: exactly
//    the A fragment of m16n8k16 (a 16x16 row-major tile) in one instruction. B is stored k-major
//    (rows of B are 16-byte rows of n), so its fragment (16x8, "col": pairs along k) needs the
//    transposed load, ldmatrix ... .trans: one x4.trans gives the B fragments of two n8 tiles.
//  - mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D(16x8) += A(16x16) B(16x8), fp32; a warp's
//    64x32 tile is 4 x 4 of them per k16-step (16 mma's for 4 + 2 ldmatrix.x4).
// The accumulator layout is now known (thread (g, t) = (lane/4, lane%4) holds rows g and g+8, columns
// 2t and 2t+1 of each n8 tile), so the epilogue converts and stores straight from registers (bf16x2).
// Nothing else changes: this rung is the control for the next ones, which need the layout (swizzles,
// fragments reloaded in place).
// Shapes: any M and N, K a multiple of 8; gemm_mma_ldmatrix needs N % 8 == 0, gemm_mma_ldmatrix_anyn takes
// any N.
// contract: K % 8 == 0, pointers 16-byte aligned
// Launch: grid (ceil(N/BN), ceil(M/BM)), block 256 threads, dynamic shared memory 18,944 bytes.
//
// Prediction: the SASS of 01_wmma.cu already is ldmatrix + HMMA.16816 (ptxas' output for the WMMA
// build, checked with nvdisasm), so the instruction stream is the same up to scheduling and the
// epilogue: ~120 registers, 2 blocks per SM, the same exposed load latency. Expect 01's speed within
// +-10%: ~220 TFLOP/s at 4096^3 and 8192^3, ~35% of the mma.sync roof, ~28% of cuBLAS.
// (The premise was wrong: the WMMA build loads its fragments with 32-bit LDS and MOVM, not ldmatrix,
// as cuobjdump of 01 shows; the difference this rung measures is ldmatrix's.)
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   mma_ldmatrix at 4096x4096x4096: 0.6696 ms, 205.3 TFLOP/s, 32.6% of mma, 0.27x cuBLAS bf16
//   mma_ldmatrix at 8192x8192x8192: 5.0789 ms, 216.5 TFLOP/s, 34.3% of mma, 0.27x cuBLAS bf16
#include <cuda_bf16.h>

#ifndef ANYN_ENTRY
#define ANYN_ENTRY 1                     // 0: build only the N % 8 == 0 entry point (faster compile)
#endif
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 32
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2                     // blocks per SM the register budget is sized for
#endif

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define NTHREADS (WARPS_M * WARPS_N * 32)
#define MI (WM / 16)                     // m16 tiles per warp
#define NI (WN / 8)                      // n8 tiles per warp
#define KSTEPS (BK / 16)                 // k16 steps per k-tile
#define A_CHUNKS (BK / 8)                // 16-byte chunks per row of the A tile
#define B_CHUNKS (BN / 8)                // 16-byte chunks per row of the B tile
#define A_LD (BK + 8)                    // rows padded by 16 bytes: 8 rows at one column fall in 8 bank groups
#define B_LD (BN + 8)
#define A_STAGE_BYTES (BM * A_LD * 2)
#define B_STAGE_BYTES (BK * B_LD * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define SMEM_BYTES STAGE_BYTES
#define A_LOADS (BM * A_CHUNKS / NTHREADS) // 16-byte loads per thread per k-tile
#define B_LOADS (BK * B_CHUNKS / NTHREADS)
#define A_ROW_STEP (NTHREADS / A_CHUNKS)
#define B_ROW_STEP (NTHREADS / B_CHUNKS)

static_assert(BM % WM == 0 && BN % WN == 0, "block tile must be a whole number of warp tiles");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: multiples of 16 (ldmatrix.x4 loads 16x16)");
static_assert(BK % 16 == 0, "BK: a multiple of 16");
static_assert(NTHREADS % A_CHUNKS == 0 && NTHREADS % B_CHUNKS == 0, "loader mapping");
static_assert((BM * A_CHUNKS) % NTHREADS == 0 && (BK * B_CHUNKS) % NTHREADS == 0, "loader mapping");
static_assert(B_CHUNKS >= 8, "B tile rows of at least 128 bytes");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

typedef __nv_bfloat16 bf16;

#include "common/smem_addr.cuh"      // smem_u32
#include "common/mma_sm80.cuh"       // ldmatrix_x4, ldmatrix_x4_trans, mma_bf16
#include "common/mma_epilogue.cuh"   // store_acc_direct

// One k-tile through registers: every 16-byte chunk this thread copies is loaded from global memory
// into registers first (all loads in flight together), then stored to shared memory. Chunks outside the
// matrix are zeros. !VEC_N (N % 8 != 0): B rows are not 16-byte aligned, so B is read element by element.
template <bool VEC_N>
__device__ __forceinline__ void load_tile(const bf16* __restrict__ A, const bf16* __restrict__ B, int M, int N,
                                          int K, int m0, int n0, int k0, unsigned char* sA, unsigned char* sB,
                                          int tid)
{
    const int a_r = tid / A_CHUNKS, a_c = tid % A_CHUNKS;
    const int b_r = tid / B_CHUNKS, b_c = tid % B_CHUNKS;
    uint4 va[A_LOADS], vb[B_LOADS];
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
        const int m = m0 + a_r + i * A_ROW_STEP, k = k0 + a_c * 8;
        va[i] = (m < M && k < K) ? *reinterpret_cast<const uint4*>(A + (size_t)m * K + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
        const int k = k0 + b_r + i * B_ROW_STEP, n = n0 + b_c * 8;
        if (VEC_N) {
            vb[i] = (k < K && n < N) ? *reinterpret_cast<const uint4*>(B + (size_t)k * N + n) : make_uint4(0, 0, 0, 0);
        } else {
            const unsigned short* row = reinterpret_cast<const unsigned short*>(B) + (size_t)k * N;
            unsigned v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const unsigned e0 = (k < K && n + 2 * j < N) ? row[n + 2 * j] : 0u;
                const unsigned e1 = (k < K && n + 2 * j + 1 < N) ? row[n + 2 * j + 1] : 0u;
                v[j] = e0 | (e1 << 16);
            }
            vb[i] = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
        *reinterpret_cast<uint4*>(sA + (a_r + i * A_ROW_STEP) * (A_LD * 2) + a_c * 16) = va[i];
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
        *reinterpret_cast<uint4*>(sB + (b_r + i * B_ROW_STEP) * (B_LD * 2) + b_c * 16) = vb[i];
    }
}

template <bool VEC_N>
__device__ __forceinline__ void gemm_body(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                          bf16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const unsigned s_base = smem_u32(smem);
    const int ktiles = (K + BK - 1) / BK;

    // ldmatrix addresses (bytes). A: lanes 0-15 give rows 0-15 of the warp's m16 tile at k-chunk 0, lanes
    // 16-31 the same rows at k-chunk 1; the four 8x8 matrices land as a0a1, a2a3, a4a5, a6a7 of the
    // m16n8k16 A fragment. B (.trans, tile stored k-major): lanes 0-15 give k rows 0-15 at n-chunk 0,
    // lanes 16-31 at n-chunk 1: b0b1 and b2b3 of two n8 tiles.
    const int a_row = warp_m * WM + (lane & 15);
    const int b_row = lane & 15;
    unsigned a_off[KSTEPS], b_off[NI / 2];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        a_off[kk] = a_row * (A_LD * 2) + (kk * 2 + (lane >> 4)) * 16;
    }
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
        const int c = warp_n * (WN / 8) + nj * 2 + (lane >> 4);
        b_off[nj] = A_STAGE_BYTES + b_row * (B_LD * 2) + c * 16;
    }

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    // One slot: load k-tile kt (registers -> shared), barrier, compute it, barrier (every warp is done
    // with the slot before it is overwritten). The loads' latency is exposed once per k-tile.
    for (int kt = 0; kt < ktiles; ++kt) {
        load_tile<VEC_N>(A, B, M, N, K, m0, n0, kt * BK, smem, smem + A_STAGE_BYTES, tid);
        __syncthreads();
        const unsigned rs = s_base;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            unsigned af[MI][4], bfr[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                ldmatrix_x4(af[mi], rs + a_off[kk] + mi * 16 * (A_LD * 2));
            }
#pragma unroll
            for (int nj = 0; nj < NI / 2; ++nj) {
                ldmatrix_x4_trans(bfr[2 * nj][0], bfr[2 * nj][1], bfr[2 * nj + 1][0], bfr[2 * nj + 1][1],
                                  rs + b_off[nj] + kk * 16 * (B_LD * 2));
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < NI; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
        }
        __syncthreads();
    }

    // Epilogue: straight from registers (common/mma_epilogue.cuh).
    store_acc_direct<VEC_N>(C, M, N, m0 + warp_m * WM, n0 + warp_n * WN, acc, lane);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_mma_ldmatrix(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_body<true>(A, B, C, M, N, K);
}

#if ANYN_ENTRY
extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_mma_ldmatrix_anyn(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N,
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
    out[8] = 1;
    out[9] = 0;
    out[10] = 1;
}

// Chapter 06, version 1: tensor cores through WMMA fragments, tiles staged in shared memory by plain loads.
//
// Idea: chapter 05's SIMT kernels live under the fp32 FMA roof (67 TFLOP/s on an H200); the tensor cores
// multiply bf16 tiles an order of magnitude faster. The smallest step onto them is the WMMA interface:
// a warp owns opaque 16x16x16 fragments, loads them from shared memory (load_matrix_sync), multiplies
// (mma_sync, fp32 accumulate) and stores them (store_matrix_sync). The block structure is chapter 05's:
// a 128x128 tile of C per block of 8 warps (2 x 4), each warp a 64x32 sub-tile (4 x 2 fragments); K is
// walked in 32-wide k-tiles: all 256 threads copy the A (128x32) and B (32x128) tiles global ->
// registers -> shared memory in 16-byte vectors, one barrier, 2 k16-steps of fragment loads and
// mma's, another barrier. Shared rows are padded by 16 bytes (80- and 272-byte rows) so that the 8 rows
// a fragment load reads at one column sit in 8 different bank groups. The accumulator layout of a
// fragment is unspecified, so the epilogue stores each 16x16 fp32 fragment to a per-warp scratch tile
// and converts from there. (nvcuda::wmma is used where its header is available, else the same wmma
// PTX instructions it compiles to; ptxas turns both into HMMA.16816, two per 16x16x16, and loads the
// fragments with 32-bit LDS, transposing B with MOVM: no ldmatrix (cuobjdump of the sm_90 build).)
// Shapes: any M and N (tails zero-filled on load, stores predicated), K a multiple of 8 (a 16-byte chunk
// of a row is all in or all out of the matrix). gemm_wmma needs N % 8 == 0; gemm_wmma_anyn takes any N
// (B and C element by element).
// contract: K % 8 == 0, pointers 16-byte aligned
// Launch: grid (ceil(N/BN), ceil(M/BM)), block 256 threads, static shared memory 29,184 bytes.
//
// Prediction (4096^3 and 8192^3): 1.37e11 / 1.10e12 FLOPs, floors 0.22 / 1.75 ms at the mma.sync roof
// (630 TFLOP/s). L2 -> SM: 16 KB per k-tile for 1.05 MFLOP, 64 FLOP/B (3.4 TB/s at 220 TFLOP/s); DRAM
// 0.10 / 0.40 GB at least, not a limit. 128 registers, 29 KB shared: 2 blocks (16 warps) per SM. What
// limits it is latency, exposed every k-tile: a block's loads (~700 cycles from L2 under load) wait for
// the barrier, then its 435 cycles of tensor work (at the roof, 1.05 MFLOP at 2410 FLOP/clk/SM) wait
// for ldmatrix results with nothing prefetched; the second block fills part of the gap. Expect ~35% of
// the mma.sync roof: ~220 TFLOP/s at both sizes (range 150-280), ~28% of cuBLAS bf16 (780 TFLOP/s).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "gemm_bf16"):
//   wmma at 4096x4096x4096: 0.7652 ms, 179.6 TFLOP/s, 28.5% of mma, 0.23x cuBLAS bf16
//   wmma at 8192x8192x8192: 6.1432 ms, 179.0 TFLOP/s, 28.4% of mma, 0.23x cuBLAS bf16
#include <cuda_bf16.h>
#if __has_include(<crt/mma.h>)           // nvcuda::wmma's header needs crt/mma.h (a full toolkit, or the
#define HAVE_WMMA_API 1                  // nvidia-cuda-crt wheel); without it the same wmma instructions
#include <mma.h>                         // are issued as inline PTX below. Same fragments, same code.
#else
#define HAVE_WMMA_API 0
#endif

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
#define FM (WM / 16)                     // 16x16 fragments per warp, down
#define FN (WN / 16)                     // and across
#define A_CHUNKS (BK / 8)                // 16-byte chunks per row of the A tile
#define B_CHUNKS (BN / 8)
#define A_LD (BK + 8)                    // rows padded by 16 bytes (and ldm a multiple of 8, as wmma needs)
#define B_LD (BN + 8)
#define A_LOADS (BM * A_CHUNKS / NTHREADS) // 16-byte loads per thread per k-tile
#define B_LOADS (BK * B_CHUNKS / NTHREADS)
#define A_ROW_STEP (NTHREADS / A_CHUNKS)
#define B_ROW_STEP (NTHREADS / B_CHUNKS)
#define SCRATCH_LD 20                    // floats per row of a warp's 16x16 fp32 scratch tile

static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "tile shapes");
static_assert(NTHREADS % A_CHUNKS == 0 && NTHREADS % B_CHUNKS == 0, "loader mapping");
static_assert((BM * A_CHUNKS) % NTHREADS == 0 && (BK * B_CHUNKS) % NTHREADS == 0, "loader mapping");
static_assert((BM * A_LD + BK * B_LD) * 2 + NTHREADS / 32 * 16 * SCRATCH_LD * 4 <= 48 * 1024, "static smem");

typedef __nv_bfloat16 bf16;

// Four fragment operations, as nvcuda::wmma names them. A fragment's element-to-thread layout is
// unspecified (opaque): it can only be loaded, multiplied and stored.
#if HAVE_WMMA_API
using namespace nvcuda;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;
__device__ __forceinline__ void frag_zero(FragC& c) { wmma::fill_fragment(c, 0.f); }
__device__ __forceinline__ void load_a(FragA& a, const bf16* p, int ld) { wmma::load_matrix_sync(a, p, ld); }
__device__ __forceinline__ void load_b(FragB& b, const bf16* p, int ld) { wmma::load_matrix_sync(b, p, ld); }
__device__ __forceinline__ void frag_mma(FragC& c, const FragA& a, const FragB& b) { wmma::mma_sync(c, a, b, c); }
__device__ __forceinline__ void store_c(float* p, const FragC& c, int ld)
{
    wmma::store_matrix_sync(p, c, ld, wmma::mem_row_major);
}
#else
struct FragA { unsigned x[4]; };          // 16x16 bf16: 8 elements per thread, as 4 bf16 pairs
struct FragB { unsigned x[4]; };
struct FragC { float x[8]; };             // 16x16 fp32: 8 elements per thread
__device__ __forceinline__ void frag_zero(FragC& c)
{
#pragma unroll
    for (int i = 0; i < 8; ++i) c.x[i] = 0.f;
}
__device__ __forceinline__ void load_a(FragA& a, const bf16* p, int ld)
{
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(a.x[0]), "=r"(a.x[1]), "=r"(a.x[2]), "=r"(a.x[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(ld) : "memory");
}
__device__ __forceinline__ void load_b(FragB& b, const bf16* p, int ld)
{
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(b.x[0]), "=r"(b.x[1]), "=r"(b.x[2]), "=r"(b.x[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(ld) : "memory");
}
__device__ __forceinline__ void frag_mma(FragC& c, const FragA& a, const FragB& b)
{
    asm("wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, {%12, %13, %14, %15}, "
        "{%0, %1, %2, %3, %4, %5, %6, %7};\n"
        : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3]), "+f"(c.x[4]), "+f"(c.x[5]), "+f"(c.x[6]),
          "+f"(c.x[7])
        : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]), "r"(b.x[2]), "r"(b.x[3]));
}
__device__ __forceinline__ void store_c(float* p, const FragC& c, int ld)
{
    asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.shared.f32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8}, %9;\n"
                 ::"r"((unsigned)__cvta_generic_to_shared(p)), "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]),
                   "f"(c.x[4]), "f"(c.x[5]), "f"(c.x[6]), "f"(c.x[7]), "r"(ld) : "memory");
}
#endif

template <bool VEC_N>
__device__ __forceinline__ void gemm_body(const bf16* __restrict__ A, const bf16* __restrict__ B,
                                          bf16* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(32) bf16 sA[BM * A_LD];
    __shared__ __align__(32) bf16 sB[BK * B_LD];
    __shared__ __align__(32) float scratch[NTHREADS / 32][16 * SCRATCH_LD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int a_r = tid / A_CHUNKS, a_c = tid % A_CHUNKS;
    const int b_r = tid / B_CHUNKS, b_c = tid % B_CHUNKS;

    FragC acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) frag_zero(acc[i][j]);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Global -> registers -> shared, 16 bytes per load; chunks outside the matrix are zeros.
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
                vb[i] = (k < K && n < N) ? *reinterpret_cast<const uint4*>(B + (size_t)k * N + n)
                                         : make_uint4(0, 0, 0, 0);
            } else {   // N % 8 != 0: rows of B are not 16-byte aligned, read element by element
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
            *reinterpret_cast<uint4*>(sA + (a_r + i * A_ROW_STEP) * A_LD + a_c * 8) = va[i];
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            *reinterpret_cast<uint4*>(sB + (b_r + i * B_ROW_STEP) * B_LD + b_c * 8) = vb[i];
        }
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            FragA fa[FM];
            FragB fb[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i) {
                load_a(fa[i], sA + (warp_m * WM + i * 16) * A_LD + kk, A_LD);
            }
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                load_b(fb[j], sB + kk * B_LD + warp_n * WN + j * 16, B_LD);
            }
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) frag_mma(acc[i][j], fa[i], fb[j]);
        }
        __syncthreads();
    }

    // Epilogue: the accumulator layout of a wmma fragment is unspecified, so each 16x16 fp32 tile goes
    // through the warp's scratch tile; each lane then converts and stores 8 elements of one row.
    float* s = scratch[warp];
    const int r = lane >> 1, c = (lane & 1) * 8;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            store_c(s, acc[i][j], SCRATCH_LD);
            __syncwarp();
            const int m = m0 + warp_m * WM + i * 16 + r, n = n0 + warp_n * WN + j * 16 + c;
            if (m < M) {
                if (VEC_N && n < N) {
                    __nv_bfloat162 h[4];
#pragma unroll
                    for (int q = 0; q < 4; ++q) h[q] = __floats2bfloat162_rn(s[r * SCRATCH_LD + c + 2 * q],
                                                                             s[r * SCRATCH_LD + c + 2 * q + 1]);
                    *reinterpret_cast<uint4*>(C + (size_t)m * N + n) = *reinterpret_cast<const uint4*>(h);
                } else if (!VEC_N) {
#pragma unroll
                    for (int q = 0; q < 8; ++q) {
                        if (n + q < N) C[(size_t)m * N + n + q] = __float2bfloat16_rn(s[r * SCRATCH_LD + c + q]);
                    }
                }
            }
            __syncwarp();
        }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_wmma(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_body<true>(A, B, C, M, N, K);
}

#if ANYN_ENTRY
extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_wmma_anyn(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
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
    out[3] = 0;
    out[4] = 0;
    out[5] = BK;
    out[6] = WM;
    out[7] = WN;
    out[8] = 1;
    out[9] = 0;
    out[10] = 1;
}

// Chapter 06, version 4: XOR-swizzled shared tiles instead of padded rows.
//
// Idea: 03_cp_async.cu pads each shared row by 16 bytes so that the 8 rows one ldmatrix matrix reads
// (8 rows x 16 bytes at one column) start in 8 different 16-byte bank groups. Padding costs 25% of the
// A tile (80-byte rows for 64 bytes of data), breaks the power-of-two tile size, and does not fully
// help the cp.async stores: 8 consecutive threads write rows 0 and 1 of A (chunks 0-3 at offsets 0-48
// and 80-128), and the chunk at 128 shares a bank group with the one at 0 (a 2-way conflict in half
// the store phases). The swizzle keeps rows dense and permutes the 16-byte chunks of each row instead:
// chunk c of row r is stored at chunk c ^ (r % 8) for rows of 128 bytes or more (the B tile) and at
// c ^ ((r / 2) % 4) for 64-byte rows (the A tile with BK = 32, two rows per 128-byte line). Any 8 rows at
// one logical chunk, and any 8 consecutive chunks of a row, land in 8 distinct bank groups (checked
// exhaustively for every tile shape of this chapter by a Python model of the address maps, reads
// and writes alike). The XOR depends on the row only through lane bits, so each lane's ldmatrix
// addresses are computed once, before the main loop.
// SWIZZLE=1 (default) or 0 (03's padding), otherwise identical to 03 (STAGES 1 or 2, default 2).
// Shapes: any M and N, K a multiple of 8; gemm_swizzle needs N % 8 == 0, gemm_swizzle_anyn takes any N.
// contract: K % 8 == 0, pointers 16-byte aligned
// Launch: grid (ceil(N/BN), ceil(M/BM)), block 256 threads, dynamic shared memory STAGES x 16,384 bytes
// (swizzled) or STAGES x 18,944 (padded).
//
// Prediction: ldmatrix was already conflict-free with padding, so the change is the 2-way store
// conflicts (a few % of shared-memory cycles) and 14% less shared memory per stage (not yet a limit
// at 2 blocks per SM). Expect 03 (STAGES=2) within +-5%: ~300-315 TFLOP/s, ~48-50% of the mma.sync
// roof. Its real value is what it makes room for: power-of-two tiles, deeper rings (05) and bigger tiles
// (06) in the same shared memory.
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
#ifndef STAGES
#define STAGES 2                         // 1 or 2
#endif
#ifndef SWIZZLE
#define SWIZZLE 1
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
#if SWIZZLE
#define A_LD BK                          // row length in elements
#define B_LD BN
#else
#define A_LD (BK + 8)                    // padded by 16 bytes: 8 consecutive rows, 8 bank groups
#define B_LD (BN + 8)
#endif
#define A_STAGE_BYTES (BM * A_LD * 2)
#define B_STAGE_BYTES (BK * B_LD * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define SMEM_BYTES (STAGES * STAGE_BYTES)
#define A_LOADS (BM * A_CHUNKS / NTHREADS) // cp.asyncs per thread per k-tile
#define B_LOADS (BK * B_CHUNKS / NTHREADS)
#define A_ROW_STEP (NTHREADS / A_CHUNKS)
#define B_ROW_STEP (NTHREADS / B_CHUNKS)

static_assert(BM % WM == 0 && BN % WN == 0, "block tile must be a whole number of warp tiles");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: multiples of 16 (ldmatrix.x4 loads 16x16)");
static_assert(BK % 16 == 0, "BK: a multiple of 16");
static_assert(STAGES == 1 || STAGES == 2, "STAGES: 1 or 2");
static_assert(NTHREADS % A_CHUNKS == 0 && NTHREADS % B_CHUNKS == 0, "loader mapping");
static_assert((BM * A_CHUNKS) % NTHREADS == 0 && (BK * B_CHUNKS) % NTHREADS == 0, "loader mapping");
static_assert(SWIZZLE == 0 || A_CHUNKS == 4 || A_CHUNKS >= 8, "swizzle: A rows of 64 or >= 128 bytes");
static_assert(B_CHUNKS >= 8, "B tile rows of at least 128 bytes");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

typedef __nv_bfloat16 bf16;

// Where 16-byte chunk c of row r of a tile whose rows hold `chunks` chunks lands. Unswizzled: chunk c.
// Swizzled: the chunk index is XORed with bits of the row so that the 8 rows an ldmatrix reads at one
// logical chunk (and the 8 chunks a quarter-warp of cp.asyncs writes) fall in 8 different 16-byte bank
// groups. 128-byte or longer rows: c ^ (r % 8). 64-byte rows (two per 128-byte line): c ^ ((r / 2) % 4).
__device__ __forceinline__ int swz(int r, int c, int chunks)
{
#if SWIZZLE
    return chunks >= 8 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
#else
    return c;
#endif
}

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes)
{
    // src_bytes = 0: nothing is read, the 16 bytes at dst are zero-filled.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                                  unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}

// D += A * B for one m16n8k16 tile: A 16x16 row-major (4 regs), B 16x8 "col" (2 regs), D fp32 (4 regs).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One k-tile's worth of global -> shared copies, load indices [lo, hi) of this thread's A_LOADS + B_LOADS.
// VEC_N: 16-byte cp.async with zero-fill. !VEC_N (N % 8 != 0): B rows are not 16-byte aligned, so B is
// read one element at a time and stored with a plain 16-byte st.shared (synchronous, same slot rules).
// lo and hi are compile-time constants after unrolling, so the selection costs nothing.
template <bool VEC_N>
__device__ __forceinline__ void load_tile(const bf16* __restrict__ A, const bf16* __restrict__ B, int M, int N,
                                          int K, int m0, int n0, int k0, unsigned sA, unsigned sB,
                                          unsigned char* sB_ptr, int tid, int lo, int hi)
{
    const int a_r = tid / A_CHUNKS, a_c = tid % A_CHUNKS;
    const int b_r = tid / B_CHUNKS, b_c = tid % B_CHUNKS;
#pragma unroll
    for (int i = 0; i < A_LOADS + B_LOADS; ++i) {
        if (i < lo || i >= hi) continue;
        if (i < A_LOADS) {
            const int r = a_r + i * A_ROW_STEP;
            const int m = m0 + r, k = k0 + a_c * 8;
            const bool ok = m < M && k < K;
            const bf16* src = ok ? A + (size_t)m * K + k : A;
            cp_async16(sA + r * (A_LD * 2) + swz(r, a_c, A_CHUNKS) * 16, src, ok ? 16 : 0);
        } else {
            const int r = b_r + (i - A_LOADS) * B_ROW_STEP;
            const int k = k0 + r, n = n0 + b_c * 8;
            const int off = r * (B_LD * 2) + swz(r, b_c, B_CHUNKS) * 16;
            if (VEC_N) {
                const bool ok = k < K && n < N;
                const bf16* src = ok ? B + (size_t)k * N + n : B;
                cp_async16(sB + off, src, ok ? 16 : 0);
            } else {
                const unsigned short* row = reinterpret_cast<const unsigned short*>(B) + (size_t)k * N;
                unsigned v[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const unsigned e0 = (k < K && n + 2 * j < N) ? row[n + 2 * j] : 0u;
                    const unsigned e1 = (k < K && n + 2 * j + 1 < N) ? row[n + 2 * j + 1] : 0u;
                    v[j] = e0 | (e1 << 16);
                }
                *reinterpret_cast<uint4*>(sB_ptr + off) = make_uint4(v[0], v[1], v[2], v[3]);
            }
        }
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

    // ldmatrix addresses within a slot (02_mma_ldmatrix.cu explains the lane -> fragment map).
    const int a_row = warp_m * WM + (lane & 15);
    const int b_row = lane & 15;
    unsigned a_off[KSTEPS], b_off[NI / 2];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        a_off[kk] = a_row * (A_LD * 2) + swz(a_row, kk * 2 + (lane >> 4), A_CHUNKS) * 16;
    }
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
        const int c = warp_n * (WN / 8) + nj * 2 + (lane >> 4);
        b_off[nj] = A_STAGE_BYTES + b_row * (B_LD * 2) + swz(b_row, c, B_CHUNKS) * 16;
    }

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    // STAGES 1: copy k-tile kt, wait for it, compute it; nothing overlaps within the block.
    // STAGES 2: k-tile kt+1 is copied into the other slot while k-tile kt is computed. Two barriers per
    // k-tile: one before reading the slot (its copies landed for every thread), one after (every warp
    // is done with it before it is refilled).
#if STAGES == 2
    load_tile<VEC_N>(A, B, M, N, K, m0, n0, 0, s_base, s_base + A_STAGE_BYTES, smem + A_STAGE_BYTES, tid, 0,
                     A_LOADS + B_LOADS);
    cp_async_commit();
#endif
    for (int kt = 0; kt < ktiles; ++kt) {
#if STAGES == 2
        if (kt + 1 < ktiles) {
            const int ws = ((kt + 1) & 1) * STAGE_BYTES;
            load_tile<VEC_N>(A, B, M, N, K, m0, n0, (kt + 1) * BK, s_base + ws, s_base + ws + A_STAGE_BYTES,
                             smem + ws + A_STAGE_BYTES, tid, 0, A_LOADS + B_LOADS);
        }
        cp_async_commit();
        cp_async_wait<1>();              // all but the newest group done: k-tile kt has landed
        const unsigned rs = s_base + (kt & 1) * STAGE_BYTES;
#else
        load_tile<VEC_N>(A, B, M, N, K, m0, n0, kt * BK, s_base, s_base + A_STAGE_BYTES, smem + A_STAGE_BYTES,
                         tid, 0, A_LOADS + B_LOADS);
        cp_async_commit();
        cp_async_wait<0>();
        const unsigned rs = s_base;
#endif
        __syncthreads();
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
    cp_async_wait<0>();

    // Epilogue: each thread stores its accumulators straight from registers, two adjacent columns
    // (one bf16x2) per row and n8 tile: a warp store covers 8 rows x 16 bytes.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int m = m0 + warp_m * WM + mi * 16 + g + half * 8;
            if (m >= M) continue;
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int n = n0 + warp_n * WN + ni * 8 + 2 * t;
                const float v0 = acc[mi][ni][2 * half], v1 = acc[mi][ni][2 * half + 1];
                if (VEC_N) {
                    if (n < N) {
                        *reinterpret_cast<__nv_bfloat162*>(C + (size_t)m * N + n) = __floats2bfloat162_rn(v0, v1);
                    }
                } else {
                    if (n < N) C[(size_t)m * N + n] = __float2bfloat16_rn(v0);
                    if (n + 1 < N) C[(size_t)m * N + n + 1] = __float2bfloat16_rn(v1);
                }
            }
        }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_swizzle(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    gemm_body<true>(A, B, C, M, N, K);
}

#if ANYN_ENTRY
extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
gemm_swizzle_anyn(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N,
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
    out[8] = STAGES;
    out[9] = SWIZZLE;
    out[10] = 1;
}

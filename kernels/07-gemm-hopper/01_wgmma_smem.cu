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
// contract: K % 8 == 0 and N % 8 == 0 (16-byte rows); M, N, K otherwise arbitrary: rows and K past the
//           end load as zeros, stores are masked.
// requires: sm_90a
// ------------------------------------------------------------------------------------------------
// PTX helpers. No CUDA header is needed: bf16 values travel as raw 16-bit patterns, a tensor map as
// its 128 opaque bytes.
typedef unsigned short bf16_t;                               // one bf16, as its bit pattern
struct alignas(64) TmaDesc { unsigned long long w[16]; };    // a CUtensorMap made on the host

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Two fp32 -> one bf16x2 word, round to nearest even; `lo` lands at the lower address.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Shared-memory matrix descriptor of wgmma for a K-major tile in the 128-byte swizzle layout: row r
// (64 bf16 = 128 B) at byte r*128, its 16-byte chunk c stored at chunk c ^ (r % 8); groups of 8 rows
// (1024-byte swizzle atoms) follow one another. Fields: bits 0-13 start address >> 4; 16-29 leading
// byte offset >> 4 (unused by a swizzled K-major operand: 1); 32-45 stride byte offset >> 4 (1024 B
// from one 8-row group to the next); 62-63 swizzle mode (1 = 128 B). The swizzle is a function of the
// address bits, so the tile must start on a 1024-byte boundary, and the k-th 16-wide K slice of the
// 64-wide tile is addressed by adding 32*k bytes to the start address (+2*k to the descriptor).
__device__ __forceinline__ unsigned long long desc_sw128(unsigned saddr) {
    return (unsigned long long)((saddr & 0x3FFFFu) >> 4) | (1ull << 16)
         | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence()  { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(PENDING) : "memory");
}
// Pins the accumulators at this point of the program, so the compiler neither reads them before the
// wgmma that writes them has been waited for nor writes them while one is in flight.
template <int R> __device__ __forceinline__ void fence_acc(float (&d)[R]) {
    #pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
// One wgmma m64nNk16: D(64xN, fp32, registers of the warpgroup) += A(64x16) * B(16xN), both operands
// read by the tensor cores from shared memory through their descriptors (K-major: no transpose).
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, 1, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}
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
// A launch whose dynamic shared memory or block size disagrees with this build traps at once (the
// host computes both from the same macros; a mismatch would otherwise corrupt or hang silently).
__device__ __forceinline__ void check_launch(unsigned smem_needed, unsigned threads) {
    unsigned dyn;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < smem_needed || blockDim.x != threads) __trap();
}
// Epilogue straight from registers. wgmma's fp32 accumulator layout (m64nN): warp w of the warpgroup
// holds rows 16w..16w+15; lane l holds rows 16w + l/4 and 16w + l/4 + 8 and, in every 8-column group j,
// columns 8j + 2(l%4) and 8j + 2(l%4) + 1: d[4j], d[4j+1] in the first row, d[4j+2], d[4j+3] in the
// second. Each thread writes bf16 pairs (4 bytes); rows past M and columns past N are skipped.
template <int TN>
__device__ __forceinline__ void store_tile_direct(const float (&d)[TN / 2], bf16_t* C, int M, int N,
                                                  int row0, int col0, int t128) {
    const int warp = t128 >> 5, lane = t128 & 31;
    const int r = row0 + warp * 16 + (lane >> 2);
    const int cb = col0 + 2 * (lane & 3);
    #pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
        const int c = cb + 8 * j;
        if (c < N) {
            if (r < M)     *reinterpret_cast<unsigned*>(C + (long long)r * N + c)       = pack_bf16x2(d[4 * j],     d[4 * j + 1]);
            if (r + 8 < M) *reinterpret_cast<unsigned*>(C + (long long)(r + 8) * N + c) = pack_bf16x2(d[4 * j + 2], d[4 * j + 3]);
        }
    }
}

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

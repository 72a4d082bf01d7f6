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
// contract: K % 8 == 0 and N % 8 == 0 (16-byte row strides for the tensor maps); M, N, K otherwise
//           arbitrary: TMA zero-fills boxes past the end (the byte count stays the full box), stores are masked.
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
// mbarrier: a 64-bit shared-memory object with a phase bit, a count of pending arrivals and a count of
// pending transaction bytes; a phase completes when both reach zero. Waiting names the parity of the
// phase waited for: parity 1 on a fresh barrier (phase 0 in progress) refers to the phase before it,
// which counts as complete, so it returns at once.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {      // make the inits visible to TMA and the cluster
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// TMA: copy the box at coordinates (c0 = column, c1 = row) of the tensor map into shared memory; the
// bytes are counted against the transaction count of `bar`. Coordinates past the tensor's end read zeros.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
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
#define BN 128          // tile width (m64n128k16)
#endif
#define BM 128          // two warpgroups x 64 rows
#define BK 64
#define THREADS 256
#define TILE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + TILE_BYTES + 8)
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

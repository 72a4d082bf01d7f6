// Chapter 07, version 5: persistent blocks, a static tile scheduler, grouped tile order.
//
// Idea: launch one block per SM (grid = min(tiles, SMs)) and let each block walk tiles
// blockIdx.x, blockIdx.x + gridDim.x, ... The ring and its parities carry on from tile to tile, so the
// producer starts loading the next tile's first slices while the consumers are still converting and
// storing the last tile's accumulators: the prologue of every tile but the first disappears and the
// epilogue overlaps with loads. The order of tiles is grouped: GROUP_M tile rows are walked top to
// bottom before the next column, so the 132 tiles in flight at once touch ~GROUP_M row blocks of A
// and ~132/GROUP_M column blocks of B: the same operands are read by many SMs at nearly the same time
// and mostly hit L2. Everything else is version 4 (producer + 2 consumers, setmaxnreg, 128 x 256 x 64).
//
// Prediction (H200, 132 SMs, wgmma roof ~950 TFLOP/s):
//  - shared memory as version 4: 48 KB per stage, 4 stages = 192 KB (+1 KB, barriers); 1 block per SM;
//  - tiles per SM: 3.88 at 4096^3 (wave quantisation as before: 97%), 15.5 at 8192^3, 54.3 at
//    8192 x 28672 x 8192; the ~1.5 us ring fill per tile goes away (4% of a 37 us tile at K = 4096) and
//    the epilogue now overlaps with the next tile's loads (though not with its MMAs);
//  - HBM traffic with GROUP_M = 8 at 8192^3: a wave (132 tiles ~ 8 x 16.5) reads 1024 rows of A and
//    4224 rows of B, 86 MB per 89 us of compute (at 800 TFLOP/s): ~1 TB/s; in row-major launch order
//    (version 4: 4 x 32 tiles) it is 143 MB, ~1.6 TB/s, with more of it missing L2;
//  - expect ~680-750 TFLOP/s at 4096^3 and 8192^3: 72-78% of the roof, 88-100% of cuBLAS.
// contract: K % 8 == 0 and N % 8 == 0; M, N, K otherwise arbitrary (TMA zero fill, masked stores).
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
// Warp specialisation: the producer warpgroup gives registers back, the consumers take them
// (per thread; executed by all 128 threads of a warpgroup; counts are multiples of 8).
template <int R> __device__ __forceinline__ void regs_dealloc() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R)); }
template <int R> __device__ __forceinline__ void regs_alloc()   { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R)); }
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
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, 1, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db));
}
template <int N> __device__ __forceinline__ void wgmma_tile(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    if constexpr (N == 128) wgmma_m64n128k16(d, da, db);
    else if constexpr (N == 256) wgmma_m64n256k16(d, da, db);
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
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS (128 * (CONSUMERS + 1))
#define A_BYTES (BM * BK * 2)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + 16 * STAGES)
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
// Grouped tile order: tile t walks down a band of `group` tile rows before moving one tile column
// right, so the tiles in flight at one time (one per SM) share a few row blocks of A and a few
// column blocks of B, which then come from L2 instead of HBM.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
    const int band = group * tiles_n;
    const int first = (t / band) * group;
    const int rows = min(tiles_m - first, group);
    const int r = t - (t / band) * band;
    tm = first + r % rows;
    tn = r / rows;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_persistent(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
                bf16_t* __restrict__ C, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned full0 = base + STAGES * STAGE_BYTES, empty0 = full0 + 8 * STAGES;

    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, CONSUMERS);
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {                                           // ---- producer
        regs_dealloc<40>();
        if (t == 0) {
            int s = 0;
            unsigned ph = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tm, tn;
                tile_of(tile, tiles_m, tiles_n, GROUP_M, tm, tn);
                for (int kt = 0; kt < KT; ++kt) {
                    const unsigned full = full0 + 8 * s, sA = base + s * STAGE_BYTES;
                    mbar_wait(empty0 + 8 * s, ph ^ 1);
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    tma_load_2d(sA, &tmA, full, kt * BK, tm * BM);
                    tma_load_2d(sA + A_BYTES, &tmB, full, kt * BK, tn * BN);
                    if (++s == STAGES) { s = 0; ph ^= 1; }
                }
            }
        }
    } else {                                                 // ---- consumers
        regs_alloc<232>();
        const int c = wg - 1;
        const unsigned long long d0 = desc_sw128(base);
        int s = 0;
        unsigned ph = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int tm, tn;
            tile_of(tile, tiles_m, tiles_n, GROUP_M, tm, tn);
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
                if (t == 0) mbar_arrive(empty0 + 8 * s);
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
            store_tile_direct<BN>(acc, C, M, N, tm * BM + c * 64, tn * BN, t);
        }
    }
}

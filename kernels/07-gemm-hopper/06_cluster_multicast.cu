// Chapter 07, version 6: 2-CTA clusters, TMA multicast of the shared operand.
//
// Idea: two CTAs of a cluster compute vertically adjacent tiles (rows tm = 2cm and 2cm+1, the same
// columns tn), so they need the same 256 x 64 slice of B at every K step. Each CTA loads its own A
// slice and HALF of the B slice, multicast into both CTAs' shared memory (same offset, bytes counted
// on the same-offset full barrier of each CTA): B is read from L2 once per pair instead of twice. A
// stage of CTA r is now written by both producers, so it may be refilled only when the consumers of
// BOTH CTAs are done with it: every consumer warpgroup arrives on the empty barrier of each CTA of the
// cluster (mapa + remote mbarrier.arrive), and empty barriers count CONSUMERS x CLUSTER arrivals. Each
// full barrier expects A + both B halves (48 KB); a peer's half may land before the local producer
// arms the barrier, which only makes the transaction count dip below zero for a while (the phase
// cannot complete without the local arrival). Cluster barriers after the barrier inits (before any
// remote access) and at the end (no CTA leaves while its peer may still signal it). The scheduler of
// version 5 now hands out cluster tiles (256 x 256); CLUSTER=1 builds version 5 again.
//
// Prediction (H200, 132 SMs, wgmma roof ~950 TFLOP/s):
//  - shared memory as before: 48 KB per stage (16 KB A, 2 x 16 KB B halves), 4 stages, 1 CTA per SM,
//    66 clusters of 2 if every GPC has an even number of usable SMs (a persistent grid larger than what
//    fits at once would run its last clusters after the others: the host caps the grid at what
//    cuOccupancyMaxActiveClusters reports, and the sweep also tries 128 CTAs);
//  - L2 -> SM traffic per CTA and K step: 16 + 16 = 32 KB instead of 48 KB for 4.19 MFLOP: 5.6 TB/s
//    at 720 TFLOP/s instead of 8.2, out of the range where the L2 feed limits;
//  - tiles per SM unchanged (3.88 / 15.5 / 54.3 at 4096^3 / 8192^3 / 8192 x 28672 x 8192);
//  - expect ~720-800 TFLOP/s at 4096^3 and 8192^3: 76-84% of the roof, 92-103% of cuBLAS.
// contract: K % 8 == 0 and N % 8 == 0; M, N, K otherwise arbitrary (TMA zero fill, masked stores; a part
//           of a cluster tile wholly past M or N loads a clamped, valid box and stores nothing).
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
// Clusters: CTAs of one cluster run at once on SMs of one GPC and can reach each other's shared memory.
__device__ __forceinline__ unsigned cluster_ctarank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned cluster_id_x()    { unsigned r; asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned cluster_count_x() { unsigned r; asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {            // every thread of every CTA of the cluster
    asm volatile("barrier.cluster.arrive.release;\n" "barrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrive on the mbarrier at the same shared-memory offset in CTA `cta` of this cluster (itself included).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta) {
    asm volatile("{\n .reg .b32 ra;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
                 " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" :: "r"(bar), "r"(cta) : "memory");
}
// TMA multicast: one read of the box from L2, written at offset `dst` of every CTA in `mask`, each
// copy's bytes counted on the mbarrier at offset `bar` of that CTA.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1,
                                                      unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4}], [%2], %5;\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
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
#define GROUP_M 8       // tile rows per band of the tile order (GROUP_M / CLUSTER cluster rows)
#endif
#ifndef CLUSTER
#define CLUSTER 2       // CTAs per cluster along M: 1 or 2
#endif
#define BM 128
#define BK 64
#define CONSUMERS 2
#define THREADS (128 * (CONSUMERS + 1))
#define A_BYTES (BM * BK * 2)
#define B_PART_BYTES (BN / CLUSTER * BK * 2)   // the part of the B slice each CTA loads (and multicasts)
#define STAGE_BYTES ((BM + BN) * BK * 2)
#define SMEM_BYTES (1024 + STAGES * STAGE_BYTES + 16 * STAGES)
#if CLUSTER != 1 && CLUSTER != 2
#error "CLUSTER must be 1 or 2"
#endif
#if CLUSTER > 1
#define CLUSTER_ATTR __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_ATTR
#endif
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

// tmB's box is 64 x (BN / CLUSTER): the part of B one CTA fetches.
extern "C" __global__ void __launch_bounds__(THREADS, 1) CLUSTER_ATTR
gemm_cluster_multicast(const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB,
                       bf16_t* __restrict__ C, int M, int N, int K)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;   // the same offset in every CTA
    const unsigned full0 = base + STAGES * STAGE_BYTES, empty0 = full0 + 8 * STAGES;

    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
#if CLUSTER > 1
    const int rank = (int)cluster_ctarank(), cid = (int)cluster_id_x(), ncl = (int)cluster_count_x();
#else
    const int rank = 0, cid = blockIdx.x, ncl = gridDim.x;
#endif
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int crows = (tiles_m + CLUSTER - 1) / CLUSTER, ctiles = crows * tiles_n;
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, CONSUMERS * CLUSTER);
        }
        fence_barrier_init();
    }
#if CLUSTER > 1
    cluster_sync();                                          // peers' barriers exist before any remote use
#else
    __syncthreads();
#endif

    if (wg == 0) {                                           // ---- producer
        regs_dealloc<40>();
        if (t == 0) {
            int s = 0;
            unsigned ph = 0;
            for (int ct = cid; ct < ctiles; ct += ncl) {
                int cm, tn;
                tile_of(ct, crows, tiles_n, (GROUP_M / CLUSTER > 0 ? GROUP_M / CLUSTER : 1), cm, tn);
                // a part of a cluster tile that lies wholly past M (odd tile-row count) or N (narrow last
                // column block) loads a clamped, valid box instead: its outputs are never stored
                const int a_row = min(cm * CLUSTER + rank, tiles_m - 1) * BM;
                const int b_row = min(tn * BN + rank * (BN / CLUSTER), N - 1);   // clamp a row block past M
                for (int kt = 0; kt < KT; ++kt) {
                    const unsigned full = full0 + 8 * s, sA = base + s * STAGE_BYTES;
                    mbar_wait(empty0 + 8 * s, ph ^ 1);       // both CTAs' consumers released stage s
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    tma_load_2d(sA, &tmA, full, kt * BK, a_row);
#if CLUSTER > 1
                    tma_load_2d_multicast(sA + A_BYTES + rank * B_PART_BYTES, &tmB, full, kt * BK, b_row,
                                          (unsigned short)((1u << CLUSTER) - 1));
#else
                    tma_load_2d(sA + A_BYTES, &tmB, full, kt * BK, tn * BN);
#endif
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
        for (int ct = cid; ct < ctiles; ct += ncl) {
            int cm, tn;
            tile_of(ct, crows, tiles_n, (GROUP_M / CLUSTER > 0 ? GROUP_M / CLUSTER : 1), cm, tn);
            const int tm = cm * CLUSTER + rank;
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
#if CLUSTER > 1
                if (t < CLUSTER) mbar_arrive_cluster(empty0 + 8 * s, t);   // thread t signals CTA t
#else
                if (t == 0) mbar_arrive(empty0 + 8 * s);
#endif
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
            store_tile_direct<BN>(acc, C, M, N, tm * BM + c * 64, tn * BN, t);
        }
    }
#if CLUSTER > 1
    __syncwarp();
    cluster_sync();                                          // no CTA exits while its peer may signal it
#endif
}

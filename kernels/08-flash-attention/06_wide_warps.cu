// Chapter 08, rung 6: wide warps, 32 query rows per warp, each K/V fragment feeding two m16 tiles.
//
// Idea: in 02-05 a warp owns 16 query rows, so every K and V fragment taken from shared memory by
// ldmatrix serves one m16 tile: 32 KB of ldmatrix reads per warp and 64-key tile for 0.52 MFLOP, 16
// FLOP per byte, more than the SM's 128 B/clk can feed at the mma.sync roof. Here a warp owns 32 rows
// as two m16 tiles and every K or V fragment feeds both (4 mma per ldmatrix.x4 instead of 2). The
// price is registers: O of 32 rows is 128 fp32 per lane at d=128, so Q no longer fits (64 more): as in
// FlashAttention-2, Q's A fragments are read again from the resident Q tile at every k-step of
// S = Q K^T (2 ldmatrix.x4 per k-step, shared by that step's K fragments), and the scores are taken in
// SUB_N-key steps (32 at d=128: S is 32 registers, P packed to bf16 as soon as it is exponentiated)
// inside each BLOCK_N-key tile of the ring (one barrier per 64 keys). 64-key steps (26 FLOP/B) need
// 64 registers of S and leave ptxas at the 255 cap with spills. At d=64 (O 64 registers) Q stays in
// registers (Q_REGS) and the steps are 64 keys of a 128-key tile. Defaults: 4 warps (BLOCK_M = 128
// query rows, 05's grid), 2 blocks per SM (__launch_bounds__(128, 2): <= 255 registers; 2 x 96 KB of
// shared memory at d=128), so an SM holds 8 warps as in 05. Operand addresses are one register per
// operand plus immediates (lane_off / step_off), the K/V copies one pointer per thread (load_rows):
// 05's per-row pointers and per-k-step swizzle registers do not fit next to O. Kept from 05: the
// cp.async ring with one barrier per tile, exp2 with the scale folded, the conditional rescale
// (RESCALE_TAU), causal skipping (heaviest query tiles first, steps above a warp's 32 rows skipped,
// masks only where a step crosses the warp's diagonal or the S tail, as one compare per score against
// a constant), per-lane row sums reduced once, O staged through the warp's own rows of the Q tile for
// 16-byte stores, the LSE, -inf-safe numerics (a row with every key masked: O = 0, LSE = -inf).
// Macros: HEAD_DIM (64, 128), WARPS (4; BLOCK_M = 32 * WARPS), BLOCK_N (64 at d=128, 128 at d=64),
// SUB_N (32 at d=128, 64 at d=64), STAGES (2..6), Q_REGS (0 at d=128, 1 at d=64), MIN_BLOCKS (2 at
// <= 4 warps, else 1), SWIZZLE (1; 0: rows padded by 16 bytes), RESCALE_TAU (8).
// Shapes: Q, K, V, O contiguous bf16 (B, H, S, d), LSE fp32 (B, H, S); any S >= 1 (key rows past S are
// zero-filled and masked to -inf, query rows past S are computed on zeros and not stored).
// contract: Q K V O bf16 (B,H,S,HEAD_DIM) contiguous, LSE fp32 (B,H,S), 16-byte aligned, S >= 1,
//           scale 1/sqrt(HEAD_DIM), causal: query i sees keys j <= i
// Launch: grid (ceil(S / BLOCK_M), B * H) (causal: blockIdx.x = T - 1 - query tile, heaviest first),
// block 32 * WARPS threads, dynamic shared memory (BLOCK_M + 2 STAGES BLOCK_N) * HEAD_DIM * 2 bytes
// (96 KB at the defaults and d=128, 80 KB at d=64: raise the attribute); launch_config() writes the
// geometry (05's 8 fields).
//
// Prediction (B=16, H=16, S=4096, d=128; 2.2e12 FLOPs non-causal, 1.1e12 counted causal): per warp and
// 32-key step ldmatrix reads Q 8 KB + K 8 KB + V 8 KB = 24 KB for 0.52 MFLOP: 21.8 FLOP per shared
// byte (05: 16; 64-key steps would give 26), 0.375 ldmatrix per mma (05: 0.5). At the 631 TFLOP/s roof
// (~2400 FLOP/clk/SM at 1.98 GHz) that is 111 B/clk of the SM's 128 (05: 151, i.e. 05 cannot pass 85%
// of the roof on shared bandwidth alone), plus 19 B/clk of cp.async writes. Softmax work per score is
// 05's (FFMA + MUFU.EX2 + FADD + FMNMX + half a CVT; the rescale of O, 128 FMUL per lane, runs only on
// the rare steps where a row max grows by more than 2^8: FlashAttention-2 pays it at every tile).
// Registers: O 128 + S 32 + P 16 + Q/K/V fragments 8-24 + row state 8 + addresses and loop ~20: NVRTC
// reports 250 (sm_80) / 255 (sm_90) at d=128, 255 / 255 at d=64, no spills. Occupancy: 2 blocks x 4
// warps = 8 warps per SM (2 per scheduler), 8192 blocks of 128 rows = 31 waves of 264. DRAM 1.07 GB and
// L2 -> SM 8.6 GB as in 05 (same 128-row query tiles). Expect 350-400 TFLOP/s non-causal (55-63% of
// the roof, 0.95-1.1x SDPA flash at 364: about FlashAttention-2's tiling, 128 x 64 with 4 warps,
// without its per-tile rescale), causal 320-370 (0.95-1.1x of 336); d=64: 280-330 (0.9-1.05x of 312; twice
// the softmax work per FLOP, where 04/05 reached 0.93x).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "attention_fwd"):
//   wide_warps at 16x16x4096x128x0: 5.6369 ms, 390.1 TFLOP/s, 61.3% of mma, 1.13x SDPA flash
//   wide_warps at 16x16x4096x128x1: 3.1546 ms, 348.5 TFLOP/s, 54.7% of mma, 1.12x SDPA flash
//   wide_warps at 16x16x4096x64x0: 3.0089 ms, 365.4 TFLOP/s, 57.4% of mma, 1.20x SDPA flash
//   wide_warps at 16x16x4096x64x1: 1.6753 ms, 328.2 TFLOP/s, 51.5% of mma, 1.17x SDPA flash
//   wide_warps at 1x16x16384x128x0: 5.6907 ms, 386.4 TFLOP/s, 60.7% of mma, 1.13x SDPA flash
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef BLOCK_N
#define BLOCK_N (HEAD_DIM == 64 ? 128 : 64)
#endif
#ifndef SUB_N
#define SUB_N (HEAD_DIM == 64 ? 64 : 32)    // keys per softmax step (S registers: 2 SUB_N per lane)
#endif
#ifndef Q_REGS
#define Q_REGS (HEAD_DIM == 64)        // Q's A fragments held in registers (1) or reloaded per k-step (0)
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS (WARPS <= 4 ? 2 : 1)   // __launch_bounds__ minimum blocks per SM (caps the registers)
#endif
#ifndef SWIZZLE
#define SWIZZLE 1
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif

#ifndef RESCALE_TAU
#define RESCALE_TAU 8.0f               // rescale when a row max grows by more than this (log2 units)
#endif

#define SL (SM_SCALE * LOG2E)           // scores -> log2 units: exp(x * scale) = 2^(x * SL)
#define LN2 0.6931471805599453f
#define MT 2                            // m16 tiles per warp: 32 query rows
#define WARP_M (16 * MT)
#define BLOCK_M (WARP_M * WARPS)
#define NTHREADS (32 * WARPS)
#define ROW_LD (SWIZZLE ? HEAD_DIM : HEAD_DIM + 8)        // shared row pitch in elements
#define Q_BYTES (BLOCK_M * ROW_LD * 2)            // the Q tile (read all along); reused by the O tile
#define KV_BYTES (BLOCK_N * ROW_LD * 2)
#define STAGE_BYTES (2 * KV_BYTES)                 // one K tile and one V tile
#define SMEM_BYTES (Q_BYTES + STAGES * STAGE_BYTES)
#define ROW_B (ROW_LD * 2)                         // bytes per tile row

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(STAGES >= 2 && STAGES <= 6, "STAGES: 2..6");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16, "BLOCK_N: a multiple of 16");
static_assert(SUB_N % 16 == 0 && BLOCK_N % SUB_N == 0, "SUB_N: a multiple of 16 dividing BLOCK_N");
static_assert(WARPS >= 1 && WARPS <= 16, "WARPS: 1..16");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

#include "common/smem_addr.cuh"   // smem_u32
#include "common/flash_mma.cuh"   // fa_off, fa_load_tile, fa_pack_p, fa_quad_*, fa_log2

#if Q_REGS
typedef unsigned QFrag[MT][HEAD_DIM / 16][4];   // Q's A fragments, both m16 tiles, all k-steps
#else
typedef unsigned QFrag[1];                      // unused: Q is read from shared memory per k-step
#endif

// Operand addresses without one register per k-step. An ldmatrix lane reads row r at chunk 2 step + hi
// (hi = 0 or 1, from its lane; step = the k-step of Q and K, the d16 step of V). Swizzled,
// fa_off(r, 2 step + hi) = r ROW_B + ((2 step + hi) ^ (r & 7)) 16, and as 2 step + hi = 2 step ^ hi and
// r & 7 < 8 this is lane_off(r, hi) ^ 32 (step & 3), plus 128 (step >> 2): the XOR touches bits 5-6
// only (r ROW_B has none below bit 7; at d=64 step < 4). Rows 16 apart have the same r & 7, so the
// m16 tile, the key block nj of K and the key step of V are immediate offsets of 16 ROW_B. Padded
// rows: lane_off + 32 step.
__device__ __forceinline__ unsigned lane_off(int r, int hi)
{
    return fa_off<HEAD_DIM, ROW_LD>(r, hi);
}
__device__ __forceinline__ unsigned step_off(unsigned lo, int step)
{
#if SWIZZLE
    return (lo ^ (32u * (step & 3))) + 128u * (step >> 2);
#else
    return lo + 32u * step;
#endif
}

// Rows [row0, row0 + ROWS) of a (rows x HEAD_DIM) bf16 matrix at g into the tile at shared address s
// (fa_load_tile's map and swizzle). Thread tid copies chunk tid % CH of rows tid / CH + i RS (RS =
// NTHREADS / CH, a multiple of 8, so the swizzle of its rows is the same for every i): one source
// pointer and one destination per thread, the rest immediate offsets (fa_load_tile's per-row select
// made ptxas keep 8-16 row pointers live across the loop, 32+ registers). TAIL (the tile that crosses
// `rows`): rows at or past `rows` are zero-filled (src-size 0, nothing read, the pointer clamped to g).
template <int ROWS, bool TAIL>
__device__ __forceinline__ void load_rows(unsigned s, const bf16_t* __restrict__ g, int row0, int rows,
                                          unsigned tid)
{
    constexpr int CH = HEAD_DIM / 8, RS = NTHREADS / CH;
    static_assert(RS % 8 == 0, "load_rows: NTHREADS / (HEAD_DIM / 8) must be a multiple of 8");
    const int r = (int)(tid / CH), c = (int)(tid % CH);
    // 32-bit element offset within the head: (row0 + r) HEAD_DIM < (S + BLOCK_M) HEAD_DIM < 2^32
    const bf16_t* src = g + ((unsigned)(row0 + r) * HEAD_DIM + (unsigned)c * 8);
    const unsigned dst = s + fa_off<HEAD_DIM, ROW_LD>(r, c);
#pragma unroll
    for (int i = 0; i < (ROWS + RS - 1) / RS; ++i) {
        if (ROWS % RS != 0 && r + i * RS >= ROWS) break;
        if (TAIL) {
            const bool ok = row0 + r + i * RS < rows;
            cp_async16(dst + i * RS * ROW_B, ok ? src + i * RS * HEAD_DIM : g, ok ? 16 : 0);
        } else {
            cp_async16(dst + i * RS * ROW_B, src + i * RS * HEAD_DIM, 16);
        }
    }
}

// The K and V tiles of key tile jj into ring slot st (the tail variant only for the last tile).
__device__ __forceinline__ void load_kv(unsigned st, const bf16_t* __restrict__ K,
                                        const bf16_t* __restrict__ V, int jj, int S, unsigned tid)
{
    const int n0 = jj * BLOCK_N;
    if (n0 + BLOCK_N <= S) {
        load_rows<BLOCK_N, false>(st, K, n0, S, tid);
        load_rows<BLOCK_N, false>(st + KV_BYTES, V, n0, S, tid);
    } else {
        load_rows<BLOCK_N, true>(st, K, n0, S, tid);
        load_rows<BLOCK_N, true>(st + KV_BYTES, V, n0, S, tid);
    }
}

// s[mt][n][.] = Q K^T for the warp's two m16 tiles (tile rows r0 .. r0+31) and the KN keys at sK. Each
// K fragment (ldmatrix.x4: keys nj*16 .. +15 at the 16 dims of k-step kk, fa_qk's map) feeds 4 mma:
// n8 tiles 2nj and 2nj+1 of both m16 tiles. Without Q_REGS the A fragments of step kk come from the Q
// tile at sQ (fa_load_q's map, one k-step at a time): 2 ldmatrix.x4 next to the step's KN / 16 of K.
template <int KN>
__device__ __forceinline__ void qk_wide(float (&s)[MT][KN / 8][4], const QFrag& qf, unsigned sQ, int r0,
                                        unsigned sK, int lane)
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < KN / 8; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) s[mt][n][q] = 0.f;
    const unsigned klo = lane_off((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
#if !Q_REGS
    const unsigned qlo = lane_off(r0 + (lane & 15), lane >> 4);
#endif
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        unsigned a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if Q_REGS
#pragma unroll
            for (int i = 0; i < 4; ++i) a[mt][i] = qf[mt][kk][i];
#else
            ldmatrix_x4(a[mt], sQ + step_off(qlo, kk) + mt * 16 * ROW_B);
#endif
        }
        const unsigned kaddr = sK + step_off(klo, kk);
#pragma unroll
        for (int nj = 0; nj < KN / 16; ++nj) {
            unsigned b[4];
            ldmatrix_x4(b, kaddr + nj * 16 * ROW_B);
            const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(s[mt][2 * nj], a[mt], b0);
                mma_bf16(s[mt][2 * nj + 1], a[mt], b1);
            }
        }
    }
}

// o[mt][d8 tile][.] += P V for both m16 tiles and the KN keys at sV: each V fragment (ldmatrix.x4.trans,
// fa_pv's map: keys kk*16 + lane%16, dim chunk 2dj + lane/16) feeds 4 mma. pa: P already packed as the
// bf16 A operand (fa_pack_p's layout: pa[mt][kk] = key step kk).
template <int KN>
__device__ __forceinline__ void pv_wide(float (&o)[MT][HEAD_DIM / 8][4], const unsigned (&pa)[MT][KN / 16][4],
                                        unsigned sV, int lane)
{
    const unsigned vlo = lane_off(lane & 15, lane >> 4);
#pragma unroll
    for (int dj = 0; dj < HEAD_DIM / 16; ++dj) {
        const unsigned vaddr = sV + step_off(vlo, dj);
#pragma unroll
        for (int kk = 0; kk < KN / 16; ++kk) {
            unsigned b0[2], b1[2];
            ldmatrix_x4_trans(b0[0], b0[1], b1[0], b1[1], vaddr + kk * 16 * ROW_B);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(o[mt][2 * dj], pa[mt][kk], b0);
                mma_bf16(o[mt][2 * dj + 1], pa[mt][kk], b1);
            }
        }
    }
}

// One KN-key step for one warp: S = Q K^T, (MASK) the mask, the online-softmax update, O += P V. Row state
// per lane: m_run[mt][h], l[mt][h] for rows w0 + 16 mt + g + 8 h (g = lane / 4).
template <bool CAUSAL, bool MASK, int KN>
__device__ __forceinline__ void attn_tile(float (&o)[MT][HEAD_DIM / 8][4], float (&m_run)[MT][2],
                                          float (&l)[MT][2], const QFrag& qf, unsigned sQ, int r0,
                                          unsigned sK, unsigned sV, int n0, int w0, int S, int lane)
{
    const int t = lane & 3, g = lane >> 2;
    float s[MT][KN / 8][4];
    qk_wide<KN>(s, qf, sQ, r0, sK, lane);

    // MASK (diagonal or tail tiles only): causal, key after the query (which covers keys past S for
    // every stored row: key >= S > row); not causal, key past S. Element (mt, n, q) of this lane holds
    // key n0 + 8n + 2t + (q & 1) of row w0 + 16mt + g + 8(q >> 1), so both tests compare one per-lane
    // integer with a compile-time constant.
    const int dk = n0 + 2 * t - w0 - g;             // key - row = dk + 8n + (q & 1) - 16mt - 8(q >> 1)
    const int ks = S - n0 - 2 * t;                  // key >= S  <=>  8n + (q & 1) >= ks
    float mx[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        mx[mt][0] = mx[mt][1] = NEG_INF;
#pragma unroll
        for (int n = 0; n < KN / 8; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int h = q >> 1;
                if (MASK && (CAUSAL ? dk > 16 * mt + 8 * h - 8 * n - (q & 1) : 8 * n + (q & 1) >= ks)) {
                    s[mt][n][q] = NEG_INF;
                }
                mx[mt][h] = fmaxf(mx[mt][h], s[mt][n][q]);
            }
    }
    // Conditional rescale (03-05): the running max moves only when some row of the warp grows by more
    // than RESCALE_TAU (log2 units); then (warp-uniform branch) every row's l and O are rescaled.
    float tm[MT][2];
    bool grow = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tm[mt][h] = fa_quad_max(mx[mt][h]) * SL;
            grow |= tm[mt][h] > m_run[mt][h] + RESCALE_TAU;
        }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m_new = fmaxf(m_run[mt][h], tm[mt][h]);
                const float alpha = fast_exp2(m_run[mt][h] - (m_new == NEG_INF ? 0.f : m_new));
                m_run[mt][h] = m_new;
                l[mt][h] *= alpha;
#pragma unroll
                for (int n = 0; n < HEAD_DIM / 8; ++n) {
                    o[mt][n][2 * h] *= alpha;
                    o[mt][n][2 * h + 1] *= alpha;
                }
            }
    }
    // p = 2^(s * scale * log2 e - m): one FFMA and one MUFU.EX2 per score, per-lane partial row sums,
    // and at once the bf16 A operand of P V (fa_pack_p's layout), so the fp32 scores die here and
    // P V holds KN / 2 registers of P (16 at KN = 32) instead of KN.
    unsigned pa[MT][KN / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const float nm0 = m_run[mt][0] == NEG_INF ? 0.f : -m_run[mt][0];   // all masked so far: p = 0
        const float nm1 = m_run[mt][1] == NEG_INF ? 0.f : -m_run[mt][1];
#pragma unroll
        for (int n = 0; n < KN / 8; ++n) {
            const float p0 = fast_exp2(fmaf(s[mt][n][0], SL, nm0));
            const float p1 = fast_exp2(fmaf(s[mt][n][1], SL, nm0));
            const float p2 = fast_exp2(fmaf(s[mt][n][2], SL, nm1));
            const float p3 = fast_exp2(fmaf(s[mt][n][3], SL, nm1));
            l[mt][0] += p0 + p1;
            l[mt][1] += p2 + p3;
            pa[mt][n >> 1][2 * (n & 1)] = pack_bf16x2(p0, p1);        // row g: a0 (keys 2t..) / a2 (8+2t..)
            pa[mt][n >> 1][2 * (n & 1) + 1] = pack_bf16x2(p2, p3);    // row g+8: a1 / a3
        }
    }

    pv_wide<KN>(o, pa, sV, lane);
}

template <bool CAUSAL>
__device__ __forceinline__ void attn_body(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K,
                                          const bf16_t* __restrict__ V, bf16_t* __restrict__ O,
                                          float* __restrict__ LSE, int S)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned tid = threadIdx.x;
    const int lane = (int)(tid & 31), warp = (int)(tid >> 5);
    const int g = lane >> 2, t = lane & 3;
    // Causal: the heaviest query tiles (most key tiles) first, so the short ones fill the tail.
    const int m0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BLOCK_M;
    const size_t head = (size_t)blockIdx.y * S * HEAD_DIM;
    Q += head; K += head; V += head; O += head;
    LSE += (size_t)blockIdx.y * S;
    const unsigned sQ = smem_u32(smem), sKV = sQ + Q_BYTES;  // slot i: K at sKV + i * STAGE_BYTES, then V
    const int n_end = CAUSAL ? min(S, m0 + BLOCK_M) : S;           // keys this block can see
    const int ntiles = (n_end + BLOCK_N - 1) / BLOCK_N;
    const int r0 = warp * WARP_M;                                  // the warp's first row in the tile
    const int w0 = m0 + r0;                                        // ... in the head

    // Prologue: Q (one commit group), then key tiles 0 .. STAGES-2 (one group each, empty past the end).
    if (m0 + BLOCK_M <= S) load_rows<BLOCK_M, false>(sQ, Q, m0, S, tid);
    else load_rows<BLOCK_M, true>(sQ, Q, m0, S, tid);
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (i < ntiles) load_kv(sKV + i * STAGE_BYTES, K, V, i, S, tid);
        cp_async_commit();
    }
    QFrag qf;
#if Q_REGS
    cp_async_wait<STAGES - 1>();                                   // Q has landed (the tiles may not)
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) fa_load_q<HEAD_DIM, ROW_LD>(qf[mt], sQ, r0 + 16 * mt, lane);
#else
    qf[0] = 0;                  // Q is read in the loop; the first barrier of the loop publishes it
#endif

    float o[MT][HEAD_DIM / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) o[mt][n][q] = 0.f;
    float m_run[MT][2], l[MT][2];                              // m in log2 units; l per lane
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        m_run[mt][0] = m_run[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.f;
    }

    // Main loop (05's ring). Tile j is read from slot j % STAGES. At the top of iteration j this thread
    // waits until at most STAGES-2 of its groups are pending (Q and tile j have landed for it); the
    // barrier makes them visible to every thread AND tells that every warp has finished tile j-1, whose
    // slot then takes the copies of tile j+STAGES-1. One barrier per tile.
    for (int j = 0; j < ntiles; ++j) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (j + STAGES - 1 < ntiles) {
            load_kv(sKV + ((j + STAGES - 1) % STAGES) * STAGE_BYTES, K, V, j + STAGES - 1, S, tid);
        }
        cp_async_commit();
        const unsigned sK = sKV + (j % STAGES) * STAGE_BYTES, sV = sK + KV_BYTES;

        // The tile in SUB_N-key steps (a loop, not unrolled: one copy of the step's code per mask
        // case). Steps entirely above this warp's 32 rows end it (warp-uniform; the barriers stay
        // uniform); only steps that cross its diagonal, or the S tail, pay for the mask.
#pragma unroll 1
        for (int k = 0; k < BLOCK_N / SUB_N; ++k) {
            const int n0 = j * BLOCK_N + k * SUB_N;
            if (CAUSAL && n0 > w0 + WARP_M - 1) break;
            const unsigned kb = sK + k * SUB_N * ROW_B, vb = sV + k * SUB_N * ROW_B;
            if (n0 + SUB_N > S || (CAUSAL && n0 + SUB_N - 1 > w0)) {
                attn_tile<CAUSAL, true, SUB_N>(o, m_run, l, qf, sQ, r0, kb, vb, n0, w0, S, lane);
            } else {
                attn_tile<CAUSAL, false, SUB_N>(o, m_run, l, qf, sQ, r0, kb, vb, n0, w0, S, lane);
            }
        }
    }
    cp_async_wait<0>();                                         // only empty groups are left

    // Epilogue: O / l as bf16 into this warp's own 32 rows of the Q tile (only this warp ever read them;
    // __syncwarp: its last ldmatrix of Q is behind it), then 16-byte row chunks to global.
    __syncwarp();
    unsigned char* sO = smem;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float l_row = fa_quad_sum(l[mt][h]);
            const int r = r0 + 16 * mt + g + 8 * h;                // row within the block's tile
            const float inv = l_row > 0.f ? 1.f / l_row : 0.f;
#pragma unroll
            for (int n = 0; n < HEAD_DIM / 8; ++n) {
                *reinterpret_cast<unsigned*>(sO + fa_off<HEAD_DIM, ROW_LD>(r, n) + 4 * t) =
                    pack_bf16x2(o[mt][n][2 * h] * inv, o[mt][n][2 * h + 1] * inv);
            }
            if (t == 0 && m0 + r < S) {
                LSE[m0 + r] = l_row > 0.f ? (m_run[mt][h] + fa_log2(l_row)) * LN2 : NEG_INF;
            }
        }
    __syncwarp();
    constexpr int CH = HEAD_DIM / 8, RPI = 32 / CH;               // chunks per row, rows per instruction
#pragma unroll
    for (int i = 0; i < WARP_M / RPI; ++i) {
        const int r = r0 + i * RPI + lane / CH, c = lane % CH;
        if (m0 + r < S) {
            *reinterpret_cast<uint4*>(O + (size_t)(m0 + r) * HEAD_DIM + c * 8) =
                *reinterpret_cast<const uint4*>(sO + fa_off<HEAD_DIM, ROW_LD>(r, c));
        }
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
flash_wide(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
           bf16_t* __restrict__ O, float* __restrict__ LSE, int S, int causal)
{
    if (causal) attn_body<true>(Q, K, V, O, LSE, S);
    else attn_body<false>(Q, K, V, O, LSE, S);
}

// The launch configuration of this build, for the host: out[0..7] = BLOCK_M, BLOCK_N, threads per
// block, dynamic shared memory bytes, HEAD_DIM, K/V stages, warps, swizzled (1) or padded (0).
// Grid: (ceil(S / BLOCK_M), B * H).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = BLOCK_M;
    out[1] = BLOCK_N;
    out[2] = NTHREADS;
    out[3] = SMEM_BYTES;
    out[4] = HEAD_DIM;
    out[5] = STAGES;
    out[6] = WARPS;
    out[7] = SWIZZLE;
}

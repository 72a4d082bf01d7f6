// Chapter 08, rung 7: FlashAttention-3 on Hopper: TMA producer, wgmma consumers, softmax under the MMAs.
//
// Idea: on Hopper the tensor cores are driven by wgmma (one warpgroup = 4 warps issues an m64nNk16 MMA
// whose B operand, and here also A for S = Q K^T, is read by the tensor cores straight from shared
// memory) and fed by TMA; 01-06's mma.sync path tops out near 60% of the wgmma roof because every
// operand passes through registers (ldmatrix). This rung is FlashAttention-3's forward, simplified:
//  - warp specialisation: warpgroup 0 is the producer (setmaxnreg 24; one thread issues every TMA copy),
//    warpgroups 1..CONSUMERS own 64 query rows each (setmaxnreg 240 at two consumers);
//  - Q of the block (CONSUMERS x 64 rows) is loaded once by TMA (mbarrier full_q); K and V tiles of
//    BLOCK_N keys go through a ring of STAGES slots, each tile as 2 (d=128) 64-column boxes with the
//    128-byte swizzle, K and V on their own full barriers (transaction counts = box bytes) so S = Q K^T
//    can start before V has landed; a slot is given back by one arrival per consumer warp (empty, count
//    4 CONSUMERS) after the wgmma that read it has been waited for;
//  - S = Q K^T: HEAD_DIM/16 wgmma m64nBLOCK_Nk16, Q and K K-major SW128 descriptors (chapter 07's), the
//    first with scale-d = 0 (no zeroing of S); the online softmax runs on the accumulator registers
//    (exp2 with the scale folded, one FFMA + MUFU.EX2 per score; the conditional rescale of rungs 03-06,
//    per warp, RESCALE_TAU = 8; -inf-safe; masks only on tiles crossing the S tail or a consumer's
//    diagonal); P is packed to bf16 in registers (wgmma's accumulator map per 8 columns is mma.sync's,
//    its register-A map per warp is mma.sync's A map: 06's packing carries over) and is the register A
//    operand of O += P V: BLOCK_N/16 wgmma m64nHEAD_DIMk16 with V as the B operand read N-major
//    (imm-trans-b = 1, allowed for 16-bit types; V stays (S, d) row-major as TMA delivers it; MN-major
//    SW128 descriptor: LBO = the distance between the two 64-column boxes, SBO = 1024);
//  - OVERLAP=1 (FA3's intra-warpgroup pipelining): at tile j a consumer issues S_j = Q K_j^T and then
//    O += P_{j-1} V_{j-1}, waits for S_j only (wait_group 1), runs S_j's softmax while the tensor cores
//    work on P V, then waits (wait_group 0), rescales O and packs P_j. The two consumers are not
//    scheduled against each other (FA3's inter-warpgroup ping-pong with named barriers is not done
//    here: the next step); they interleave as the warp schedulers let them;
//  - causal: blocks heaviest first; tiles past a consumer's last row are waited for and released
//    without compute (only with BLOCK_N < BLOCK_M); O and the LSE are written straight from the
//    accumulators (4-byte bf16 pairs; rows past S skipped).
// Tensor maps instead of pointers: the kernel takes tmQ, tmK, tmV, the maps of Q, K, V viewed as 2-D
// (B H S) x HEAD_DIM arrays (built on the host: ch08.tensor_maps, labkit.measure.tensormap.tensor_map;
// the H200 script builds the same). A box that starts in one head and crosses its S reads the first rows
// of the next head (or zeros past the last): such keys are masked to -inf (P = 0, finite V times 0) and
// such query rows are never stored, so heads do not leak into each other.
// Macros: HEAD_DIM (128, 64), BLOCK_N (128 at d=128, 192 at d=64; 64, 176), STAGES (3 at d=128, 2 at
// d=64), CONSUMERS (2; 3 at d=64 only: 160 registers per consumer thread do not hold O, S and P at
// d=128, ptxas serialises), OVERLAP (1, 0), RESCALE_TAU (8).
// contract: Q K V O bf16 (B,H,S,HEAD_DIM) contiguous, LSE fp32 (B,H,S), 16-byte aligned, S >= 1,
//           B*H*S < 2^31, scale 1/sqrt(HEAD_DIM), causal: query i sees keys j <= i; sm_90a only
// Launch: flash_wgmma(tmQ, tmK, tmV, O, LSE, S, causal), grid (ceil(S / BLOCK_M), B * H), block
// 128 (CONSUMERS + 1) threads (384), dynamic shared memory SMEM_BYTES (1 KB alignment + Q 32 KB +
// STAGES x 64 KB + barriers = 230,480 B at the defaults, d=128; 115,768 B at d=64); launch_config()
// writes 05's 8 fields plus out[8] = 1 (tensor maps), out[9] = 64 (Q box rows), out[10] = BLOCK_N (K/V
// box rows).
// Build (NVRTC 13, sm_90a): 168 registers at launch (384 threads, 1 block per SM), consumer code up to
// R183 (d=128) / R151 (d=64) under its 240, no spills, no serialised wgmma; SASS: 32 HGMMA (16 of them
// HGMMA...tnspB with A from registers), 8 UTMALDG, 2 USETMAXREG (24 HGMMA / 4 UTMALDG at d=64).
// Checked without a GPU: labs/results/logs/2026-12-01/flash-wgmma-model.py (NumPy model of the smem
// layouts and descriptors, every thread's fragments, masks, rescale order and stores, and of the
// mbarrier ring under random interleavings). Checked and swept on the H200 (flash-attention-sweep-3.log).
//
// Prediction (H200, B=16 H=16 S=4096 d=128, 2.2e12 FLOPs non-causal; wgmma roof 947 TFLOP/s = 7.2 TFLOP/s
// per SM, ~2300 clocks per 128 x 128 tile pair of S and P V): 8192 blocks of 128 rows, one per SM at a
// time, 62.1 waves (1.5% in the last); per tile the softmax needs 16,384 MUFU.EX2 = 1024 clocks of the
// SM's 16/clock (44% of the MMA time) and ~320 issue slots per warp, which must hide under the MMAs:
// OVERLAP hides a consumer's softmax under its own P V and the other consumer's MMAs fill the rest, as
// far as the schedulers interleave them (no ping-pong). Exposed per block: Q and the first K tile
// (~1-2 us) and the first S without overlap, of ~37 us of MMAs: ~5%. L2 -> SM traffic 64 KB per tile
// pair: ~5.5 TB/s at 550 TFLOP/s (BLOCK_N=176 cuts it by 27%). Expect 500-600 TFLOP/s non-causal
// (0.72-0.87x cuDNN's 689-699, 1.4-1.6x SDPA flash's 364; the 550 target at the middle), causal 420-520
// (16.5 tiles per block on average: the fixed cost per block weighs twice), d=64 380-460 (the softmax
// per FLOP doubles: MUFU ~90% of the MMA time). OVERLAP=0: 15-25% slower. If it lands below 500, the
// first suspects are the missing inter-warpgroup ping-pong (FA3: +5-10%) and the direct O stores.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "attention_fwd"):
//   wgmma at 16x16x4096x128x0: 3.7478 ms, 586.7 TFLOP/s, 62.4% of wgmma, 1.86x SDPA flash
//   wgmma at 16x16x4096x128x1: 2.0397 ms, 539.1 TFLOP/s, 57.4% of wgmma, 1.79x SDPA flash
//   wgmma at 16x16x4096x64x0: 3.5340 ms, 311.1 TFLOP/s, 33.1% of wgmma, 1.02x SDPA flash
//   wgmma at 16x16x4096x64x1: 1.9197 ms, 286.4 TFLOP/s, 30.5% of wgmma, 1.01x SDPA flash
//   wgmma at 1x16x16384x128x0: 3.4332 ms, 640.5 TFLOP/s, 68.2% of wgmma, 1.95x SDPA flash
//
// requires: sm_90a
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef BLOCK_N                        // keys per K/V tile (the N of S = Q K^T): 64, 128, 176, 192;
#define BLOCK_N (HEAD_DIM == 64 ? 192 : 128)   // the H200 sweep's best per head dim
#endif
#ifndef STAGES                         // K/V ring slots: three fit at d=128 (225 KB), +8% over two there
#define STAGES (HEAD_DIM == 128 ? 3 : 2)
#endif
#ifndef CONSUMERS
#define CONSUMERS 2                    // consumer warpgroups, 64 query rows each: BLOCK_M = 64 CONSUMERS
#endif
#ifndef OVERLAP
#define OVERLAP 1                      // 1: softmax of tile j under P V of tile j-1 (FA3's intra-warpgroup
#endif                                 //    pipelining); 0: QK^T, softmax, PV one after the other
#ifndef RESCALE_TAU
#define RESCALE_TAU 8.0f               // rescale O only when a row max grows by more than this (log2 units)
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS (CONSUMERS == 2 ? 240 : 160)   // setmaxnreg of a consumer thread
#endif
#define PRODUCER_REGS 24

#define SL (SM_SCALE * LOG2E)          // scores -> log2 units: exp(x * scale) = 2^(x * SL)
#define LN2 0.6931471805599453f
#define BLOCK_M (64 * CONSUMERS)
#define NTHREADS (128 * (CONSUMERS + 1))
#define HALVES (HEAD_DIM / 64)         // 64-column (128-byte) boxes per row of Q, K, V
#define Q_SLAB (64 * 128)              // one consumer's 64 Q rows x 64 columns: 8 KB
#define Q_WG_BYTES (HALVES * Q_SLAB)   // one consumer's Q rows
#define KV_SLAB (BLOCK_N * 128)        // BLOCK_N rows x 64 columns of K or V
#define KV_BYTES (HALVES * KV_SLAB)    // one K (or V) tile
#define STAGE_BYTES (2 * KV_BYTES)
#define Q_OFF 0
#define KV_OFF (CONSUMERS * Q_WG_BYTES)
#define BAR_OFF (KV_OFF + STAGES * STAGE_BYTES)
#define NBARS (1 + 3 * STAGES)         // full_q, full_k[STAGES], full_v[STAGES], empty[STAGES]
#define SMEM_BYTES (1024 + BAR_OFF + 8 * NBARS)   // + 1024: the ring is aligned up to 1024 B in the kernel

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(BLOCK_N == 64 || BLOCK_N == 128 || BLOCK_N == 176 || BLOCK_N == 192, "BLOCK_N: 64, 128, 176, 192");
static_assert(STAGES >= 2 && STAGES <= 4, "STAGES: 2..4");
static_assert(CONSUMERS == 2 || CONSUMERS == 3, "CONSUMERS: 2 or 3");
static_assert(CONSUMERS == 2 || HEAD_DIM == 64, "CONSUMERS=3 only at HEAD_DIM=64 (160 registers per consumer thread)");
static_assert(KV_SLAB % 1024 == 0, "K/V boxes must be whole 1024-byte swizzle atoms");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "setmaxnreg: 64K registers per SM");

#include "common/bf16_bits.cuh"        // bf16_t, pack_bf16x2
#include "common/smem_addr.cuh"        // smem_u32
#include "common/fast_exp.cuh"         // fast_exp2, LOG2E, NEG_INF
#include "common/wgmma.cuh"            // desc_sw128, wgmma_fence, wgmma_commit, wgmma_wait, fence_acc
#include "common/wgmma_attn.cuh"       // wgmma_ss, wgmma_rs_tb, desc_sw128_mn, fence_regs
#include "common/mbarrier.cuh"         // mbar_init, fence_barrier_init, mbar_arrive_expect_tx, mbar_arrive, mbar_wait
#include "common/hopper_tma.cuh"       // TmaDesc, tma_load_2d
#include "common/setmaxnreg.cuh"       // regs_dealloc, regs_alloc
#include "common/launch_check.cuh"     // check_launch

__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float lg2_approx(float x)
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// S = Q K^T of one consumer: HEAD_DIM / 16 wgmma m64nBLOCK_Nk16 (issued, not waited for). k-step kk reads
// dims 16kk..16kk+15: box kk / 4 of Q and K, 32 (kk % 4) bytes into their 128-byte rows (the descriptor
// start moves by 2 (kk % 4) + box offset / 16; the 128-byte swizzle is applied by the hardware on the
// address bits, so a 32-byte step inside a 1024-byte-aligned atom is the K-major SW128 k-slice, as in
// chapter 07). The first k-step overwrites S (scale-d = 0), the others accumulate.
__device__ __forceinline__ void qk_issue(float (&s)[BLOCK_N / 2], unsigned long long dq, unsigned long long dk)
{
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        const unsigned qo = ((kk >> 2) * Q_SLAB + (kk & 3) * 32) >> 4;
        const unsigned ko = ((kk >> 2) * KV_SLAB + (kk & 3) * 32) >> 4;
        wgmma_ss<BLOCK_N>(s, dq + qo, dk + ko, kk > 0);
    }
}

// O += P V of one consumer: BLOCK_N / 16 wgmma m64nHEAD_DIMk16 with P's A fragment of key step kk
// (p[kk]) from registers and V's keys 16kk..16kk+15 as the N-major B operand: 16 rows of both boxes
// (2048 bytes into each: two whole atoms), the two 64-column boxes KV_SLAB apart (LBO).
__device__ __forceinline__ void pv_issue(float (&o)[HEAD_DIM / 2], const unsigned (&p)[BLOCK_N / 16][4],
                                         unsigned long long dv)
{
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) wgmma_rs_tb<HEAD_DIM>(o, p[kk], dv + ((kk * 2048) >> 4));
}

// Online softmax of one tile on the S accumulator, in place: s becomes p = 2^(s SL - m) (fp32), the
// running max m_run (log2 units) and the per-lane partial row sums l are updated, and the factor by
// which O must be rescaled is returned in alpha with `grow` telling whether any row of the warp needs it
// (warp-uniform; O itself is not touched here, because P V of the previous tile may still be in flight).
// Element 4j + q of s: row w + g + 8 (q >> 1), key n0 + 8j + 2t + (q & 1) (wgmma's accumulator map,
// that of mma.sync per 8-column group). MASK (diagonal and tail tiles): key >= S, and causal key > row,
// to -inf; dk and ks make each test one compare of a per-lane integer with a constant.
template <bool MASK>
__device__ __forceinline__ bool softmax_tile(float (&s)[BLOCK_N / 2], float (&m_run)[2], float (&l)[2],
                                             float (&alpha)[2], int n0, int wrow, int S, int causal, int lane)
{
    const int t = lane & 3, g = lane >> 2;
    const int dk = n0 + 2 * t - wrow - g;           // key - row = dk + 8j + (q & 1) - 8 (q >> 1)
    const int ks = S - n0 - 2 * t;                  // key >= S  <=>  8j + (q & 1) >= ks
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int h = q >> 1;
            if (MASK && (8 * j + (q & 1) >= ks || (causal && dk + 8 * j + (q & 1) - 8 * h > 0))) {
                s[4 * j + q] = NEG_INF;
            }
            mx[h] = fmaxf(mx[h], s[4 * j + q]);
        }
    bool grow = false;
    float tm[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        tm[h] = quad_max(mx[h]) * SL;
        grow |= tm[h] > m_run[h] + RESCALE_TAU;
    }
    const bool any = __any_sync(0xffffffffu, grow);
    alpha[0] = alpha[1] = 1.f;
    if (any) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float m_new = fmaxf(m_run[h], tm[h]);
            alpha[h] = fast_exp2(m_run[h] - (m_new == NEG_INF ? 0.f : m_new));   // m_run = -inf: 0
            m_run[h] = m_new;
            l[h] *= alpha[h];
        }
    }
    const float nm0 = m_run[0] == NEG_INF ? 0.f : -m_run[0];   // every key masked so far: p = 0
    const float nm1 = m_run[1] == NEG_INF ? 0.f : -m_run[1];
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        s[4 * j + 0] = fast_exp2(fmaf(s[4 * j + 0], SL, nm0));
        s[4 * j + 1] = fast_exp2(fmaf(s[4 * j + 1], SL, nm0));
        s[4 * j + 2] = fast_exp2(fmaf(s[4 * j + 2], SL, nm1));
        s[4 * j + 3] = fast_exp2(fmaf(s[4 * j + 3], SL, nm1));
        l[0] += s[4 * j + 0] + s[4 * j + 1];
        l[1] += s[4 * j + 2] + s[4 * j + 3];
    }
    return any;
}

// P (fp32, in the S accumulator) -> the bf16 A fragments of P V: key step kk = 8-column groups 2kk and
// 2kk+1 of S; wgmma's register A map of m64nNk16 is mma.sync's m16n8k16 A map per warp (a0: row g, keys
// 2t, 2t+1; a1: row g+8; a2: row g, keys 8+2t, 9+2t; a3: row g+8), the accumulator map per 8 columns
// is mma.sync's C map: so a0 = (s[8kk], s[8kk+1]), a1 = (s[8kk+2], s[8kk+3]), a2/a3 the next group.
__device__ __forceinline__ void pack_p(unsigned (&p)[BLOCK_N / 16][4], const float (&s)[BLOCK_N / 2])
{
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        p[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
        p[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
        p[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
        p[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

__device__ __forceinline__ void rescale_o(float (&o)[HEAD_DIM / 2], const float (&alpha)[2])
{
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 8; ++j) {
        o[4 * j + 0] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
    }
}

__device__ __forceinline__ void fence_p(unsigned (&p)[BLOCK_N / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) fence_regs(p[kk]);
}

// The softmax of tile j of this consumer, masked only where the tile crosses the S tail or (causal)
// the diagonal of the consumer's 64 rows [w0, w0 + 64).
__device__ __forceinline__ bool softmax_any(float (&s)[BLOCK_N / 2], float (&m_run)[2], float (&l)[2],
                                            float (&alpha)[2], int j, int w0, int wrow, int S, int causal,
                                            int lane)
{
    const int n0 = j * BLOCK_N;
    if (n0 + BLOCK_N > S || (causal && n0 + BLOCK_N - 1 > w0)) {
        return softmax_tile<true>(s, m_run, l, alpha, n0, wrow, S, causal, lane);
    }
    return softmax_tile<false>(s, m_run, l, alpha, n0, wrow, S, causal, lane);
}

// tmQ, tmK, tmV: tensor maps of Q, K, V viewed as (B H S) x HEAD_DIM bf16 arrays, 128-byte swizzle, boxes
// of 64 columns x 64 rows (Q) and 64 columns x BLOCK_N rows (K, V). O, LSE: plain pointers.
extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_wgmma(const __grid_constant__ TmaDesc tmQ, const __grid_constant__ TmaDesc tmK,
            const __grid_constant__ TmaDesc tmV, bf16_t* __restrict__ O, float* __restrict__ LSE, int S,
            int causal)
{
    check_launch(SMEM_BYTES, NTHREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base + Q_OFF, sKV = base + KV_OFF, bars = base + BAR_OFF;
    const unsigned full_q = bars;
#define FULL_K(s) (bars + 8u * (1 + (s)))
#define FULL_V(s) (bars + 8u * (1 + STAGES + (s)))
#define EMPTY(s) (bars + 8u * (1 + 2 * STAGES + (s)))
#define SLOT_K(s) (sKV + (unsigned)(s) * STAGE_BYTES)
#define SLOT_V(s) (SLOT_K(s) + KV_BYTES)

    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
    // causal: the heaviest query tiles (most key tiles) first, so the short ones fill the tail
    const int m0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BLOCK_M;
    const int n_end = causal ? min(S, m0 + BLOCK_M) : S;          // keys this block can see
    const int ntiles = (n_end + BLOCK_N - 1) / BLOCK_N;
    const int row0 = blockIdx.y * S;                               // the head's first row in the 2-D view

    if (threadIdx.x == 0) {
        mbar_init(full_q, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(FULL_K(s), 1);
            mbar_init(FULL_V(s), 1);
            mbar_init(EMPTY(s), 4 * CONSUMERS);                    // one arrival per consumer warp
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {                                                 // ---- producer warpgroup
        regs_dealloc<PRODUCER_REGS>();
        if (t == 0) {
            mbar_arrive_expect_tx(full_q, CONSUMERS * Q_WG_BYTES);
            for (int c = 0; c < CONSUMERS; ++c)
                for (int h = 0; h < HALVES; ++h)
                    tma_load_2d(sQ + c * Q_WG_BYTES + h * Q_SLAB, &tmQ, full_q, 64 * h, row0 + m0 + 64 * c);
            for (int j = 0; j < ntiles; ++j) {
                const int s = j % STAGES;
                const unsigned ph = (unsigned)(j / STAGES) & 1u;
                mbar_wait(EMPTY(s), ph ^ 1u);                      // the consumers are done with tile j - STAGES
                mbar_arrive_expect_tx(FULL_K(s), KV_BYTES);
                for (int h = 0; h < HALVES; ++h)
                    tma_load_2d(SLOT_K(s) + h * KV_SLAB, &tmK, FULL_K(s), 64 * h, row0 + j * BLOCK_N);
                mbar_arrive_expect_tx(FULL_V(s), KV_BYTES);
                for (int h = 0; h < HALVES; ++h)
                    tma_load_2d(SLOT_V(s) + h * KV_SLAB, &tmV, FULL_V(s), 64 * h, row0 + j * BLOCK_N);
            }
        }
        return;
    }

    // ---- consumer warpgroup c: query rows [w0, w0 + 64) of the head
    regs_alloc<CONSUMER_REGS>();
    const int c = wg - 1, lane = t & 31, warp = t >> 5;
    const int w0 = m0 + 64 * c, wrow = w0 + 16 * warp;            // the consumer's, the warp's first row
    // causal: tiles past the consumer's last row are all masked; they are waited for and released only
    const int my_tiles = causal ? min(ntiles, (min(S, w0 + 64) + BLOCK_N - 1) / BLOCK_N) : ntiles;
    const unsigned long long dq = desc_sw128(sQ + c * Q_WG_BYTES);
    const unsigned long long dk0 = desc_sw128(SLOT_K(0)), dv0 = desc_sw128_mn(SLOT_V(0), KV_SLAB);
    constexpr unsigned SLOT_D = STAGE_BYTES >> 4;                  // one ring slot in descriptor units

    float o[HEAD_DIM / 2];
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 2; ++i) o[i] = 0.f;
    float s[BLOCK_N / 2];
    unsigned p[BLOCK_N / 16][4];
    float m_run[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f}, alpha[2];

    mbar_wait(full_q, 0);
#if OVERLAP
    // tile 0: S, softmax, P (O is zero: nothing to rescale)
    mbar_wait(FULL_K(0), 0);
    wgmma_fence();
    qk_issue(s, dq, dk0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(s);
    softmax_any(s, m_run, l, alpha, 0, w0, wrow, S, causal, lane);
    pack_p(p, s);
    // tile j: S_j = Q K_j^T and O += P_{j-1} V_{j-1} issued together; S_j's softmax runs while the
    // tensor cores work on P V; O is rescaled and P_j packed once P V is done (it reads O and P).
#pragma unroll 1
    for (int j = 1; j < my_tiles; ++j) {
        const int sj = j % STAGES, sp = (j - 1) % STAGES;
        mbar_wait(FULL_K(sj), (unsigned)(j / STAGES) & 1u);
        wgmma_fence();
        qk_issue(s, dq, dk0 + sj * SLOT_D);
        wgmma_commit();
        mbar_wait(FULL_V(sp), (unsigned)((j - 1) / STAGES) & 1u);
        pv_issue(o, p, dv0 + sp * SLOT_D);
        wgmma_commit();
        wgmma_wait<1>();                                           // S_j has landed; P V may still run
        fence_acc(s);
        const bool grow = softmax_any(s, m_run, l, alpha, j, w0, wrow, S, causal, lane);
        wgmma_wait<0>();                                           // P_{j-1} V_{j-1} is done
        fence_acc(o);
        fence_p(p);
        if (lane == 0) mbar_arrive(EMPTY(sp));                     // K and V of tile j-1 are free
        if (grow) rescale_o(o, alpha);
        pack_p(p, s);
    }
    {
        const int j = my_tiles - 1, sl = j % STAGES;
        mbar_wait(FULL_V(sl), (unsigned)(j / STAGES) & 1u);
        wgmma_fence();
        pv_issue(o, p, dv0 + sl * SLOT_D);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(o);
        fence_p(p);
        if (lane == 0) mbar_arrive(EMPTY(sl));
    }
#else
#pragma unroll 1
    for (int j = 0; j < my_tiles; ++j) {
        const int sj = j % STAGES;
        const unsigned ph = (unsigned)(j / STAGES) & 1u;
        mbar_wait(FULL_K(sj), ph);
        wgmma_fence();
        qk_issue(s, dq, dk0 + sj * SLOT_D);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(s);
        if (softmax_any(s, m_run, l, alpha, j, w0, wrow, S, causal, lane)) rescale_o(o, alpha);
        pack_p(p, s);
        mbar_wait(FULL_V(sj), ph);
        wgmma_fence();
        pv_issue(o, p, dv0 + sj * SLOT_D);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(o);
        fence_p(p);
        if (lane == 0) mbar_arrive(EMPTY(sj));
    }
#endif
    // causal: the tiles of the block past this consumer's rows: wait for them (a slot must not be
    // released before its copies have landed) and release them
#pragma unroll 1
    for (int j = my_tiles; j < ntiles; ++j) {
        const int sj = j % STAGES;
        const unsigned ph = (unsigned)(j / STAGES) & 1u;
        mbar_wait(FULL_K(sj), ph);
        mbar_wait(FULL_V(sj), ph);
        if (lane == 0) mbar_arrive(EMPTY(sj));
    }

    // Epilogue straight from the accumulators: O / l as bf16 pairs (rows past S skipped), the LSE
    // (natural log) by the quad's lane 0. A row with l = 0 (every key masked) gets O = 0, LSE = -inf.
    const int g = lane >> 2, tq = lane & 3;
    bf16_t* Oh = O + (size_t)blockIdx.y * S * HEAD_DIM;
    float* Lh = LSE + (size_t)blockIdx.y * S;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wrow + g + 8 * h;
        const float l_row = quad_sum(l[h]);
        const float inv = l_row > 0.f ? 1.f / l_row : 0.f;
        if (r < S) {
            unsigned* dst = reinterpret_cast<unsigned*>(Oh + (size_t)r * HEAD_DIM + 2 * tq);
#pragma unroll
            for (int j = 0; j < HEAD_DIM / 8; ++j) {
                dst[4 * j] = pack_bf16x2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
            }
            if (tq == 0) Lh[r] = l_row > 0.f ? (m_run[h] + lg2_approx(l_row)) * LN2 : NEG_INF;
        }
    }
#undef FULL_K
#undef FULL_V
#undef EMPTY
#undef SLOT_K
#undef SLOT_V
}

// The launch configuration of this build, for the host: out[0..7] = BLOCK_M, BLOCK_N, threads per
// block, dynamic shared memory bytes, HEAD_DIM, K/V stages, warps (consumer warps), swizzle (1: the
// 128-byte TMA swizzle); out[8] = 1: the kernel takes tensor maps of Q, K, V (not pointers);
// out[9], out[10] = the rows of the Q box and of the K/V box (64 columns each).
// Grid: (ceil(S / BLOCK_M), B * H).
extern "C" __global__ void launch_config(int* out)
{
    const int v[11] = {BLOCK_M, BLOCK_N, NTHREADS, SMEM_BYTES, HEAD_DIM, STAGES, 4 * CONSUMERS, 1, 1, 64, BLOCK_N};
    for (int i = 0; i < 11; ++i) out[i] = v[i];
}

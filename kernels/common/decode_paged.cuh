// The paged KV cache of chapter 09's rungs 03 to 05: its layout, the cp.async copy of one stage of
// keys through the block table, and the ring of stages that keeps NSTG - 1 of them in flight while the
// block computes on one. Introduced in chapter 09 (03_paged.cu); 04_paged_mma.cu reuses it, with the MMA
// key step below; 05_fused_merge.cu adds the block table in shared memory and the merge of the splits
// inside the split kernel, through the same ring. sm_80 on.
//
// Layout: K and V are pools of pages (num_pages, Hkv, P, D) bf16, a page holding P consecutive keys of
// one sequence for every KV head, each head's P rows contiguous (P D 2 bytes: 4 KB at P = 16, d = 128),
// so the rows one block reads (one KV head) come in runs of whole 128-byte lines. The block table bt
// (B, max_pages) int32 maps key t of sequence b to row t % P of page bt[b][t / P]; entries past the
// sequence's length are never read (holes, -1, are fine). P: a power of two, 16..256 (or any power of
// two), passed at run time as its log2 (pshift).
// Shared layout of a stage: the K tile of RK rows, then the V tile; 16-byte chunk c of row r at
// r * PITCH * 2 + swz(r, c) * 16 (the same map as flash_mma.cuh's fa_off; SWIZZLE 0 and PITCH = D give
// plain rows). Include after defining SWIZZLE.
#pragma once
#include "common/bf16_bits.cuh"       // bf16_t
#include "common/cp_async.cuh"        // cp_async16, cp_async_commit, cp_async_wait
#include "common/smem_swizzle.cuh"    // swz
#include "common/flash_mma.cuh"       // fa_qk, fa_pv, fa_quad_max, fa_quad_sum (the MMA key step)
#include "common/decode_attn.cuh"     // dec_finish, DEC_LN2, dec_log2

template <int D, int PITCH>
__device__ __forceinline__ unsigned dec_off(int r, int c)
{
    return (unsigned)(r * (PITCH * 2) + swz(r, c, D / 8) * 16);
}

// Page ids of the rows this thread copies in the stage of keys [kb, kb + RK) (-1 past k1: nothing read).
// Plain loads, issued one stage ahead of the copies that use them: the block-table lookup is in flight
// while a stage is computed, never in front of a copy.
template <int RK, int D, int NT>
__device__ __forceinline__ void dec_stage_pages(int (&pg)[RK * (D / 8) / NT], const int* __restrict__ bt,
                                                int kb, int k1, int pshift, int tid)
{
    constexpr int CH = D / 8, CPT = RK * CH / NT;
#pragma unroll
    for (int i = 0; i < CPT; ++i) {
        const int key = kb + (tid + i * NT) / CH;
        pg[i] = key < k1 ? __ldg(bt + (key >> pshift)) : -1;
    }
}

// The K and V rows of keys [kb, kb + RK) into the stage's tiles at sK, sV (shared addresses): CPT
// 16-byte cp.asyncs of K and as many of V per thread; rows past the end are zero-filled (so that p = 0
// times a zero V row stays 0). page_elems = Hkv P D, head_elems = hkv P D, pmask = P - 1.
template <int RK, int D, int PITCH, int NT>
__device__ __forceinline__ void dec_stage_copy(unsigned sK, unsigned sV, const bf16_t* __restrict__ K,
                                               const bf16_t* __restrict__ V,
                                               const int (&pg)[RK * (D / 8) / NT], int kb, size_t page_elems,
                                               size_t head_elems, int pmask, int tid)
{
    constexpr int CH = D / 8, CPT = RK * CH / NT;
#pragma unroll
    for (int i = 0; i < CPT; ++i) {
        const int q = tid + i * NT, r = q / CH, c = q % CH;
        const bool ok = pg[i] >= 0;
        const size_t at = ok ? (size_t)pg[i] * page_elems + head_elems
                                   + (size_t)((kb + r) & pmask) * D + c * 8 : 0;
        const unsigned so = dec_off<D, PITCH>(r, c);
        cp_async16(sK + so, K + at, ok ? 16 : 0);
        cp_async16(sV + so, V + at, ok ? 16 : 0);
    }
}

// The ring: keys [k0, k1) in stages of RK through NSTG slots of 2 RK PITCH 2 bytes at sRing.
// Prologue: stages 0 .. NSTG-2 issued (one commit group each), then start() (the caller's own
// set-up, overlapping those copies). Stage j: wait until it has landed for this thread, one barrier
// (publishes stage j to every thread, and tells that every warp is done with stage j-1, whose slot then
// takes the copies of stage j+NSTG-1), consume(sK, sV, kb). Ends with every copy landed and a
// barrier, so the caller may reuse the ring's memory.
template <int RK, int D, int PITCH, int NT, int NSTG, typename Start, typename Consume>
__device__ __forceinline__ void dec_paged_ring(unsigned sRing, const bf16_t* __restrict__ K,
                                               const bf16_t* __restrict__ V, const int* __restrict__ bt,
                                               int k0, int k1, size_t page_elems, size_t head_elems,
                                               int pshift, int tid, Start&& start, Consume&& consume)
{
    static_assert((RK * (D / 8)) % NT == 0, "a stage's chunks: a multiple of the block's threads");
    static_assert(NSTG >= 2, "at least 2 stages");
    constexpr int CPT = RK * (D / 8) / NT, TILE = RK * PITCH * 2, STAGE = 2 * TILE;
    const int T = k1 > k0 ? (k1 - k0 + RK - 1) / RK : 0;
    const int pmask = (1 << pshift) - 1;
    int pg[CPT];
    dec_stage_pages<RK, D, NT>(pg, bt, k0, k1, pshift, tid);
#pragma unroll
    for (int i = 0; i < NSTG - 1; ++i) {
        if (i < T) {
            dec_stage_copy<RK, D, PITCH, NT>(sRing + i * STAGE, sRing + i * STAGE + TILE, K, V, pg,
                                             k0 + i * RK, page_elems, head_elems, pmask, tid);
            dec_stage_pages<RK, D, NT>(pg, bt, k0 + (i + 1) * RK, k1, pshift, tid);
        }
        cp_async_commit();
    }
    start();
    int rd = 0, wr = NSTG - 1;
    for (int j = 0; j < T; ++j) {
        cp_async_wait<NSTG - 2>();
        __syncthreads();
        if (j + NSTG - 1 < T) {
            const int kb = k0 + (j + NSTG - 1) * RK;
            dec_stage_copy<RK, D, PITCH, NT>(sRing + wr * STAGE, sRing + wr * STAGE + TILE, K, V, pg, kb,
                                             page_elems, head_elems, pmask, tid);
            dec_stage_pages<RK, D, NT>(pg, bt, kb + RK, k1, pshift, tid);
        }
        cp_async_commit();
        consume(sRing + rd * STAGE, sRing + rd * STAGE + TILE, k0 + j * RK);
        rd = rd == NSTG - 1 ? 0 : rd + 1;
        wr = wr == NSTG - 1 ? 0 : wr + 1;
    }
    cp_async_wait<0>();
    __syncthreads();
}

// ---------------------------------------------------------------------------------------------------
// The same ring with the copies left to the caller: T stages of STAGE bytes through NSTG slots at base;
// issue(slot, i) issues the cp.asyncs of stage i (every thread, in stage order), consume(slot, j)
// computes on stage j; prologue, start(), waits and barriers as in dec_paged_ring.
template <int STAGE, int NSTG, typename Issue, typename Start, typename Consume>
__device__ __forceinline__ void dec_ring(unsigned base, int T, Issue&& issue, Start&& start, Consume&& consume)
{
    static_assert(NSTG >= 2, "at least 2 stages");
#pragma unroll
    for (int i = 0; i < NSTG - 1; ++i) {
        if (i < T) issue(base + i * STAGE, i);
        cp_async_commit();
    }
    start();
    int rd = 0, wr = NSTG - 1;
    for (int j = 0; j < T; ++j) {
        cp_async_wait<NSTG - 2>();
        __syncthreads();
        if (j + NSTG - 1 < T) issue(base + wr * STAGE, j + NSTG - 1);
        cp_async_commit();
        consume(base + rd * STAGE, j);
        rd = rd == NSTG - 1 ? 0 : rd + 1;
        wr = wr == NSTG - 1 ? 0 : wr + 1;
    }
    cp_async_wait<0>();
    __syncthreads();
}

// ---------------------------------------------------------------------------------------------------
// The block table in shared memory (rung 05). A split's page ids are loaded into a window of CAP ints
// in one round of loads before the ring starts, so no copy waits on a block-table load and the
// prologue's stages go out back to back; a split of more than CAP pages moves the window when a stage
// needs it (one block-wide load stall every CAP pages: every 16384 keys at CAP 1024, P 16).

// A hint issued before seq_lens[b] arrives: the 128-byte lines of the table that split `split` reads if
// the sequence fills its row of the table (its keys split as dec_split_range splits max_pages P), into
// L2, so that the window's loads hit L2 when the row is full. A wrong guess costs a few line reads.
template <int ALIGN, int NT, int CAP>
__device__ __forceinline__ void dec_bt_prefetch(const int* __restrict__ bt, int max_pages, int pshift,
                                                int nsplit, int split, int tid)
{
    const long long cap = (long long)max_pages << pshift;
    long long chunk = (cap + nsplit - 1) / nsplit;
    chunk = (chunk + ALIGN - 1) / ALIGN * ALIGN;
    const long long k0 = min(cap, split * chunk), k1 = min(cap, k0 + chunk);
    if (k1 <= k0) return;
    const long long p0 = k0 >> pshift;
    const int n = (int)min((long long)CAP, ((k1 - 1) >> pshift) + 1 - p0);
    for (int i = tid * 32; i < n + 31; i += NT * 32)            // one address in each line of the slice
        asm volatile("prefetch.global.L2 [%0];" ::"l"(bt + p0 + min(i, n - 1)));
}

// Entries [p0, min(p0 + CAP, pend)) of the table into the window (no barrier: the caller's).
template <int NT, int CAP>
__device__ __forceinline__ void dec_bt_window(int* sBT, const int* __restrict__ bt, int p0, int pend, int tid)
{
    const int n = min(CAP, pend - p0);
#pragma unroll 4
    for (int i = tid; i < n; i += NT) sBT[i] = __ldg(bt + p0 + i);
}

// dec_stage_copy with the page ids read from the window sBT, whose first entry is page w0 (every key of
// the stage below k1 lies in it); keys at or past k1 are zero-filled and read no global memory.
template <int RK, int D, int PITCH, int NT>
__device__ __forceinline__ void dec_stage_copy_tab(unsigned sK, unsigned sV, const bf16_t* __restrict__ K,
                                                   const bf16_t* __restrict__ V, const int* sBT, int w0,
                                                   int kb, int k1, size_t page_elems, size_t head_elems,
                                                   int pshift, int tid)
{
    constexpr int CH = D / 8, CPT = RK * CH / NT;
    const int pmask = (1 << pshift) - 1;
#pragma unroll
    for (int i = 0; i < CPT; ++i) {
        const int q = tid + i * NT, r = q / CH, c = q % CH, key = kb + r;
        const bool ok = key < k1;
        const int pg = sBT[ok ? (key >> pshift) - w0 : 0];       // an index inside the window either way
        const size_t at = ok ? (size_t)pg * page_elems + head_elems + (size_t)(key & pmask) * D + c * 8 : 0;
        const unsigned so = dec_off<D, PITCH>(r, c);
        cp_async16(sK + so, K + at, ok ? 16 : 0);
        cp_async16(sV + so, V + at, ok ? 16 : 0);
    }
}

// dec_paged_ring with the page ids from the window sBT (CAP ints of shared memory): the window is
// loaded (and published by a barrier) before the prologue; consume(sK, sV, kb) as there.
template <int RK, int D, int PITCH, int NT, int NSTG, int CAP, typename Start, typename Consume>
__device__ __forceinline__ void dec_paged_ring_tab(unsigned sRing, int* sBT, const bf16_t* __restrict__ K,
                                                   const bf16_t* __restrict__ V, const int* __restrict__ bt,
                                                   int k0, int k1, size_t page_elems, size_t head_elems,
                                                   int pshift, int tid, Start&& start, Consume&& consume)
{
    static_assert((RK * (D / 8)) % NT == 0, "a stage's chunks: a multiple of the block's threads");
    static_assert(RK <= CAP, "the pages of one stage fit the window whatever P");
    constexpr int TILE = RK * PITCH * 2;
    const int T = k1 > k0 ? (k1 - k0 + RK - 1) / RK : 0;
    const int pend = k1 > k0 ? ((k1 - 1) >> pshift) + 1 : 0;     // one past the split's last page
    int w0 = k0 >> pshift;                                        // the window's first page
    dec_bt_window<NT, CAP>(sBT, bt, w0, pend, tid);
    __syncthreads();
    dec_ring<2 * TILE, NSTG>(
        sRing, T,
        [&](unsigned s, int i) {
            const int kb = k0 + i * RK;
            // The first window holds the prologue's stages whenever they span at most CAP keys: then a
            // constant false in the unrolled prologue, which carries no refill code.
            const bool may_move = i >= NSTG - 1 || (i + 1) * RK > CAP;
            if (may_move && ((min(kb + RK, k1) - 1) >> pshift) >= w0 + CAP) {   // block-uniform, rare
                __syncthreads();                                     // every thread is done with the window
                w0 = kb >> pshift;
                dec_bt_window<NT, CAP>(sBT, bt, w0, pend, tid);
                __syncthreads();
            }
            dec_stage_copy_tab<RK, D, PITCH, NT>(s, s + TILE, K, V, sBT, w0, kb, k1, page_elems, head_elems,
                                                 pshift, tid);
        },
        start, [&](unsigned s, int j) { consume(s, s + TILE, k0 + j * RK); });
}

// ---------------------------------------------------------------------------------------------------
// The MMA key step of rungs 04 and 05: the G query rows of the group (zero rows up to 16) are the A
// operand of mma.sync m16n8k16; a warp takes KW keys of a stage (its K rows at sK, V rows at sV, tiles
// of pitch D, swizzled), keys n0 .. n0 + KW - 1 of which those at or past k1 are masked. Lane (g =
// lane / 4, t = lane % 4) keeps the online-softmax state of row g: m_run (log2 units), l (its own
// partial sum, quad-reduced at the end), o (rows g and g + 8 of the accumulators; g + 8 unused).
// sl = scale * log2 e.
template <int D, int KW>
__device__ __forceinline__ void dec_mma_keys(float (&o)[D / 8][4], float& m_run, float& l,
                                             const unsigned (&qf)[D / 16][4], unsigned sK, unsigned sV,
                                             int n0, int k1, float sl, int lane)
{
    const int t = lane & 3;
    float s[KW / 8][4];
    fa_qk<D, D, KW>(s, qf, sK, lane);
    float mx = NEG_INF;                                     // row g only (c[0], c[1])
#pragma unroll
    for (int n = 0; n < KW / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int key = n0 + n * 8 + 2 * t + (i & 1);
            s[n][i] = key < k1 ? s[n][i] * sl : NEG_INF;
            if (i < 2) mx = fmaxf(mx, s[n][i]);
        }
    const float m_new = fmaxf(m_run, fa_quad_max(mx));
    const float mu = m_new == NEG_INF ? 0.f : m_new;
    const float alpha = fast_exp2(m_run - mu);
    m_run = m_new;
    l *= alpha;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= alpha;
        o[n][1] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < KW / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            s[n][i] = i < 2 ? fast_exp2(s[n][i] - mu) : 0.f;   // rows g + 8: dropped
            l += s[n][i];
        }
    fa_pv<D, D, KW>(o, s, sV, lane);
}

// After the ring: the warps' states, rows g < G of each, into shared memory for dec_finish (sm_m, sm_l
// [NW][G] and sm_o [NW][G][D], in the drained ring's memory; the caller's barrier publishes them).
// lane and t = lane % 4 as the caller has them.
template <int G, int D, int NW>
__device__ __forceinline__ void dec_mma_states(float* sm_m, float* sm_l, float* sm_o, const float (&o)[D / 8][4],
                                               float m_run, float l, int warp, int lane, int t)
{
    const float l_row = fa_quad_sum(l);
    const int g = lane >> 2;
    if (g < G) {
        float* d = sm_o + (warp * G + g) * D + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            d[n * 8] = o[n][0];
            d[n * 8 + 1] = o[n][1];
        }
        if (t == 0) {
            sm_m[warp * G + g] = m_run;
            sm_l[warp * G + g] = l_row;
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// The merge of the nsplit splits of query heads row0 .. row0 + G - 1 inside the split kernel (rung 05),
// by the last block of their (sequence, KV head) to finish (dec_last_arrival): dec_merge_body's
// arithmetic for G heads at once. The weights first (warp per head, lanes over the splits, one round
// of loads: M_g, w_gs = e^(lse_gs - M_g) into shared memory, W_g = sum_s w_gs), while the partial
// outputs come through the ring (its NSTG slots of STAGE bytes at sBuf, gBuf the same memory as a
// pointer): SC = STAGE / (G D 4) splits of the G heads per stage, cp.async.cg, so up to NSTG - 1 stages
// of loads are in flight with no register holding them. Thread per 4 dims of a head: out = sum_s w_s o_s
// / W, lse = M + ln W (W = 0: out 0, lse -inf). The workspace was written by other blocks of this launch:
// every read goes to L2 (ld.global.cg, cp.async.cg), never a stale L1 line. nsplit <= MAXS.
template <int G, int D, int NT, int NSTG, int STAGE, int MAXS>
__device__ __forceinline__ void dec_merge_group(const float* __restrict__ ws_o, const float* __restrict__ ws_lse,
                                                bf16_t* __restrict__ out, float* __restrict__ lse, size_t row0,
                                                int nsplit, unsigned sBuf, const unsigned char* gBuf, int tid)
{
    constexpr int NW = NT / 32, SC = STAGE / (G * D * 4), ITEMS = G * D / 4, IPT = (ITEMS + NT - 1) / NT;
    static_assert(SC >= 1, "a stage holds at least one split of the G heads");
    static_assert(MAXS % 32 == 0, "MAXS: whole warps of splits");
    __shared__ float w_sh[G * MAXS];
    __shared__ float mu_sh[G], W_sh[G];
    const int lane = tid & 31, warp = tid >> 5;
    float4 acc[IPT];
#pragma unroll
    for (int it = 0; it < IPT; ++it) acc[it] = make_float4(0.f, 0.f, 0.f, 0.f);
    dec_ring<STAGE, NSTG>(
        sBuf, (nsplit + SC - 1) / SC,
        [&](unsigned s, int k) {                           // splits [k SC, k SC + n): G runs of n D floats
            const int s0 = k * SC, n = min(SC, nsplit - s0);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float* src = ws_o + ((row0 + g) * nsplit + s0) * D;
                const unsigned dst = s + g * (SC * D * 4);
                for (int i = tid; i < n * (D / 4); i += NT) cp_async16(dst + i * 16, src + i * 4, 16);
            }
        },
        [&] {
            constexpr int GW = (G + NW - 1) / NW;               // heads per warp
            float x[GW][MAXS / 32];
#pragma unroll
            for (int gi = 0; gi < GW; ++gi)                      // every head's LSEs in one round of loads
#pragma unroll
                for (int i = 0; i < MAXS / 32; ++i) {
                    const int g = warp + gi * NW, s = lane + 32 * i;
                    x[gi][i] = g < G && s < nsplit ? __ldcg(ws_lse + (row0 + g) * nsplit + s) : NEG_INF;
                }
#pragma unroll
            for (int gi = 0; gi < GW; ++gi) {
                const int g = warp + gi * NW;
                if (g >= G) break;                               // warp-uniform
                float mx = NEG_INF;
#pragma unroll
                for (int i = 0; i < MAXS / 32; ++i) mx = fmaxf(mx, x[gi][i]);
#pragma unroll
                for (int off = 16; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
                const float mu = mx == NEG_INF ? 0.f : mx;        // every split empty: weights 0, no NaN
                float sum = 0.f;
#pragma unroll
                for (int i = 0; i < MAXS / 32; ++i) {
                    const int s = lane + 32 * i;
                    const float w = fast_exp2((x[gi][i] - mu) * LOG2E);
                    if (s < nsplit) w_sh[g * MAXS + s] = w;
                    sum += w;
                }
#pragma unroll
                for (int off = 16; off >= 1; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
                if (lane == 0) {
                    mu_sh[g] = mu;
                    W_sh[g] = sum;
                }
            }
        },
        [&](unsigned s, int k) {
            const int s0 = k * SC, n = min(SC, nsplit - s0);
            const float* buf = reinterpret_cast<const float*>(gBuf + (s - sBuf));
#pragma unroll
            for (int it = 0; it < IPT; ++it) {
                const int i = tid + it * NT;
                if (ITEMS % NT != 0 && i >= ITEMS) break;
                const int g = i / (D / 4), c4 = i % (D / 4);
                const float4* src = reinterpret_cast<const float4*>(buf + g * SC * D) + c4;
                const float* w = w_sh + g * MAXS + s0;
#pragma unroll 4
                for (int j = 0; j < n; ++j) {
                    const float4 v = src[j * (D / 4)];
                    const float e = w[j];
                    acc[it].x = fmaf(e, v.x, acc[it].x);
                    acc[it].y = fmaf(e, v.y, acc[it].y);
                    acc[it].z = fmaf(e, v.z, acc[it].z);
                    acc[it].w = fmaf(e, v.w, acc[it].w);
                }
            }
        });
#pragma unroll
    for (int it = 0; it < IPT; ++it) {
        const int i = tid + it * NT;
        if (ITEMS % NT != 0 && i >= ITEMS) break;
        const int g = i / (D / 4), c4 = i % (D / 4);
        const float W = W_sh[g];
        const float4 a = acc[it];
        const uint2 p = W > 0.f ? make_uint2(pack_bf16x2(a.x / W, a.y / W), pack_bf16x2(a.z / W, a.w / W))
                                : make_uint2(0u, 0u);
        *reinterpret_cast<uint2*>(out + (row0 + g) * D + c4 * 4) = p;
        if (c4 == 0) lse[row0 + g] = W > 0.f ? mu_sh[g] + dec_log2(W) * DEC_LN2 : NEG_INF;
    }
}

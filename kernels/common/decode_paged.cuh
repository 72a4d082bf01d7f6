// The paged KV cache of chapter 09's rungs 03 and 04: its layout, the cp.async copy of one stage of
// keys through the block table, and the ring of stages that keeps NSTG - 1 of them in flight while the
// block computes on one. Introduced in chapter 09 (03_paged.cu); 04_paged_mma.cu reuses it. sm_80 on.
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

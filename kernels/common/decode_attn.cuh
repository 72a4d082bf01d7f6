// The pieces every decode-attention rung of chapter 09 shares: the split of one sequence's keys into
// NSPLIT chunks, the SIMT key step (G query heads of a GQA group against one K/V row per 16 lanes), the
// block epilogue that merges the block's partial softmax states and writes either the final output or a
// split's partial (o / l, lse) to the workspace, and the merge of the splits. Introduced in chapter 09
// (01_one_block_per_head.cu to 04_paged_mma.cu); 05_fused_merge.cu adds the election of the block that
// merges the splits inside the split kernel (dec_last_arrival).
//
// Units: scores are kept in log2 units (q is pre-scaled by scale * log2 e, so p = 2^(s - m)); every LSE
// that leaves a kernel is natural: lse = (m + log2 l) ln 2. An empty state (no key) is m = -inf, l = 0,
// o = 0; it contributes nothing to any merge, and a row with no key at all gets o = 0, lse = -inf.
// Layouts: q, out (B, Hq, D) bf16; lse (B, Hq) fp32; workspace ws_o (B, Hq, nsplit, D) fp32 holding the
// split's NORMALISED output o / l, ws_lse (B, Hq, nsplit) fp32 natural; Hq = G * Hkv, query head
// hkv * G + g reads KV head hkv.
#pragma once
#include "common/bf16_bits.cuh"   // bf16_t, pack_bf16x2
#include "common/fast_exp.cuh"    // fast_exp2, LOG2E, NEG_INF

#define DEC_LN2 0.6931471805599453f

__device__ __forceinline__ float dec_log2(float x)   // lg2.approx; log2(0) = -inf
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float bf16_to_f32(bf16_t x) { return __uint_as_float((unsigned)x << 16); }

// 16 bytes (8 bf16) -> 8 floats in address order (exact: a bf16 is the top half of an fp32).
__device__ __forceinline__ void dec_unpack8(const uint4 v, float (&f)[8])
{
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// Keys [k0, k1) of split `split` of a sequence of len keys: chunks of ceil(len / nsplit) rounded up to
// ALIGN keys, so the last splits of a short sequence are empty (k0 >= k1).
template <int ALIGN>
__device__ __forceinline__ void dec_split_range(int len, int nsplit, int split, int& k0, int& k1)
{
    int chunk = (len + nsplit - 1) / nsplit;
    chunk = (chunk + ALIGN - 1) / ALIGN * ALIGN;
    k0 = min(len, split * chunk);
    k1 = min(len, k0 + chunk);
}

// q of the G heads of the group, this lane's 8 dims [8 sub, 8 sub + 8), times scale * log2 e.
template <int G, int D>
__device__ __forceinline__ void dec_load_q(float (&q)[G][8], const bf16_t* __restrict__ qg, int sub, float sl)
{
#pragma unroll
    for (int g = 0; g < G; ++g) {
        float f[8];
        dec_unpack8(*reinterpret_cast<const uint4*>(qg + (size_t)g * D + sub * 8), f);
#pragma unroll
        for (int j = 0; j < 8; ++j) q[g][j] = f[j] * sl;
    }
}

// One SIMT step of U keys for the D/8 lanes that share them (lane sub of the group owns dims 8 sub ..
// 8 sub + 7; kr[u], vr[u] are its 16 bytes of key u's K and V rows; ok[u]: key u exists). Scores: the
// 8-dim partial dots summed over the group's lanes by xor shuffles (every lane ends with the full score),
// then the online-softmax update of the G running states (m, l identical in the group's lanes; o is the
// lane's 8 dims). Must be called by whole warps (the shuffles use the full mask).
template <int G, int D, int U>
__device__ __forceinline__ void dec_simt_step(float (&o)[G][8], float (&m)[G], float (&l)[G],
                                              const float (&q)[G][8], const uint4 (&kr)[U],
                                              const uint4 (&vr)[U], const bool (&ok)[U])
{
    constexpr int lpk = D / 8;                                   // lanes per key row
    float s[U][G];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        float kf[8];
        dec_unpack8(kr[u], kf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float a = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) a = fmaf(q[g][j], kf[j], a);
            s[u][g] = a;
        }
    }
#pragma unroll
    for (int off = lpk / 2; off >= 1; off >>= 1)
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int g = 0; g < G; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        float mx = m[g];
#pragma unroll
        for (int u = 0; u < U; ++u) mx = fmaxf(mx, ok[u] ? s[u][g] : NEG_INF);
        const float mu = mx == NEG_INF ? 0.f : mx;               // nothing seen yet: p = 0, no NaN
        const float alpha = fast_exp2(m[g] - mu);
        m[g] = mx;
        l[g] *= alpha;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[g][j] *= alpha;
#pragma unroll
        for (int u = 0; u < U; ++u) s[u][g] = ok[u] ? fast_exp2(s[u][g] - mu) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        float vf[8];
        dec_unpack8(vr[u], vf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            l[g] += s[u][g];
#pragma unroll
            for (int j = 0; j < 8; ++j) o[g][j] = fmaf(s[u][g], vf[j], o[g][j]);
        }
    }
}

// Block epilogue: NPART partial states in shared memory (sm_m, sm_l [NPART][G], log2 units; sm_o
// [NPART][G][D], unnormalised) merged into the result of the G heads of this block. row0 = b * Hq + hkv * G.
// nsplit == 1: bf16 out and lse; else this split's o / l and lse into the workspace.
template <int G, int D, int NPART, int NT>
__device__ __forceinline__ void dec_finish(const float* sm_m, const float* sm_l, const float* sm_o, int tid,
                                           size_t row0, int nsplit, int split, bf16_t* __restrict__ out,
                                           float* __restrict__ lse, float* __restrict__ ws_o,
                                           float* __restrict__ ws_lse)
{
    for (int i = tid; i < G * D; i += NT) {
        const int g = i / D, c = i % D;
        float M = NEG_INF;
#pragma unroll
        for (int s = 0; s < NPART; ++s) M = fmaxf(M, sm_m[s * G + g]);
        const float mu = M == NEG_INF ? 0.f : M;
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int s = 0; s < NPART; ++s) {
            const float w = fast_exp2(sm_m[s * G + g] - mu);
            L = fmaf(sm_l[s * G + g], w, L);
            O = fmaf(sm_o[(s * G + g) * D + c], w, O);
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;
        const float lse_nat = L > 0.f ? (M + dec_log2(L)) * DEC_LN2 : NEG_INF;
        const size_t row = row0 + g;
        if (nsplit == 1) {
            const unsigned p = pack_bf16x2(O * inv, 0.f);
            out[row * D + c] = (bf16_t)(p & 0xffffu);
            if (c == 0) lse[row] = lse_nat;
        } else {
            ws_o[(row * nsplit + split) * D + c] = O * inv;
            if (c == 0) ws_lse[row * nsplit + split] = lse_nat;
        }
    }
}

// The merge of the splits of one (sequence, query head) = blockIdx.x, one thread per dim (D threads):
// M = max lse_s, w_s = e^(lse_s - M), out = sum w_s o_s / sum w_s, lse = M + ln sum w_s. Splits with
// lse = -inf (empty) weigh 0; if all are empty, out = 0 and lse = -inf. Latency, not bytes, is its cost
// (1 MB at batch 1 and 64 splits): the lse_s are loaded in one round (split s by thread s % D), reduced
// in the block, the weights kept in shared memory, and the o_s loads unrolled 8 deep. nsplit <= 1024.
#define DEC_MAX_SPLITS 1024
template <int D>
__device__ __forceinline__ void dec_merge_body(const float* __restrict__ ws_o,
                                               const float* __restrict__ ws_lse, bf16_t* __restrict__ out,
                                               float* __restrict__ lse, int nsplit)
{
    static_assert(D % 32 == 0 && D <= 1024, "one thread per dim, whole warps");
    __shared__ float w_sh[DEC_MAX_SPLITS];
    __shared__ float red[D / 32];
    const size_t row = blockIdx.x;
    const int c = threadIdx.x, lane = c & 31, warp = c >> 5;
    const float* L = ws_lse + row * nsplit;
    float mx = NEG_INF;
    for (int s = c; s < nsplit; s += D) {
        w_sh[s] = L[s];
        mx = fmaxf(mx, w_sh[s]);
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    float M = NEG_INF;
#pragma unroll
    for (int w = 0; w < D / 32; ++w) M = fmaxf(M, red[w]);
    const float mu = M == NEG_INF ? 0.f : M;
    __syncthreads();                                   // every thread has read red[]
    float ws = 0.f;
    for (int s = c; s < nsplit; s += D) {
        w_sh[s] = fast_exp2((w_sh[s] - mu) * LOG2E);   // its own entries: no barrier needed yet
        ws += w_sh[s];
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) ws += __shfl_xor_sync(0xffffffffu, ws, off);
    if (lane == 0) red[warp] = ws;
    __syncthreads();                                   // the weights and the partial sums
    float W = 0.f;
#pragma unroll
    for (int w = 0; w < D / 32; ++w) W += red[w];
    const float* O = ws_o + row * nsplit * D + c;
    float acc = 0.f;
#pragma unroll 8
    for (int s = 0; s < nsplit; ++s) acc = fmaf(w_sh[s], O[(size_t)s * D], acc);
    out[row * D + c] = (bf16_t)(pack_bf16x2(W > 0.f ? acc / W : 0.f, 0.f) & 0xffffu);
    if (c == 0) lse[row] = W > 0.f ? mu + dec_log2(W) * DEC_LN2 : NEG_INF;
}

// After a block's workspace writes (every thread's): true, in every thread, for the one block of the
// nsplit blocks of a (sequence, KV head) to count last on *cnt, which then sees every other split's
// workspace rows. The barrier gathers the block's writes in thread 0, whose fence (cumulative) orders
// them device-wide before its count, and whose second fence orders the count before the reads that
// follow; the last block puts the counter back to 0 (nothing else touches it in this launch), so a
// counter that is zero at the launch is zero again at its end, ready for the next launch in stream
// order. *flag: one shared int.
__device__ __forceinline__ bool dec_last_arrival(int* cnt, int nsplit, int tid, int* flag)
{
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        const bool last = atomicAdd(cnt, 1) == nsplit - 1;
        if (last) *cnt = 0;
        __threadfence();
        *flag = last;
    }
    __syncthreads();
    return *flag != 0;
}

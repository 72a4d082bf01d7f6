// Chapter 05, version 8: double buffering: the global loads of slab s+1 overlap the FMAs of slab s.
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major
//
// Idea: version 7 makes every block wait once per slab for its own global loads: load, barrier,
// compute, barrier; only the other block on the SM has work meanwhile. Here shared memory holds TWO
// stages and the loop is software-pipelined: at the top of slab s each thread issues its float4 loads
// of slab s+1 into registers (A_VECS + B_VECS float4: 8 registers at BK = 8), computes the BK steps of
// slab s out of stage s%2, then stores those registers into stage (s+1)%2. The load latency hides
// behind a whole slab of math. Stage (s+1)%2 was last read during slab s-1, before the previous
// barrier, so ONE barrier per slab suffices (version 7: two). Inside a slab ptxas itself loads the
// operands of step k+1 while the FMAs of step k run (the slab's loop is fully unrolled; seen in SASS).
//
// The register budget shapes the rest. Two blocks of 256 threads fit on an SM only at <= 128 registers
// per thread: 64 accumulators, 16 operands, 8 staging registers for the next slab, addresses. Explicitly
// double-buffered operand registers (16 more), or version 7's per-slab fast/checked branch inside the
// pipelined loop, made ptxas spill under a 128-register cap. So the edges are handled outside the pipeline:
//  - rows of A past M and columns of B past N are CLAMPED to the last row/column when the load
//    pointers are made: they only feed rows and columns of C that are never stored, so the pipelined
//    loop needs no bounds checks at all;
//  - that loop runs over the slabs that lie wholly inside K, and only when 16-byte loads are legal
//    (K % 4 == 0, N % 4 == 0, A and B 16-byte aligned);
//  - the rest (the last partial slab; every slab otherwise) goes through a plain one-stage loop with
//    checked, zero-filled element loads, kept rolled (unrolled, it raised the whole kernel's registers);
//  - the store is float4 per 4-column group when N % 4 == 0 and C is aligned, else element by
//    element, each checked against M and N. Any M, N, K >= 1.
// MINB = 1: asked for 2 blocks per SM (a 128-register cap) ptxas spilled, uncapped it allocates 126-128
// registers (NVRTC 13.5, sm_90 / sm_80), so 2 blocks fit anyway; the sweep script records the count.
// The -D values below are the starting point of the tuning sweep
// (labs/results/logs/2026-12-01/sgemm-ladder-sweep.py); the tuned rung is this file with its best values.
//
// Launch: grid = (ceil(N/BN), ceil(M/BM)), block = NT = (BM/WM)*(BN/WN)*32 = 256 threads (1-D),
// DYNAMIC shared memory SMEM_BYTES = 2*BK*(BM+APAD+BN)*4 = 16,640 bytes at the defaults (above 48 KB
// the kernel's max-dynamic-shared-memory attribute must be raised; at most 227 KB). __launch_bounds__(NT, MINB).
//
// Prediction (4096^3, 137.4 GFLOP): per slab and thread 512 FFMA in 579 instructions (SASS: 32 LDS.128,
// 2 LDG.128, 5 STS, one barrier, ~25 address/loop instructions): 88% of issue slots are FMAs. One
// barrier per 8 steps; global latency hidden inside each block; 2 blocks (16 warps) per SM; 1024 tiles
// of 128 x 128 on 264 block slots (3.9 waves: ~3% lost to the last). What remains: that 12% issue
// overhead, register-bank conflicts in the FFMA stream that CUDA C cannot steer, and the clock under a
// full FMA load. Expect ~42-47 TFLOP/s, 82-92% of cuBLAS, 65-72% of the 65 TFLOP/s FMA roof; the
// sweep should find a few percent more (BK = 16 halves the per-slab overhead if registers allow).
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   double_buffer at 4096x4096x4096: 3.4084 ms, 40.3 TFLOP/s, 61.8% of fp32, 0.79x cuBLAS fp32 (TF32 off)
//   double_buffer at 8192x1024x4096: 1.6858 ms, 40.8 TFLOP/s, 62.5% of fp32, 0.81x cuBLAS fp32 (TF32 off)
//   tuned at 4096x4096x4096: 2.8180 ms, 48.8 TFLOP/s, 74.7% of fp32, 0.95x cuBLAS fp32 (TF32 off)
//   tuned at 8192x1024x4096: 1.4126 ms, 48.6 TFLOP/s, 74.5% of fp32, 0.96x cuBLAS fp32 (TF32 off)

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef WM
#define WM 32         // warp tile rows
#endif
#ifndef WN
#define WN 64         // warp tile columns
#endif
#ifndef WNITER
#define WNITER 2      // sub-tiles along N per warp tile (WMITER follows from the rest)
#endif
#ifndef TM
#define TM 4          // rows of each thread block inside a sub-tile
#endif
#ifndef TN
#define TN 4          // columns of each thread block inside a sub-tile
#endif
#ifndef APAD
#define APAD 4
#endif
#ifndef MINB
#define MINB 1        // blocks per SM asked of ptxas (__launch_bounds__): caps registers at 64K/(NT*MINB)
#endif

#define NT ((BM / WM) * (BN / WN) * 32)                // threads per block
#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))   // sub-tiles along M per warp tile
#define WSUBM (WM / WMITER)                            // sub-tile rows
#define WSUBN (WN / WNITER)                            // sub-tile columns
#define AP (BM + APAD)                                 // row pitch of As[k][m]
#define A_VECS (BM * BK / 4 / NT)                      // float4 of the A slab per thread per step
#define B_VECS (BK * BN / 4 / NT)

static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
static_assert(WMITER >= 1 && WMITER * 32 * TM * TN * WNITER == WM * WN, "a warp's 32 lanes must cover its tile");
static_assert(WM % WMITER == 0 && WN % WNITER == 0, "sub-tiles must tile the warp tile");
static_assert(WSUBM % TM == 0 && WSUBN % TN == 0 && (WSUBM / TM) * (WSUBN / TN) == 32, "32 lanes per sub-tile");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0 && APAD % 4 == 0, "float4 granularity");
static_assert((BM * BK / 4) % NT == 0 && (BK * BN / 4) % NT == 0, "each thread loads whole float4 of both slabs");
static_assert(NT <= 1024, "block size");

// Where this thread's float4 of the A and B slabs sit inside a slab: vector j of A is row AR(j),
// columns AC(j)..AC(j)+3 of the BM x BK slab; vector j of B is row BR(j), columns BC(j)..BC(j)+3.
#define AR(j) (((int)threadIdx.x + (j) * NT) / (BK / 4))
#define AC(j) ((((int)threadIdx.x + (j) * NT) % (BK / 4)) * 4)
#define BR(j) (((int)threadIdx.x + (j) * NT) / (BN / 4))
#define BC(j) ((((int)threadIdx.x + (j) * NT) % (BN / 4)) * 4)

// Fast path: this thread's float4 of a slab that lies wholly inside K. pa[j] / pb[j] already point
// at the slab (the caller advances them); rows of A past M and columns of B past N were clamped
// when the pointers were made: they only feed rows and columns of C that are never stored.
__device__ __forceinline__ void load_slab_vec(const float* const (&pa)[A_VECS], const float* const (&pb)[B_VECS],
                                              float4 (&ra)[A_VECS], float4 (&rb)[B_VECS])
{
#pragma unroll
    for (int j = 0; j < A_VECS; ++j) ra[j] = *reinterpret_cast<const float4*>(pa[j]);
#pragma unroll
    for (int j = 0; j < B_VECS; ++j) rb[j] = *reinterpret_cast<const float4*>(pb[j]);
}

// Checked path: element by element, zero outside A and B (any shape, any alignment).
__device__ __forceinline__ void load_slab_checked(const float* __restrict__ A, const float* __restrict__ B,
                                                  int M, int N, int K, int bm, int bn, int k0,
                                                  float4 (&ra)[A_VECS], float4 (&rb)[B_VECS])
{
#pragma unroll
    for (int j = 0; j < A_VECS; ++j) {
        const int gm = bm + AR(j), gk = k0 + AC(j);
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (gm < M) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (gk + i < K) v[i] = A[(long long)gm * K + gk + i];
            }
        }
        ra[j] = make_float4(v[0], v[1], v[2], v[3]);
    }
#pragma unroll
    for (int j = 0; j < B_VECS; ++j) {
        const int gk = k0 + BR(j), gn = bn + BC(j);
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (gk < K) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (gn + i < N) v[i] = B[(long long)gk * N + gn + i];
            }
        }
        rb[j] = make_float4(v[0], v[1], v[2], v[3]);
    }
}

#define SMEM_BYTES (2 * BK * (AP + BN) * 4)            // dynamic shared memory of one block

// Store this thread's registers of a slab into one stage: A transposed (As[k][m]), B as is.
__device__ __forceinline__ void store_slab(float* __restrict__ As, float* __restrict__ Bs,
                                           const float4 (&ra)[A_VECS], const float4 (&rb)[B_VECS])
{
#pragma unroll
    for (int j = 0; j < A_VECS; ++j) {
        const int r = AR(j), c = AC(j);
        As[(c + 0) * AP + r] = ra[j].x;        // column r of rows c..c+3 of As[k][m]
        As[(c + 1) * AP + r] = ra[j].y;
        As[(c + 2) * AP + r] = ra[j].z;
        As[(c + 3) * AP + r] = ra[j].w;
    }
#pragma unroll
    for (int j = 0; j < B_VECS; ++j) {
        *reinterpret_cast<float4*>(&Bs[BR(j) * BN + BC(j)]) = rb[j];
    }
}

// The operands of one step k: this lane's WMITER*TM values of A and WNITER*TN values of B.
__device__ __forceinline__ void load_frag(float (&a)[WMITER * TM], float (&b)[WNITER * TN],
                                          const float* __restrict__ As, const float* __restrict__ Bs,
                                          int k, int wm, int wn, int lm, int ln)
{
#pragma unroll
    for (int im = 0; im < WMITER; ++im)
#pragma unroll
        for (int i = 0; i < TM; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(&As[k * AP + wm + im * WSUBM + lm + i]);
            a[im * TM + i] = v.x; a[im * TM + i + 1] = v.y; a[im * TM + i + 2] = v.z; a[im * TM + i + 3] = v.w;
        }
#pragma unroll
    for (int in = 0; in < WNITER; ++in)
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float4 v = *reinterpret_cast<const float4*>(&Bs[k * BN + wn + in * WSUBN + ln + j]);
            b[in * TN + j] = v.x; b[in * TN + j + 1] = v.y; b[in * TN + j + 2] = v.z; b[in * TN + j + 3] = v.w;
        }
}

__device__ __forceinline__ void outer(float (&acc)[WMITER * TM][WNITER * TN],
                                      const float (&a)[WMITER * TM], const float (&b)[WNITER * TN])
{
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j)
            acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
sgemm_double_buffer(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                    int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    float* As = smem;                      // stages As[0], As[1]: BK * AP floats each
    float* Bs = smem + 2 * BK * AP;        // stages Bs[0], Bs[1]: BK * BN floats each
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int wm = (warp / (BN / WN)) * WM;
    const int wn = (warp % (BN / WN)) * WN;
    const int lm = (lane / (WSUBN / TN)) * TM;
    const int ln = (lane % (WSUBN / TN)) * TN;
    const bool vec_ok = (K % 4 == 0) && (N % 4 == 0) &&
                        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) % 16 == 0);

    float acc[WMITER * TM][WNITER * TN] = {{0.f}};
    float4 ra[A_VECS], rb[B_VECS];
    float fa[WMITER * TM], fb[WNITER * TN];            // operands of one step
    const int nslabs = (K + BK - 1) / BK;
    int s = 0;                             // slabs done

    // Pipelined loop over the slabs that lie wholly inside K, when 16-byte loads are legal.
    const int nfast = vec_ok ? K / BK : 0;
    if (nfast > 0) {
        const float* pa[A_VECS];
        const float* pb[B_VECS];
#pragma unroll
        for (int j = 0; j < A_VECS; ++j) pa[j] = A + (long long)min(bm + AR(j), M - 1) * K + AC(j);
#pragma unroll
        for (int j = 0; j < B_VECS; ++j) pb[j] = B + (long long)BR(j) * N + min(bn + BC(j), N - 4);
        load_slab_vec(pa, pb, ra, rb);     // prologue: slab 0 -> stage 0
        store_slab(As, Bs, ra, rb);
        __syncthreads();
        for (; s < nfast; ++s) {
            const int cur = s & 1;
            const bool more = s + 1 < nfast;
            if (more) {
#pragma unroll
                for (int j = 0; j < A_VECS; ++j) pa[j] += BK;
#pragma unroll
                for (int j = 0; j < B_VECS; ++j) pb[j] += (long long)BK * N;
                load_slab_vec(pa, pb, ra, rb);   // slab s+1: in flight during the FMAs below
            }
            const float* as = As + cur * (BK * AP);
            const float* bs = Bs + cur * (BK * BN);
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                load_frag(fa, fb, as, bs, k, wm, wn, lm, ln);
                outer(acc, fa, fb);
            }
            if (more) store_slab(As + (cur ^ 1) * (BK * AP), Bs + (cur ^ 1) * (BK * BN), ra, rb);
            __syncthreads();
        }
    }

    // The rest (the last partial slab, or every slab when 16-byte loads are not legal): checked loads,
    // one stage, two barriers per slab. The first barrier also ends the pipelined loop's reads.
    for (; s < nslabs; ++s) {
        load_slab_checked(A, B, M, N, K, bm, bn, s * BK, ra, rb);
        __syncthreads();
        store_slab(As, Bs, ra, rb);
        __syncthreads();
#pragma unroll 1                   // kept rolled: unrolled, this rarely-run loop raised the kernel's registers
        for (int k = 0; k < BK; ++k) {
            load_frag(fa, fb, As, Bs, k, wm, wn, lm, ln);
            outer(acc, fa, fb);
        }
    }

    // Epilogue: each (row, 4-column group) of this thread's results is stored if inside C; float4 when
    // N % 4 == 0 and C is 16-byte aligned (then a group starting inside C lies wholly inside it).
    const bool vec_store = (N % 4 == 0) && (reinterpret_cast<unsigned long long>(C) % 16 == 0);
#pragma unroll
    for (int im = 0; im < WMITER; ++im)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int gm = bm + wm + im * WSUBM + lm + i;
            if (gm >= M) continue;
#pragma unroll
            for (int in = 0; in < WNITER; ++in)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int gn = bn + wn + in * WSUBN + ln + j;
                    const float* v = &acc[im * TM + i][in * TN + j];
                    float* c = C + (long long)gm * N + gn;
                    if (vec_store) {
                        if (gn < N) *reinterpret_cast<float4*>(c) = make_float4(v[0], v[1], v[2], v[3]);
                    } else {
#pragma unroll
                        for (int t = 0; t < 4; ++t) {
                            if (gn + t < N) c[t] = v[t];
                        }
                    }
                }
        }
}

// Chapter 10, capstone rung 2: cross-entropy forward and backward in one kernel, the second read of each
// row served by the L2.
//
// Idea: rung 1 reads every logit twice from DRAM because its two kernels are a whole tensor apart. Here one
// block does both passes of a row back to back: it streams the row once for its (max, sum) state, merges
// the threads' states, writes lse and the loss, then reads the same row again for the gradient. Between the
// two reads of a row only the other rows in flight pass through the L2, so the grid is persistent: one
// block per SM (THREADS threads), each looping over rows r = blockIdx.x,
// blockIdx.x + gridDim.x, ... With 132 SMs and rows of 128256 bf16 (251 KB), 132 rows are in flight, 33
// MB, inside the H200's 60 MB L2: the second read hits, and DRAM sees one read and one write of the
// logits, the floor of any kernel that writes a gradient. One barrier per row, after the state merge: the
// target logit has been read (in place, the gradient overwrites it) and the merge's shared memory is free
// for the next row.
// Macros: THREADS (1024), PREFETCH (0: no loads in flight while a batch is worked on; K: the next K).
// contract: as rung 1 (01_ce_two_pass.cu): x, grad bf16 (N, V) (grad may be x), target int32 (N), loss,
//           lse fp32 (N), loss_mean fp32 (1) zeroed before the launch.
// Launch: ce_fused grid min(N, SMs x blocks per SM), block THREADS. The host picks the build by row length
// (labkit.chapters.ch10.fused_build): two blocks of 512 per SM while their rows fit in half the L2, else
// one of 1024 (two per SM at 128256 would put 66 MB in flight, past the L2).
//
// Prediction (H200, 4096 x 128256): 2.1 GB from DRAM, the bytes of a same-size copy. Per element two
// exp2 (one per pass) on the SFU: 2 x 525 M at 16 per clock per SM, 132 SMs at 1.98 GHz, ~0.25 ms under
// the copy's ~0.51 ms, so the SFU stays in the shadow of memory. One block per SM pauses its loads at each
// row's merge and barrier (~2 us of a row's ~8 us); the other half of the gap to copy is the second pass's
// L2 reads, which share the L2 with the DRAM stream. Expect 80-90% of copy, 1.3x rung 1 or more, and
// 3-4x PyTorch eager. At 16384 x 32000 (64 KB rows, 8 MB in flight) the same, with shorter rows paying
// the per-row pause four times as often: 75-85%.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "cross_entropy"):
//   fused at 4096x128256: 0.6590 ms, 3189 GB/s, 75.1% of copy, 3.57x torch eager
//   fused at 16384x32000: 0.6444 ms, 3255 GB/s, 76.3% of copy, 3.59x torch eager
#include <cuda_bf16.h>
#include "common/online_softmax.cuh"   // online_row_state, online_block_merge
#include "common/cross_entropy.cuh"    // ce_write_grad, ce_row_loss

#ifndef THREADS
#define THREADS 1024
#endif
#ifndef PREFETCH          // 0: each batch of 4 vectors loaded, then worked on; K: the next K in flight meanwhile
#define PREFETCH 0
#endif

// At most 64 registers a thread whatever THREADS (1024 / THREADS blocks fit on an SM): a smaller build can
// then run several blocks per SM when its rows are short enough for the L2 to hold them all.
extern "C" __global__ void __launch_bounds__(THREADS, 1024 / THREADS)
ce_fused(const __nv_bfloat16* x, const int* __restrict__ target, __nv_bfloat16* grad, float* __restrict__ loss,
         float* __restrict__ lse_out, float* __restrict__ loss_mean, int N, int V, float scale, int ignore_index)
{
    __shared__ float red_m[32], red_d[32];
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const __nv_bfloat16* xr = x + (long long)row * V;
        __nv_bfloat16* gr = grad + (long long)row * V;
        const int t = target[row];
        const bool ignored = t == ignore_index, valid = !ignored && t >= 0 && t < V;
        float x_t = 0.f;
        if (threadIdx.x == 0 && valid) x_t = __bfloat162float(xr[t]);   // before the row is overwritten
        float m, d;
#if PREFETCH
        ce_row_state_prefetch<PREFETCH>(xr, V, m, d);
#else
        online_row_state(xr, V, m, d);
#endif
        online_block_merge(m, d, red_m, red_d);
        __syncthreads();           // x_t read, red_m / red_d free: the gradient may overwrite the row
        const float lse = m + logf(d);
        if (threadIdx.x == 0) {
            const float l = ce_row_loss(lse, x_t, ignored, valid);
            loss[row] = l;
            lse_out[row] = lse;
            if (!ignored) atomicAdd(loss_mean, l * scale);
        }
#if PREFETCH
        ce_write_grad_prefetch<PREFETCH>(xr, gr, V, lse, valid ? t : -1, scale, ignored, threadIdx.x, THREADS);
#else
        ce_write_grad(xr, gr, V, lse, valid ? t : -1, scale, ignored, threadIdx.x, THREADS);
#endif
    }
}

// The launch configuration of this build, for the host: out[0] = THREADS, out[1] = blocks per SM of the
// grid for this build alone (one; the host's fused_build may ask for two of a 512-thread build).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = THREADS;
    out[1] = 1;
}

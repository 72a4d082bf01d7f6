// Chapter 10, capstone rung 1: cross-entropy forward and backward over bf16 logits with two kernels built
// from chapter 04's pieces: a row reduction, then an elementwise gradient.
//
//   loss[r] = lse_r - x[r, t_r],   lse_r = log sum_j exp(x[r, j])
//   grad[r, j] = (exp(x[r, j] - lse_r) - [j == t_r]) * scale      (scale = 1 / rows not ignored: the mean)
//
// Idea: ce_lse is chapter 04's online softmax without its write pass: one block per row streams the row
// once (16-byte vectors, four loads in flight per thread), merges the threads' (max, sum) states, and writes
// lse, the row's loss, and adds loss * scale to the mean. ce_grad is a chapter 03 elementwise kernel over a
// 2-D grid (blockIdx.y: the row, so no division finds it): it reads the row again with its lse and target
// and writes the gradient. A row whose target is ignore_index has loss 0 and a zero gradient.
// Macros: THREADS (threads per block of ce_lse, 1024), GRAD_THREADS (256).
// contract: x, grad bf16 (N, V) row-major (grad may be x: in place), V % 8 == 0 for the vector path (any V
//           works), target int32 (N) in [0, V) or ignore_index, loss and lse fp32 (N), loss_mean fp32 (1)
//           zeroed before the launch, N < 2^31, V < 2^31.
// Launch: ce_lse grid N, block THREADS; then ce_grad grid (ceil(units / (GRAD_THREADS * 4)), rows) for
// rows of at most 65535 starting at row0 (units: V / 8 vectors, or V elements), block GRAD_THREADS.
//
// Prediction (H200, 4096 x 128256, 1.05 GB of logits): ce_lse reads them once, ce_grad reads them again and
// writes as much: 3.15 GB from DRAM (the tensor is 17x the L2, so the second read misses). At the copy's
// ~4.1 TB/s, 0.77 ms; a copy of the 2.1 GB the fused kernel moves takes ~0.51 ms, so this rung is bound
// near 66% of that copy, about 60% with the launches and tails. Against PyTorch's eager forward and
// backward (log_softmax writes its output, nll_loss, then the backward reads two tensors of N x V and
// writes one): about 2x.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "cross_entropy"):
//   two_pass at 4096x128256: 0.7418 ms, 2833 GB/s, 66.7% of copy, 3.17x torch eager
//   two_pass at 16384x32000: 0.8022 ms, 2614 GB/s, 61.2% of copy, 2.88x torch eager
#include <cuda_bf16.h>
#include "common/online_softmax.cuh"   // online_row_state, online_block_merge
#include "common/cross_entropy.cuh"    // ce_write_grad, ce_row_loss

#ifndef THREADS
#define THREADS 1024
#endif
#ifndef GRAD_THREADS
#define GRAD_THREADS 256
#endif

extern "C" __global__ void __launch_bounds__(THREADS)
ce_lse(const __nv_bfloat16* __restrict__ x, const int* __restrict__ target, float* __restrict__ loss,
       float* __restrict__ lse_out, float* __restrict__ loss_mean, int V, float scale, int ignore_index)
{
    __shared__ float red_m[32], red_d[32];
    const int row = blockIdx.x;
    const __nv_bfloat16* __restrict__ xr = x + (long long)row * V;
    const int t = target[row];
    const bool ignored = t == ignore_index, valid = !ignored && t >= 0 && t < V;
    float m, d;
    online_row_state(xr, V, m, d);
    online_block_merge(m, d, red_m, red_d);
    if (threadIdx.x == 0) {
        const float lse = m + logf(d);
        const float l = ce_row_loss(lse, valid ? __bfloat162float(xr[t]) : 0.f, ignored, valid);
        loss[row] = l;
        lse_out[row] = lse;
        if (!ignored) atomicAdd(loss_mean, l * scale);
    }
}

extern "C" __global__ void __launch_bounds__(GRAD_THREADS)
ce_grad(const __nv_bfloat16* x, const int* __restrict__ target, const float* __restrict__ lse,
        __nv_bfloat16* grad, int V, float scale, int ignore_index, int row0)
{
    const int row = row0 + blockIdx.y;
    const int t = target[row];
    const bool ignored = t == ignore_index, valid = !ignored && t >= 0 && t < V;
    ce_write_grad(x + (long long)row * V, grad + (long long)row * V, V, lse[row], valid ? t : -1, scale,
                  ignored, blockIdx.x * GRAD_THREADS + threadIdx.x, gridDim.x * GRAD_THREADS);
}

// The launch configuration of this build, for the host: out[0] = THREADS, out[1] = GRAD_THREADS,
// out[2] = units of work per ce_grad thread (the host sizes ce_grad's grid with it).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = THREADS;
    out[1] = GRAD_THREADS;
    out[2] = 4;
}

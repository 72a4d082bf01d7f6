// Chapter 01, version 4: the fp32 FMA-throughput probe.
//
// Idea: every thread runs 8 independent chains of fused multiply-adds, so a scheduler always has an FMA
// whose inputs are ready (FMA latency is ~4 cycles; 4 schedulers per SM each issue one warp-FMA per cycle).
// No memory traffic inside the loop: the only store is behind a condition that is never true, which keeps
// the compiler from deleting the work. FLOPs per launch = threads x iters x 16 x 8 x 2.
// Prediction: with 2048 threads per SM and 8-way ILP, the FMA pipes stay full: above 95% of
// SMs x 128 lanes x 2 FLOP x the SM clock it ran at.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "fma"):
//   fma_probe at 270336: 4.3441 ms, 65.3 TFLOP/s, 97.5% of fp32_peak, 0.98x fp32 peak: SMs x lanes x 2 x clock
extern "C" __global__ void fma_probe(float* out, float mul, float add, int iters)
{
    float a0 = threadIdx.x, a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
    float a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            a0 = fmaf(a0, mul, add); a1 = fmaf(a1, mul, add);
            a2 = fmaf(a2, mul, add); a3 = fmaf(a3, mul, add);
            a4 = fmaf(a4, mul, add); a5 = fmaf(a5, mul, add);
            a6 = fmaf(a6, mul, add); a7 = fmaf(a7, mul, add);
        }
    }
    const float s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    if (s == -1.0f) {            // never true for the inputs used; the compiler cannot know that
        out[blockIdx.x] = s;
    }
}

// setmaxnreg: a warpgroup gives back or takes registers at run time, so that a producer warpgroup can
// run lean while the consumers hold large accumulators. Introduced in chapter 07 (04_warp_specialized.cu);
// rungs 04-07 use it. sm_90a only.
#pragma once
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "common/setmaxnreg.cuh: sm_90a only; include it only from kernel files marked // requires: sm_90a"
#endif

// Warp specialisation: the producer warpgroup gives registers back, the consumers take them
// (per thread; executed by all 128 threads of a warpgroup; counts are multiples of 8).
template <int R> __device__ __forceinline__ void regs_dealloc() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R)); }
template <int R> __device__ __forceinline__ void regs_alloc()   { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R)); }

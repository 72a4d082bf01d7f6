// mbarrier: init, the fence that publishes the inits, arrive (with or without an expected transaction
// byte count) and a wait on a phase's parity. Introduced in chapter 07 (02_tma_wgmma.cu, where TMA loads
// complete on one); rungs 02-07 use it. sm_90 on.
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "common/mbarrier.cuh: sm_90 or later; include it only from kernel files marked // requires: sm_90a"
#endif

// mbarrier: a 64-bit shared-memory object with a phase bit, a count of pending arrivals and a count of
// pending transaction bytes; a phase completes when both reach zero. Waiting names the parity of the
// phase waited for: parity 1 on a fresh barrier (phase 0 in progress) refers to the phase before it,
// which counts as complete, so it returns at once.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {      // make the inits visible to TMA and the cluster
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

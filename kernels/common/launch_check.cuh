// check_launch: trap at once when a launch's dynamic shared memory or block size disagrees with the
// build. Introduced in chapter 07 (every rung of the Hopper ladder, whose host code mirrors the macros).
#pragma once

// A launch whose dynamic shared memory or block size disagrees with this build traps at once (the
// host computes both from the same macros; a mismatch would otherwise corrupt or hang silently).
__device__ __forceinline__ void check_launch(unsigned smem_needed, unsigned threads) {
    unsigned dyn;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (dyn < smem_needed || blockDim.x != threads) __trap();
}

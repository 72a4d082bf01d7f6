// cp.async: 16-byte global -> shared copies that bypass the registers, and their group bookkeeping.
// Introduced in chapter 06 (03_cp_async.cu); the later rungs of the chapter (04-07) reuse it. sm_80 on.
//
// cp.async.cg.shared.global [dst], [src], 16, src_size copies 16 bytes without blocking the thread (.cg:
// cached in L2 only); src_size 0 reads nothing and zero-fills the 16 bytes. commit_group closes a group
// of this thread's copies; wait_group N returns once at most N of its groups are still in flight (a
// barrier then makes every thread's copies visible to the block).
#pragma once

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes)
{
    // src_bytes = 0: nothing is read, the 16 bytes at dst are zero-filled.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// A row held in registers, split among the threads of its row. Introduced in chapter 04 (the register
// kernels 02_rmsnorm_regs, 04_layernorm_welford, 07_softmax_regs).
//  - RowThread / row_thread: which row a thread works on and its place in it, when a block holds
//    blockDim / tpr consecutive rows of tpr = 2^tpr_log2 threads each;
//  - load_row: all of the thread's 16-byte vectors of that row loaded before any is used.
// (keep_packed, which keeps the loaded row packed across a reduction, is in row_io.cuh.)
#pragma once
#include <cuda_bf16.h>

// Thread t of a row owns its 16-byte vectors t, t + tpr, t + 2*tpr, ... (8 bf16 each; consecutive
// threads read consecutive 16 bytes, so every warp load is 512 contiguous bytes). N % 8 == 0.
struct RowThread {
    int tpr;          // threads per row
    int t;            // this thread's place in its row
    bool live;        // a block's last rows may lie past M: they still join barriers
    long long base;   // the row's first element (row 0 for rows past M); 64-bit: M*N may exceed 2^31
    int nvec;         // 16-byte vectors in the row

    __device__ __forceinline__ int vec(int k) const { return t + k * tpr; }             // k-th vector's index
    __device__ __forceinline__ bool owns(int k) const { return live && vec(k) < nvec; } // ... and whether it exists
};

__device__ __forceinline__ RowThread row_thread(int M, int N, int tpr_log2)
{
    RowThread r;
    r.tpr = 1 << tpr_log2;
    r.t = threadIdx.x & (r.tpr - 1);
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> tpr_log2;
    r.live = row < M;
    r.base = (r.live ? row : 0) * (long long)N;
    r.nvec = N >> 3;
    return r;
}

// All loads first: VPT independent 16-byte loads in flight per thread. Vectors the thread does not own
// (past the row, or a row past M) are set to `absent`.
template <int VPT>
__device__ __forceinline__ void load_row(const __nv_bfloat16* __restrict__ x, const RowThread& r,
                                         uint4 (&v)[VPT], const uint4 absent)
{
    const uint4* __restrict__ xr = reinterpret_cast<const uint4*>(x + r.base);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        v[k] = r.owns(k) ? xr[r.vec(k)] : absent;
    }
}

// Chapter 04, version 8: shared-memory bank conflicts, seen through a matrix transpose.
//
//   out[j, i] = in[i, j]        in: M x N fp32 (row-major), out: N x M fp32
//
// Idea: a direct transpose either reads or writes global memory with a stride of a whole row, so one
// of the two sides is uncoalesced (32 sectors per warp access). Staging a 32 x 32 tile in shared
// memory fixes that: a block of 32 x 8 threads reads the tile row by row (coalesced, 4 rows per
// thread), waits at a barrier, then writes the transposed tile row by row (coalesced), reading the tile
// down its COLUMNS. Shared memory has 32 banks of 4 bytes; word k lives in bank k % 32.
//  - transpose_conflicted: tile[32][32]. A warp reading column c touches words c, c+32, c+64, ...:
//    all 32 in bank c % 32, a 32-way conflict, so that read is replayed 32 times.
//  - transpose_padded: tile[32][33]. Row r starts at word 33r, so column c is words 33r + c, in banks
//    (r + c) % 32: all different, conflict-free. One unused float per row (4.2% more shared memory).
//
// Prediction (8192 x 8192 fp32, bytes = 2*4*M*N = 537 MB, floor ~0.13 ms at ~4.1 TB/s): per 32x32 tile
// (8 KB of DRAM traffic) the conflicted kernel spends 32 warp reads x 32 replays = 1024 shared-memory
// wavefronts, i.e. ~1024 cycles of one SM's shared-memory pipe: at most ~8 B/cycle/SM x 132 SMs x
// ~1.9 GHz = ~2 TB/s, about half the copy bandwidth. The padded kernel needs 32 + 32 wavefronts per
// tile (16x fewer) and should run near the copy bandwidth (~85-95%: 4-byte accesses, 128 bytes per
// warp instruction), like cupy's own transpose copy.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "smem_transpose"):
//   conflicted at 8192x8192: 0.3072 ms, 1748 GB/s, 41.2% of copy, 1.48x cupy.ascontiguousarray(x.T)
//   padded at 8192x8192: 0.1482 ms, 3624 GB/s, 85.4% of copy, 3.07x cupy.ascontiguousarray(x.T)

#define TILE 32
#define ROWS 8      // blockDim = (32, 8): each thread moves TILE / ROWS = 4 elements each way

// grid = (ceil(N / 32), ceil(M / 32)); the tile's row pitch is PITCH floats (32 or 33)
template <int PITCH>
__device__ __forceinline__ void transpose_tile(const float* __restrict__ in, float* __restrict__ out,
                                               int M, int N, float (*tile)[PITCH])
{
    const int x = blockIdx.x * TILE + threadIdx.x;            // column of `in`
    const int y = blockIdx.y * TILE + threadIdx.y;            // row of `in`
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        if (x < N && y + j < M) {
            tile[threadIdx.y + j][threadIdx.x] = in[(long long)(y + j) * N + x];
        }
    }
    __syncthreads();
    const int ox = blockIdx.y * TILE + threadIdx.x;           // column of `out` (a row of `in`)
    const int oy = blockIdx.x * TILE + threadIdx.y;           // row of `out` (a column of `in`)
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        if (ox < M && oy + j < N) {
            out[(long long)(oy + j) * M + ox] = tile[threadIdx.x][threadIdx.y + j];  // down a column
        }
    }
}

extern "C" __global__ void __launch_bounds__(TILE * ROWS)
transpose_conflicted(const float* __restrict__ in, float* __restrict__ out, int M, int N)
{
    __shared__ float tile[TILE][TILE];            // a column of the tile is one bank
    transpose_tile<TILE>(in, out, M, N, tile);
}

extern "C" __global__ void __launch_bounds__(TILE * ROWS)
transpose_padded(const float* __restrict__ in, float* __restrict__ out, int M, int N)
{
    __shared__ float tile[TILE][TILE + 1];        // one float of padding per row: a column spans all 32 banks
    transpose_tile<TILE + 1>(in, out, M, N, tile);
}

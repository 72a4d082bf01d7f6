"""Exploratory sweep of copy-probe variants against cupy.copyto on one GPU (chapter 01, Step 3).

Run from the project root on a GPU: `python3 labs/results/logs/2026-11-30/copy-probe-variants.py`. Its output is copy-probe-variants.log beside it. Each
variant is checked (y == x), then timed with labkit.timing.bench (L2 flushed, median), between two timings of
cupy.copyto; the percentage is against their mean. Two rounds, to show run-to-run spread."""
import cupy as cp, numpy as np, json, os, sys
sys.path.insert(0, os.getcwd())
from labkit.timing import bench
src = r'''
extern "C" __global__ void gs_unroll4(const float4* __restrict__ x, float4* __restrict__ y, long long nv) {
  const long long s = (long long)gridDim.x * blockDim.x; long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (; i + 3 * s < nv; i += 4 * s) { float4 a = x[i], b = x[i + s], c = x[i + 2 * s], d = x[i + 3 * s];
    y[i] = a; y[i + s] = b; y[i + 2 * s] = c; y[i + 3 * s] = d; }
  for (; i < nv; i += s) y[i] = x[i]; }
extern "C" __global__ void one_per_thread(const float4* __restrict__ x, float4* __restrict__ y, long long nv) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < nv) y[i] = x[i]; }
extern "C" __global__ void one_per_thread_cs(const float4* __restrict__ x, float4* __restrict__ y, long long nv) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < nv) __stcs(y + i, __ldcs(x + i)); }
template <int U, bool CS> __device__ void blocked(const float4* __restrict__ x, float4* __restrict__ y, long long nv) {
  long long base = (long long)blockIdx.x * blockDim.x * U + threadIdx.x; float4 v[U];
  #pragma unroll
  for (int k = 0; k < U; ++k) { long long i = base + (long long)k * blockDim.x; if (i < nv) v[k] = CS ? __ldcs(x + i) : x[i]; }
  #pragma unroll
  for (int k = 0; k < U; ++k) { long long i = base + (long long)k * blockDim.x; if (i < nv) { if (CS) __stcs(y + i, v[k]); else y[i] = v[k]; } } }
extern "C" __global__ void blocked2(const float4* x, float4* y, long long nv) { blocked<2, false>(x, y, nv); }
extern "C" __global__ void blocked4(const float4* x, float4* y, long long nv) { blocked<4, false>(x, y, nv); }
extern "C" __global__ void blocked8(const float4* x, float4* y, long long nv) { blocked<8, false>(x, y, nv); }
extern "C" __global__ void blocked4_cs(const float4* x, float4* y, long long nv) { blocked<4, true>(x, y, nv); }
extern "C" __global__ void gs_blocked4(const float4* __restrict__ x, float4* __restrict__ y, long long nv) {
  // grid-stride over tiles of 4*blockDim contiguous vectors: each block walks contiguous 16 KB tiles
  const long long tile = 4LL * blockDim.x;
  for (long long b = blockIdx.x; b * tile < nv; b += gridDim.x) { long long base = b * tile + threadIdx.x; float4 v[4];
    #pragma unroll
    for (int k = 0; k < 4; ++k) { long long i = base + (long long)k * blockDim.x; if (i < nv) v[k] = x[i]; }
    #pragma unroll
    for (int k = 0; k < 4; ++k) { long long i = base + (long long)k * blockDim.x; if (i < nv) y[i] = v[k]; } } }
'''
mod = cp.RawModule(code=src, options=("-std=c++17",))
sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
n = 128 << 20
x = cp.random.standard_normal(n, dtype=cp.float32); y = cp.empty_like(x); nv = n // 4
def launch(name, threads, blocks):
    k = mod.get_function(name)
    return lambda: k((blocks,), (threads,), (x, y, cp.int64(nv)))
cfgs = []
for bps in (4, 8, 16, 32): cfgs.append((f"gs_unroll4 256t {bps}/SM", launch("gs_unroll4", 256, sms * bps)))
for t in (128, 256, 512, 1024): cfgs.append((f"one_per_thread {t}t", launch("one_per_thread", t, -(-nv // t))))
cfgs.append(("one_per_thread_cs 256t", launch("one_per_thread_cs", 256, -(-nv // 256))))
for U in (2, 4, 8):
    for t in (128, 256, 512):
        cfgs.append((f"blocked{U} {t}t", launch(f"blocked{U}", t, -(-nv // (t * U)))))
cfgs.append(("blocked4_cs 256t", launch("blocked4_cs", 256, -(-nv // 1024))))
for bps in (4, 8, 16): cfgs.append((f"gs_blocked4 256t {bps}/SM", launch("gs_blocked4", 256, sms * bps)))
rows = []
for rnd in range(2):
    base = bench(lambda: cp.copyto(y, x))
    for name, fn in cfgs:
        y.fill(0); fn(); assert bool((y == x).all()), name
        t = bench(fn); b2 = bench(lambda: cp.copyto(y, x))
        bb = (base.median_ms + b2.median_ms) / 2
        rows.append((rnd, name, t.median_ms, 8 * n / t.median_ms / 1e6, bb / t.median_ms))
        print(f"r{rnd} {name:28s} {t.median_ms:.4f} ms {8*n/t.median_ms/1e6:7.0f} GB/s  {100*bb/t.median_ms:6.1f}% of copyto ({bb:.4f})", flush=True)
        base = b2
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "copyexp.json"), "w"))

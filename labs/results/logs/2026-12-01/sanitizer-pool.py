"""Chapter 02's claim about compute-sanitizer and CuPy's memory pool, as a log: a kernel that writes 24
floats past the end of a 1000-float array, run under `compute-sanitizer --tool memcheck` twice, once with
CuPy's default pool (the array is carved out of a larger pooled chunk: expected unreported) and once with
the pool disabled (cp.cuda.set_allocator(None): one cudaMalloc per array, expected reported).

Run on a GPU machine (cupy; compute-sanitizer on PATH or in /usr/local/cuda/bin):

    python3 labs/results/logs/2026-12-01/sanitizer-pool.py > sanitizer-pool.log 2>&1
"""
import os
import shutil
import subprocess
import sys

CHILD = r'''
import sys
import cupy as cp
if sys.argv[1] == "nopool":
    cp.cuda.set_allocator(None)
src = r"""
extern "C" __global__ void write_past(float* y, long long n, int extra)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n + extra) y[i] = 1.0f;        // writes `extra` floats past the end
}
"""
k = cp.RawKernel(src, "write_past")
y = cp.zeros(1000, dtype=cp.float32)
print("y at", hex(y.data.ptr), "allocator:", sys.argv[1], flush=True)
k((4,), (256,), (y, cp.int64(1000), cp.int32(24)))
cp.cuda.Device().synchronize()
print("kernel finished", flush=True)
'''


def main():
    san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    print("compute-sanitizer:", subprocess.run([san, "--version"], capture_output=True, text=True).stdout.strip())
    for mode in ("pool", "nopool"):
        cmd = [san, "--tool", "memcheck", sys.executable, "-c", CHILD, mode]
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
        errors = [l for l in r.stdout.splitlines() if "Invalid __global__ write" in l]
        summary = [l for l in r.stdout.splitlines() if "ERROR SUMMARY" in l]
        print(f"\n=== {mode}: exit {r.returncode}; {len(errors)} invalid-write reports; "
              f"{summary[-1].strip() if summary else 'no summary'}")
        print("\n".join(r.stdout.splitlines()[:40]))
        if r.stderr.strip():
            print("stderr:", r.stderr.strip()[-2000:])


if __name__ == "__main__":
    main()

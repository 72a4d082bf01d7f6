"""The ceilings a kernel is judged against: measured on this GPU, beside the datasheet's.

Measured (cached per GPU under ~/.cache/labkit/):
- copy:  device-to-device copy bandwidth, `cupy.copyto` on 512 MiB buffers, bytes read plus written;
- fp32:  the chapter 01 FMA probe's rate; `fp32_peak` is SMs x FP32 lanes x 2 x the SM clock it ran at;
- mma:   the chapter 01 tensor-core probe's rate (bf16 `mma.sync` from registers; compute capability 8.0+);
- bf16:  a cuBLAS bf16 matrix product (torch.matmul where PyTorch is installed, else CuPy fp16) at 8192^3.
A cache written by an older labkit (without some of these) is measured again.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from .compile import kernel
from .device import current_sm_clock_mhz, gpu_info, now_iso, require_gpu, sm_count
from .timing import bench

# Vendor datasheets, dense (no sparsity). Bandwidth in GB/s, rates in TFLOP/s, L2 in MB.
# T4 has no bf16 tensor cores: its fp16 tensor rate is listed in the bf16 column and marked so.
DATASHEET = {
    "A100 SXM": dict(bandwidth_gbps=2039, fp32_tflops=19.5, bf16_tflops=312, sms=108, l2_mb=40),
    "H100 SXM": dict(bandwidth_gbps=3350, fp32_tflops=67, bf16_tflops=989, sms=132, l2_mb=50),
    "H200": dict(bandwidth_gbps=4800, fp32_tflops=67, bf16_tflops=989, sms=132, l2_mb=60),
    "L4": dict(bandwidth_gbps=300, fp32_tflops=30.3, bf16_tflops=121, sms=58, l2_mb=48),
    "T4": dict(bandwidth_gbps=320, fp32_tflops=8.1, bf16_tflops=65, sms=40, l2_mb=4, note="fp16 tensor rate"),
    "RTX 4090": dict(bandwidth_gbps=1008, fp32_tflops=82.6, bf16_tflops=165.2, sms=128, l2_mb=72),
}

# FP32 lanes per SM by compute capability (CUDA Programming Guide, arithmetic instruction throughput).
FP32_LANES = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128,
              "10.0": 128, "12.0": 128}


def datasheet_for(gpu_name: str) -> tuple[str, dict] | None:
    """The datasheet row for a device name such as 'NVIDIA H100 80GB HBM3' (None if not listed)."""
    n = gpu_name.upper()
    for key, token in (("H200", "H200"), ("H100 SXM", "H100"), ("A100 SXM", "A100"),
                       ("RTX 4090", "4090"), ("L4", "L4"), ("T4", "T4")):
        if token in n.replace("NVIDIA", ""):
            return key, DATASHEET[key]
    return None


def fp32_peak_tflops(sm_count: int, compute_capability: str, clock_mhz: float) -> float:
    lanes = FP32_LANES.get(compute_capability, 128)
    return sm_count * lanes * 2 * clock_mhz * 1e6 / 1e12


def ridge_point(peak_tflops: float, bandwidth_gbps: float) -> float:
    """FLOP per byte at which the compute roof meets the bandwidth roof."""
    return peak_tflops * 1e12 / (bandwidth_gbps * 1e9)


# ------------------------------------------------------------------------------------- measurement

COPY_BYTES = 512 << 20
KEYS = ("copy_gbps", "fp32_tflops", "mma_tflops", "wgmma_tflops", "bf16_tflops")   # what a current cache holds
FMA_ITERS = 4096


def measure_copy(nbytes: int = COPY_BYTES) -> dict:
    import cupy as cp
    src = cp.random.random(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    t = bench(lambda: cp.copyto(dst, src))
    return {"copy_gbps": 2 * nbytes / (t.median_ms * 1e-3) / 1e9, "copy_ms": t.median_ms,
            "copy_bytes": 2 * nbytes, "copy_spread_ms": t.spread_ms}


def fma_launch():
    """(launch function, FLOPs per launch) for the chapter 01 FMA probe, sized to this GPU."""
    import cupy as cp
    k = kernel("01-roofline/04_fma_probe.cu", "fma_probe")
    sms = sm_count()
    blocks, threads = sms * 8, 256
    out = cp.zeros(blocks, dtype=cp.float32)
    args = (out, cp.float32(1.0000001), cp.float32(-1e-7), cp.int32(FMA_ITERS))
    flops = blocks * threads * FMA_ITERS * 16 * 8 * 2
    return (lambda: k((blocks,), (threads,), args)), flops


def measure_fma() -> dict:
    launch, flops = fma_launch()
    clocks = []
    stop = threading.Event()

    def sample():  # read the SM clock while the probe runs: the peak is computed at that clock
        while not stop.is_set():
            c = current_sm_clock_mhz()
            if c:
                clocks.append(c)
            time.sleep(0.01)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        t = bench(launch, flush_l2=False, target_ms=400)
    finally:
        stop.set()
        th.join()
    info = gpu_info()
    clock = sorted(clocks)[len(clocks) // 2] if clocks else info["max_sm_clock_mhz"]
    peak = fp32_peak_tflops(info["sm_count"], info["compute_capability"], clock) if clock else None
    return {"fp32_tflops": flops / (t.median_ms * 1e-3) / 1e12, "fma_ms": t.median_ms, "fma_flops": flops,
            "fma_spread_ms": t.spread_ms, "fp32_peak_tflops": peak, "sm_clock_mhz": clock,
            "sm_clock_source": "nvml during the run" if clocks else "max clock (no NVML)"}


MMA_ITERS = 16384


def mma_launch():
    """(launch function, FLOPs per launch) for the chapter 01 mma.sync probe, sized to this GPU."""
    import cupy as cp
    k = kernel("01-roofline/05_mma_probe.cu", "mma_probe")
    blocks, threads = sm_count() * 4, 256
    out = cp.zeros(blocks, dtype=cp.float32)
    flops = blocks * (threads // 32) * MMA_ITERS * 8 * 4096
    return (lambda: k((blocks,), (threads,), (out, cp.int32(MMA_ITERS)))), flops


def measure_mma() -> dict:
    """The bf16 mma.sync rate, or None where the GPU has no bf16 tensor cores (compute capability < 8)."""
    if float(gpu_info()["compute_capability"]) < 8.0:
        return {"mma_tflops": None, "mma_note": "no bf16 mma.sync below compute capability 8.0"}
    launch, flops = mma_launch()
    t = bench(launch, flush_l2=False, target_ms=300)
    return {"mma_tflops": flops / (t.median_ms * 1e-3) / 1e12, "mma_ms": t.median_ms, "mma_flops": flops,
            "mma_spread_ms": t.spread_ms}


WGMMA_ITERS = 4096


def wgmma_launch():
    """(launch function, FLOPs per launch) for chapter 07's wgmma probe: one block per SM (sm_90a)."""
    import cupy as cp
    path = "07-gemm-hopper/00_wgmma_probe.cu"
    cfg = cp.zeros(3, dtype=cp.int64)
    kernel(path, "launch_config")((1,), (1,), (cfg,))
    threads, smem, flops_per_iter = (int(x) for x in cfg.get())
    k = kernel(path, "wgmma_probe")
    k.max_dynamic_shared_size_bytes = smem
    blocks = sm_count()
    out = cp.zeros(blocks * threads, dtype=cp.float32)
    args = (out, cp.int32(WGMMA_ITERS), cp.int32(0))
    return (lambda: k((blocks,), (threads,), args, shared_mem=smem)), blocks * WGMMA_ITERS * flops_per_iter


def measure_wgmma() -> dict:
    """The bf16 wgmma rate (operands in shared memory), or None off Hopper (wgmma is sm_90a only)."""
    if gpu_info()["compute_capability"] != "9.0":
        return {"wgmma_tflops": None, "wgmma_note": "wgmma runs on compute capability 9.0 (Hopper) only"}
    launch, flops = wgmma_launch()
    t = bench(launch, flush_l2=False, target_ms=300)
    return {"wgmma_tflops": flops / (t.median_ms * 1e-3) / 1e12, "wgmma_ms": t.median_ms, "wgmma_flops": flops,
            "wgmma_spread_ms": t.spread_ms}


def measure_bf16(n: int = 8192) -> dict:
    try:
        import torch
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        t = bench(lambda: torch.matmul(a, b), flush_l2=False)
        how = "torch.matmul bf16"
    except ImportError:
        import cupy as cp
        a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
        b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
        t = bench(lambda: cp.matmul(a, b), flush_l2=False)
        how = "cupy.matmul fp16 (PyTorch not installed)"
    return {"bf16_tflops": 2 * n ** 3 / (t.median_ms * 1e-3) / 1e12, "bf16_ms": t.median_ms,
            "bf16_how": f"{how}, {n}^3, random inputs", "bf16_spread_ms": t.spread_ms}


def cache_path(gpu_slug: str) -> Path:
    base = Path(os.environ.get("LABKIT_CACHE", Path.home() / ".cache" / "labkit"))
    return base / f"ceilings-{gpu_slug}.json"


def measure(refresh: bool = False, verbose: bool = True) -> dict:
    """This GPU's ceilings (copy GB/s, fp32 and bf16 TFLOP/s), measured once and cached per GPU."""
    require_gpu("measuring the ceilings")
    info = gpu_info()
    path = cache_path(info["slug"])
    if path.exists() and not refresh:
        cached = json.loads(path.read_text())
        if all(k in cached for k in KEYS):
            return cached
    if verbose:
        print(f"Measuring the ceilings of {info['name']} (about 10 s, once per GPU)...", flush=True)
    c = {"gpu": info["name"], "measured_at": now_iso()}
    c.update(measure_copy())
    c.update(measure_fma())
    c.update(measure_mma())
    c.update(measure_wgmma())
    c.update(measure_bf16())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(c, indent=1))
    return c


def table(measured: dict | None = None, gpu_name: str | None = None) -> str:
    """A plain-text table: the datasheet rows, and this GPU's measured row when given."""
    rows = [f"{'GPU':22s} {'HBM GB/s':>9s} {'fp32 TF/s':>10s} {'bf16 TF/s':>10s} {'ridge FLOP/B':>13s}"]
    for name, d in DATASHEET.items():
        rows.append(f"{name:22s} {d['bandwidth_gbps']:9.0f} {d['fp32_tflops']:10.1f} {d['bf16_tflops']:10.0f} "
                    f"{ridge_point(d['bf16_tflops'], d['bandwidth_gbps']):13.0f}")
    if measured:
        rows.append(f"{(gpu_name or measured.get('gpu', 'this GPU'))[:14] + ' (measured)':22s} "
                    f"{measured['copy_gbps']:9.0f} {measured['fp32_tflops']:10.1f} {measured['bf16_tflops']:10.0f} "
                    f"{ridge_point(measured['bf16_tflops'], measured['copy_gbps']):13.0f}")
    return "\n".join(rows)

"""labkit on a real GPU: timing against a plain event loop, ceilings, guarded outputs, input errors."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_bench_agrees_with_a_plain_event_loop_on_copy():
    import cupy as cp
    from labkit.measure.timing import bench
    n = 64 << 20                                  # 256 MiB each way: far beyond the L2
    x = cp.random.random(n, dtype=cp.float32)
    y = cp.empty_like(x)
    t = bench(lambda: cp.copyto(y, x))
    # the plain loop: a warm-up, then 30 event pairs queued back to back (a host sync between runs would
    # let the GPU idle and clock down, which is not what bench measures either)
    for _ in range(10):
        cp.copyto(y, x)
    pairs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(30)]
    for s, e in pairs:
        s.record(); cp.copyto(y, x); e.record()
    pairs[-1][1].synchronize()
    plain = [cp.cuda.get_elapsed_time(s, e) for s, e in pairs]
    assert t.median_ms == pytest.approx(float(np.median(plain)), rel=0.05)
    assert t.spread_ms < 0.2 * t.median_ms


def _median_after(flush, run, reps=40):
    """Median ms of `run` over `reps` runs, each after `flush()` outside its own pair of events."""
    import cupy as cp
    for _ in range(5):
        flush(); run()
    pairs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for s, e in pairs:
        flush()
        s.record(); run(); e.record()
    pairs[-1][1].synchronize()
    return float(np.median([cp.cuda.get_elapsed_time(s, e) for s, e in pairs]))


def test_the_l2_flush_leaves_no_write_back_debt():
    """A 64 MiB copy (about the L2's size) after labkit's flush is as fast as after a flush that only
    reads a buffer twice the L2 (a plain CuPy sum), and a memset flush is measured beside them."""
    import cupy as cp
    from labkit.measure.timing import L2Flusher
    l2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    x = cp.random.random((64 << 20) // 4, dtype=cp.float32)
    y = cp.empty_like(x)
    buf = cp.ones(2 * l2 // 4, dtype=cp.float32)
    labkit_flush = L2Flusher()
    pure_read = _median_after(lambda: buf.sum(), lambda: cp.copyto(y, x))
    ours = _median_after(labkit_flush, lambda: cp.copyto(y, x))
    memset = _median_after(lambda: buf.fill(0), lambda: cp.copyto(y, x))
    print(f"64 MiB copy after: labkit's flush {ours * 1e3:.1f} us, a read of 2 x L2 {pure_read * 1e3:.1f} us, "
          f"a memset of 2 x L2 {memset * 1e3:.1f} us")
    assert ours == pytest.approx(pure_read, rel=0.03)
    assert ours <= memset * 1.01


def test_memory_bound_records_carry_a_same_size_copy():
    import cupy as cp
    from labkit.measure import ceilings
    from labkit.measure.context import Context
    from labkit.measure.device import gpu_info
    from labkit.measure.timing import bench
    ctx = Context(ceilings.measure(verbose=False), gpu_info())
    small, big = 64 << 20, 1 << 30                  # bytes moved
    recs = []
    for nbytes in (small, big):
        x = cp.random.random(nbytes // 8, dtype=cp.float32)
        y = cp.empty_like(x)
        recs.append(ctx.record(chapter="00", op="copy", kernel="copyto", shape=[x.size], dtype="float32",
                               bytes=nbytes, flops=0, timing=bench(lambda: cp.copyto(y, x))))
    for r in recs:
        assert r.copy_ms and r.ceiling_value == pytest.approx(r.copy_gbps)
        assert r.fraction_of_ceiling == pytest.approx(1.0, rel=0.05), "a copy is 100% of a copy of its size"
    assert recs[0].copy_gbps < recs[1].copy_gbps, "copy bandwidth grows with size"


def test_ceilings_are_plausible():
    from labkit.measure import ceilings
    c = ceilings.measure(refresh=True, verbose=False)
    ds = ceilings.datasheet_for(c["gpu"])
    assert c["copy_gbps"] > 100 and c["fp32_tflops"] > 1 and c["bf16_tflops"] > 10
    from labkit.measure.device import gpu_info
    if float(gpu_info()["compute_capability"]) >= 8.0:          # bf16 tensor cores: the mma.sync probe ran
        assert 10 < c["mma_tflops"] < 1.05 * (ds[1]["bf16_tflops"] if ds else 1e4)
    if ds:
        _, d = ds
        assert 0.5 * d["bandwidth_gbps"] < c["copy_gbps"] < 1.05 * d["bandwidth_gbps"]
        assert c["fp32_tflops"] < 1.05 * c["fp32_peak_tflops"]


def test_guarded_output_catches_out_of_bounds_and_unwritten():
    import cupy as cp
    from labkit.measure.checks import GuardedOutput
    from labkit.measure.compile import load_kernel
    k = load_kernel('extern "C" __global__ void w(float* y, int n, int extra) {'
                    ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n + extra && i % 7 != 3) y[i] = 1.f; }', "w")
    out = GuardedOutput((1000,), "float32")
    k((8,), (128,), (out.array, np.int32(1000), np.int32(24)))
    probs = out.problems()
    assert any("past the end" in p and "element 1000" in p for p in probs), probs
    assert any("never written" in p and "first: [3]" in p for p in probs), probs


def test_compile_error_on_the_gpu_path_names_the_line():
    from labkit.measure.compile import load_kernel
    from labkit.errors import KernelCompileError
    with pytest.raises(KernelCompileError, match="line 2"):
        load_kernel('extern "C" __global__ void k(float* y) {\n  y[0] = nope;\n}', "k")
    with pytest.raises(KernelCompileError, match="no kernel named 'other'"):
        load_kernel('extern "C" __global__ void k(float* y) { y[0] = 1.f; }', "other")


def test_wrapper_input_errors_are_clear():
    import cupy as cp
    from labkit.chapters import ch01
    from labkit.errors import KernelInputError
    x = cp.zeros(1024, dtype=cp.float32)
    with pytest.raises(KernelInputError, match="dtype float64"):
        ch01.copy_vec128(x.astype(cp.float64), x)
    with pytest.raises(KernelInputError, match="shape"):
        ch01.copy_vec128(x, cp.zeros(10, dtype=cp.float32))
    with pytest.raises(KernelInputError, match="not contiguous"):
        ch01.copy_vec128(x[::2], cp.zeros(512, dtype=cp.float32))
    with pytest.raises(KernelInputError, match="16-byte aligned"):
        ch01.copy_vec128(x[1:], cp.zeros(1023, dtype=cp.float32))
    with pytest.raises(KernelInputError, match="CuPy array"):
        ch01.copy_vec128(np.zeros(4, np.float32), x)


def test_compile_check_reports_after_cuda_work():
    # In lab 01 under nbval on the H200, NVRTC returned no ptxas report once the driver was loaded and the
    # file had been compiled before (NVRTC's cache): the report must come back on every compile.
    import cupy as cp
    from labkit.chapters import ch01
    from labkit.measure.compile import compile_check
    x = cp.arange(1 << 20, dtype=cp.float32)
    y = cp.empty_like(x)
    ch01.copy_vec128_flat(x, y)
    cp.cuda.get_current_stream().synchronize()
    for _ in range(3):
        report = compile_check("01-roofline/03_copy_vec128_flat.cu", "sm_90")
        assert report.functions["copy_vec128_flat"].registers > 0
    assert bool((y == x).all())


def test_interleaved_timing_agrees_with_bench_and_alternates():
    """Two copies of different sizes timed in alternation: each median matches its own bench, and the
    pooled Timing of two pairs holds all their runs."""
    import cupy as cp
    from labkit.measure.timing import bench, bench_interleaved, pooled
    big, small = (cp.random.random(n, dtype=cp.float32) for n in (64 << 20, 16 << 20))
    out_b, out_s = cp.empty_like(big), cp.empty_like(small)
    fns = {"big": lambda: cp.copyto(out_b, big), "small": lambda: cp.copyto(out_s, small)}
    ts = bench_interleaved(fns, reps=30)
    assert list(ts) == ["big", "small"] and all(t.reps == 30 for t in ts.values())
    assert ts["big"].median_ms == pytest.approx(bench(fns["big"]).median_ms, rel=0.1)
    assert ts["small"].median_ms == pytest.approx(bench(fns["small"]).median_ms, rel=0.1)
    assert 3 < ts["big"].median_ms / ts["small"].median_ms < 5
    assert pooled([ts["big"], ts["big"]]).reps == 60

"""labkit on a real GPU: timing against a plain event loop, ceilings, guarded outputs, input errors."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_bench_agrees_with_a_plain_event_loop_on_copy():
    import cupy as cp
    from labkit.timing import bench
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


def test_ceilings_are_plausible():
    from labkit import ceilings
    c = ceilings.measure(refresh=True, verbose=False)
    ds = ceilings.datasheet_for(c["gpu"])
    assert c["copy_gbps"] > 100 and c["fp32_tflops"] > 1 and c["bf16_tflops"] > 10
    if ds:
        _, d = ds
        assert 0.5 * d["bandwidth_gbps"] < c["copy_gbps"] < 1.05 * d["bandwidth_gbps"]
        assert c["fp32_tflops"] < 1.05 * c["fp32_peak_tflops"]


def test_guarded_output_catches_out_of_bounds_and_unwritten():
    import cupy as cp
    from labkit.checks import GuardedOutput
    from labkit.compile import load_kernel
    k = load_kernel('extern "C" __global__ void w(float* y, int n, int extra) {'
                    ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n + extra && i % 7 != 3) y[i] = 1.f; }', "w")
    out = GuardedOutput((1000,), "float32")
    k((8,), (128,), (out.array, np.int32(1000), np.int32(24)))
    probs = out.problems()
    assert any("past the end" in p and "element 1000" in p for p in probs), probs
    assert any("never written" in p and "first: [3]" in p for p in probs), probs


def test_compile_error_on_the_gpu_path_names_the_line():
    from labkit.compile import load_kernel
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
    from labkit.compile import compile_check
    x = cp.arange(1 << 20, dtype=cp.float32)
    y = cp.empty_like(x)
    ch01.copy_vec128_flat(x, y)
    cp.cuda.get_current_stream().synchronize()
    for _ in range(3):
        report = compile_check("01-roofline/03_copy_vec128_flat.cu", "sm_90")
        assert report.functions["copy_vec128_flat"].registers > 0
    assert bool((y == x).all())

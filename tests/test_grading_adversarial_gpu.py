"""Adversarial submissions, one per hole the grader had (GPU tests: the lead runs them on the H200 with
`pytest -m gpu tests/test_grading_adversarial_gpu.py`). Each source below earned points from the grader
before its fix; the test says what the verdict must be now."""
from __future__ import annotations

import json

import pytest

from labkit.grading import grade
from labkit.grading import release as R
from labkit.grading import tasks as T
from labkit.paths import LABS

from exercise_sources import solution_source, verdict_line as line

pytestmark = pytest.mark.gpu


COPY_HEAD = 'extern "C" __global__ void copy_probe(const float* __restrict__ x, float* __restrict__ y, long long n)\n'
GRID = """
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
"""

# 1. zeroes its input and its output: a reference computed from the inputs after the launch matched it
COPY_ZEROES_INPUT = COPY_HEAD + "{" + GRID + """
    for (; i < n; i += stride) { ((float*)x)[i] = 0.0f; y[i] = 0.0f; }
}
"""

ADD_ZEROES_INPUTS = """#include <cuda_bf16.h>
extern "C" __global__ void add_bf16(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) { ((__nv_bfloat16*)x)[i] = __float2bfloat16(0.0f); ((__nv_bfloat16*)b)[i] = __float2bfloat16(0.0f);
                 y[i] = __float2bfloat16(0.0f); }
}
"""

# 2. does the work once per (output, n) and returns at once when launched again on the same buffers: the
#    timed launches re-ran on the checked output, and only the poison and canaries were looked at
COPY_ONCE_PER_BUFFER = COPY_HEAD.replace("extern", """__device__ float* last_y;
__device__ long long last_n;
__device__ unsigned int finished;
extern""") + "{" + """
    __shared__ int skip;
    if (threadIdx.x == 0) skip = (*(float* volatile*)&last_y == y && *(volatile long long*)&last_n == n);
    __syncthreads();
    if (skip) return;
""" + GRID + """
    for (; i < n; i += stride) y[i] = x[i];
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&finished, 1u) == gridDim.x - 1) { last_y = y; last_n = n; finished = 0; }
}
"""

# 3. a 32-bit index: right on every public shape, wrong past 2^31 elements (a hidden edge case)
ADD_INT_INDEX = """#include <cuda_bf16.h>
extern "C" __global__ void add_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                    __nv_bfloat16* __restrict__ y, long long n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(b[i]));
}
"""

# 4. a __device__ array of 100 GB: with it loaded, the hidden > 2^31 shape no longer fit and was skipped,
#    and a skipped shape counted as passed
COPY_HOG = COPY_HEAD.replace("extern", "__device__ char hog[100ull << 30];\nextern") + "{" + GRID + """
    if (n < 0) hog[n & 1023] = 1;
    for (; i < n; i += stride) y[i] = x[i];
}
"""

# 5. an #include that stalls NVRTC
COPY_DEV_ZERO = '#include "/dev/zero"\n' + COPY_HEAD + "{ }\n"

# 6. an endless loop
COPY_SPIN = COPY_HEAD + "{" + GRID + """
    for (; i < n; i += stride) { while (((volatile float*)y)[i] != x[i] + 1.0f) { } }
}
"""

# 7. a stray write 4000 elements (16 KB) past the end: caught by the 64 KiB canary pads
COPY_FAR_PAST_END = COPY_HEAD + "{" + GRID + """
    for (; i < n; i += stride) y[i] = x[i];
    if (blockIdx.x == 0 && threadIdx.x == 0 && n > 0) y[n + 4000] = 1.0f;
}
"""

# 8. GELU through tanh(u) = (e^2u - 1) / (e^2u + 1): inf / inf = NaN for large |x|, which the inputs reach now
GELU_NAIVE = """#include <cuda_bf16.h>
extern "C" __global__ void bias_gelu(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                     __nv_bfloat16* __restrict__ y, int rows, int cols)
{
    const long long n = (long long)rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = __bfloat162float(x[i]) + __bfloat162float(b[i % cols]);
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        const float e = expf(2.0f * u);
        y[i] = __float2bfloat16(0.5f * v * (1.0f + (e - 1.0f) / (e + 1.0f)));
    }
}
"""

# 9. RMSNorm without eps: an all-zero row gives 0 * inf = NaN
RMSNORM_NO_EPS = """#include <cuda_bf16.h>
extern "C" __global__ void rmsnorm(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                   __nv_bfloat16* __restrict__ y, int rows, int cols, float eps)
{
    __shared__ float partial[8];
    const __nv_bfloat16* xr = x + (long long)blockIdx.x * cols;
    __nv_bfloat16* yr = y + (long long)blockIdx.x * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float f = __bfloat162float(xr[c]); ss += f * f; }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += partial[k];
    const float inv = rsqrtf(t / cols);                 // no eps
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(w[c]));
}
"""


def test_a_kernel_that_zeroes_its_inputs_fails():
    v = grade("01.copy_probe", COPY_ZEROES_INPUT, speed=False)
    assert "FAIL: the kernel wrote to its input x" in line(v, "n=1000 "), v.text
    assert v.points == 0
    v = grade("02.add_any_n", ADD_ZEROES_INPUTS, speed=False)
    assert "the kernel wrote to its input x" in line(v, "n=257"), v.text
    assert "the kernel wrote to its input b" in line(v, "n=257")


def test_a_kernel_that_works_only_once_gets_no_speed_points():
    v = grade("01.copy_probe", COPY_ONCE_PER_BUFFER)
    assert "correctness: PASS" in v.text, v.text          # every checked launch is on fresh buffers
    sp = line(v, "speed:")
    assert "not measured: timed launch 1 did not do the work" in sp and "never written" in sp, v.text
    assert v.points == 3


def test_the_32_bit_index_fails_a_drawn_hidden_shape():
    v = grade("02.add_any_n", ADD_INT_INDEX, speed=False)
    assert v.passed, v.text                                # right on the public shapes
    v = grade("02.add_any_n", ADD_INT_INDEX, hidden=True, seed=1)
    assert 2 ** 31 + 3 in T.get("02.add_any_n").draw_hidden(1)
    hl = line(v, "hidden: n=2147483651")
    assert "FAIL" in hl or "CRASH" in hl, v.text
    assert "hidden tests: FAIL" in v.text


def test_a_huge_device_array_does_not_skip_the_hidden_shapes():
    v = grade("01.copy_probe", COPY_HOG, hidden=True, seed=1)
    text = v.text
    assert "NOT GRADED" not in text, text                  # memory was judged before the module was loaded
    assert ("could not load the compiled module" in text or                          # the driver refused it
            "out of GPU memory for n=2147483653 once your module was loaded" in text or  # loaded, then no room
            ("CRASH" in text and "memory" in text.lower())), text                         # lazy loading: at launch
    assert v.points < v.max_points and "grader error" not in text


def test_include_dev_zero_is_refused_at_once():
    import time
    t = time.monotonic()
    v = grade("01.copy_probe", COPY_DEV_ZERO, speed=False)
    assert time.monotonic() - t < 60
    assert "compile error:" in v.text and "absolute path" in v.text and v.points == 0


def test_an_endless_loop_is_stopped_and_named():
    v = grade("01.copy_probe", COPY_SPIN, speed=False)
    assert "TIME LIMIT: no result within" in line(v, "n=1 "), v.text
    assert grade("01.copy_probe", solution_source("01.copy_probe"), speed=False).passed


def test_a_write_far_past_the_end_is_caught():
    v = grade("01.copy_probe", COPY_FAR_PAST_END, speed=False)
    assert "wrote past the end of the output (element 5000, 4001 past the last of 1000" in line(v, "n=1000 "), v.text


def test_inputs_reach_the_hard_regions():
    v = grade("03.bias_gelu", GELU_NAIVE, speed=False)
    assert "correctness: FAIL" in v.text and "got nan" in v.text, v.text
    v = grade("04.rmsnorm", RMSNORM_NO_EPS, speed=False)
    assert "correctness: FAIL" in v.text and "got nan" in v.text, v.text


@pytest.mark.parametrize("task_id", ["01.copy_probe", "02.add_any_n", "02.bias_cols", "03.vec_add",
                                     "03.bias_gelu", "04.rmsnorm", "04.online_softmax"])
def test_solutions_pass_their_drawn_hidden_shapes(task_id):
    v = grade(task_id, solution_source(task_id), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.parametrize("task_id", ["01.copy_probe", "03.vec_add", "03.bias_gelu", "04.rmsnorm",
                                     "04.online_softmax"])
def test_memory_estimate_covers_the_real_peak(task_id):
    """The CuPy pool's high-water mark over one case (reference, comparison and all) stays below the
    estimate the worker judges free memory by."""
    import types
    import cupy as cp
    from labkit.grading import worker as W
    from labkit.measure.compile import load_kernel
    task = T.get(task_id)
    shape = {"01.copy_probe": 1 << 25, "03.vec_add": (1 << 25) + 3, "03.bias_gelu": (4096, 4097),
             "04.rmsnorm": (4096, 4097), "04.online_softmax": (64, 1 << 19)}[task_id]
    case = task.cases([shape])[0]
    kernel = load_kernel(solution_source(task_id), task.kernel)
    ctx = types.SimpleNamespace(sms=T.sms(), gpu="", module_bytes=0, flusher=None)
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    status, detail, _ = W.run_case(task, kernel, case, ctx)
    peak = pool.total_bytes()
    assert status == "ok", detail
    assert peak <= W.case_memory(task, case), (peak, W.case_memory(task, case))


def test_batch_of_adversaries(tmp_path):
    from labkit.grading.batch import grade_batch
    subs = tmp_path / "subs"
    who = {"zero": ("01", {"copy_probe_src": COPY_ZEROES_INPUT}), "once": ("01", {"copy_probe_src": COPY_ONCE_PER_BUFFER}),
           "devzero": ("01", {"copy_probe_src": COPY_DEV_ZERO}), "int32": ("02", {"add_bf16_src": ADD_INT_INDEX}),
           "good": ("01", {"copy_probe_src": solution_source("01.copy_probe")})}
    for name, (ch, cells) in who.items():
        nb = json.loads(next(LABS.glob(f"{ch}-*/{R.STUDENT_NAME}")).read_text())
        for var, src in cells.items():
            nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"s-{var}", "metadata": {},
                                "outputs": [], "source": f"{var} = r'''{src}'''\n"})
        (subs / name).mkdir(parents=True)
        (subs / name / "exercises.ipynb").write_text(json.dumps(nb))
    rows = grade_batch(subs, tmp_path / "g.csv", seed=7, timeout=600, progress=False)
    by = {(r.submission.split("/")[0], r.exercise): r for r in rows}
    assert by["good", "01.copy_probe"].points == by["good", "01.copy_probe"].max_points == 6
    assert "wrote to its input x" in " ".join(by["zero", "01.copy_probe"].lost)
    assert by["once", "01.copy_probe"].points == 4 and "did not do the work" in " ".join(by["once", "01.copy_probe"].lost)
    assert "absolute path" in " ".join(by["devzero", "01.copy_probe"].lost)
    assert by["int32", "02.add_any_n"].points == 3

"""GPU tests of the grader: wrong submissions get the right verdict, reference solutions full marks, a
faulting submission leaves the notebook's process usable, and the batch grader grades every submission.

The reference solutions are read from the solution notebooks (the one place they live); the wrong ones
below are each a small, realistic mistake.
"""
from __future__ import annotations

import csv
import json

import pytest

from labkit.grading import grade
from labkit.grading import notebook as N
from labkit.paths import LABS

from exercise_sources import solution_source, verdict_line as line

pytestmark = pytest.mark.gpu


COPY_HEAD = 'extern "C" __global__ void copy_probe(const float* __restrict__ x, float* __restrict__ y, long long n)\n'
GRID_STRIDE = """
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
"""

COPY_OFF_BY_ONE = COPY_HEAD + "{" + GRID_STRIDE + """
    for (; i <= n; i += stride) y[i] = x[i];      // <= : one element too many
}
"""

COPY_PAST_END = COPY_HEAD + "{" + GRID_STRIDE + """
    for (; i < n + 3; i += stride) y[i] = x[i];   // three past the end
}
"""

COPY_SPIN = COPY_HEAD + "{" + GRID_STRIDE + """
    // waits for y[i] to equal x[i] before copying: it never does (a spin on global memory)
    for (; i < n; i += stride) {
        while (((volatile float*)y)[i] != x[i]) { }
    }
}
"""

COPY_SLOW = COPY_HEAD + "{" + """
    if (threadIdx.x >= 32) return;                // only one warp of each block works: few bytes in flight
    const long long stride = (long long)gridDim.x * 32;
    for (long long i = blockIdx.x * 32LL + threadIdx.x; i < n; i += stride) y[i] = x[i];
}
"""

COPY_ILLEGAL = COPY_HEAD + "{" + GRID_STRIDE + """
    for (; i < n; i += stride) y[i + (1LL << 40)] = x[i];   // a wild pointer
}
"""

COPY_COMPILE_ERROR = COPY_HEAD + """{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[j];
}
"""

ADD_HEAD = """#include <cuda_bf16.h>
extern "C" __global__ void add_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                    __nv_bfloat16* __restrict__ y, long long n)
"""

ADD_NO_BOUNDS = ADD_HEAD + """{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    y[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(b[i]));   // no i < n
}
"""

ADD_INT_INDEX = ADD_HEAD + """{
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // 32-bit: wraps past 2^31 elements
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(b[i]));
}
"""

VEC_HEAD = """#include <cuda_bf16.h>
extern "C" __global__ void add_bf16_vec(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                        __nv_bfloat16* __restrict__ y, long long n)
{
    const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * blockDim.x;
"""
VEC_BODY = """
        const uint4 xa = reinterpret_cast<const uint4*>(x)[v], ba = reinterpret_cast<const uint4*>(b)[v];
        uint4 r;
        const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xa);
        const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&ba);
        __nv_bfloat162* r2 = reinterpret_cast<__nv_bfloat162*>(&r);
        for (int k = 0; k < 4; ++k) {
            const float2 fx = __bfloat1622float2(x2[k]), fb = __bfloat1622float2(b2[k]);
            r2[k] = __floats2bfloat162_rn(fx.x + fb.x, fx.y + fb.y);
        }
        reinterpret_cast<uint4*>(y)[v] = r;
"""

VEC_ROUNDS_UP = VEC_HEAD + """
    for (long long v = tid; v < (n + 7) / 8; v += nthreads) {   // the tail as a whole vector: past the end
""" + VEC_BODY + "    }\n}\n"

VEC_ASSUMES_ALIGNED = VEC_HEAD + """
    for (long long v = tid; v < n / 8; v += nthreads) {         // assumes 16-byte aligned pointers
""" + VEC_BODY + """    }
    for (long long i = n / 8 * 8 + tid; i < n; i += nthreads)
        y[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(b[i]));
}
"""

RMSNORM_RACE = """#include <cuda_bf16.h>
extern "C" __global__ void rmsnorm(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                   __nv_bfloat16* __restrict__ y, int rows, int cols, float eps)
{
    __shared__ float partial[8];
    __shared__ float total;
    const __nv_bfloat16* xr = x + (long long)blockIdx.x * cols;
    __nv_bfloat16* yr = y + (long long)blockIdx.x * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float f = __bfloat162float(xr[c]); ss += f * f; }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    // missing __syncthreads(): thread 0 may read partials not yet written
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int k = 0; k < 8; ++k) t += partial[k];
        total = t;
    }
    // missing __syncthreads(): the other warps may read total before thread 0 wrote it
    const float inv = rsqrtf(total / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(w[c]));
}
"""


# ------------------------------------------------------------------------------- reference solutions

@pytest.mark.parametrize("task_id", ["01.copy_probe", "02.add_any_n", "02.bias_cols", "03.vec_add",
                                     "03.bias_gelu", "04.rmsnorm", "04.online_softmax"])
def test_reference_solution_gets_full_marks(task_id):
    v = grade(task_id, solution_source(task_id))
    assert v.passed, v.text
    assert "FAIL" not in v.text and "CRASH" not in v.text, v.text


def test_reference_add_passes_the_overflow_shape():
    v = grade("02.add_any_n", solution_source("02.add_any_n"), shapes=[2 ** 31 + 3], hidden=True)
    assert v.passed, v.text
    assert line(v, "hidden: n=2147483651").endswith("ok")


# ------------------------------------------------------------------------------------ wrong kernels

def test_off_by_one_writes_past_the_end():
    v = grade("01.copy_probe", COPY_OFF_BY_ONE, speed=False)
    assert "FAIL: wrote past the end of the output (element 0, 1 past the last of 0)" in line(v, "n=0")
    assert "FAIL: wrote past the end of the output (element 1000, 1 past the last of 1000)" in line(v, "n=1000 ")
    assert v.points == 0


def test_a_few_elements_past_the_end():
    v = grade("01.copy_probe", COPY_PAST_END, speed=False)
    assert "wrote past the end of the output (element 3, 1 past the last of 3)" in line(v, "n=3 ")
    v = grade("03.vec_add", VEC_ROUNDS_UP, speed=False)
    assert "wrote past the end of the output (element 1, 1 past the last of 1)" in line(v, "n=1 "), v.text


def test_no_bounds_check():
    v = grade("02.add_any_n", ADD_NO_BOUNDS)
    assert "FAIL: wrote past the end of the output (element 1, 1 past the last of 1)" in line(v, "n=1 ")
    assert line(v, "n=0").endswith("ok")                 # no launch for n = 0
    assert "correctness: FAIL" in v.text


def test_race_without_syncthreads():
    v = grade("04.rmsnorm", RMSNORM_RACE, shapes=[(5, 4096), (17, 4095), (8192, 4096)], speed=False)
    assert "correctness: FAIL" in v.text, v.text
    assert "elements wrong; first at [" in v.text


def test_int_index_overflows_past_2_31():
    v = grade("02.add_any_n", ADD_INT_INDEX, speed=False)
    assert v.passed, v.text                              # fine on the public shapes...
    v = grade("02.add_any_n", ADD_INT_INDEX, shapes=[2 ** 31 + 3], hidden=True)
    hl = line(v, "hidden: n=2147483651")                 # ...not past 2^31: unwritten, or a crash
    assert ("FAIL" in hl and ("never written" in hl or "wrote before" in hl)) or "CRASH" in hl, v.text
    assert v.points == 0


def test_misaligned_access_crashes_cleanly_and_the_next_grade_works():
    import cupy as cp
    before = cp.arange(10, dtype=cp.float32)             # the "notebook" has its own CUDA context
    v = grade("03.vec_add", VEC_ASSUMES_ALIGNED, shapes=[1000])
    assert line(v, "n=1000 ").endswith("ok")
    crash = line(v, "n=1000 (x, b, y 1 element")
    assert "CRASH: the kernel crashed:" in crash and "isaligned" in crash, v.text
    assert "not run" in line(v, "n=1000 (only x")
    assert "your notebook and its GPU state are unaffected" in v.text
    assert float((before * 2).sum()) == 90.0             # the parent's context still works
    ok = grade("03.vec_add", solution_source("03.vec_add"), speed=False)
    assert ok.passed, ok.text


def test_illegal_address_crashes_cleanly():
    v = grade("01.copy_probe", COPY_ILLEGAL, speed=False)
    assert "CRASH: the kernel crashed:" in line(v, "n=1 "), v.text
    assert "llegal" in line(v, "n=1 ")
    assert grade("01.copy_probe", solution_source("01.copy_probe"), speed=False).passed


def test_endless_loop_hits_the_time_limit_and_the_next_grade_works():
    v = grade("01.copy_probe", COPY_SPIN, speed=False)
    assert line(v, "n=0").endswith("ok")
    assert "TIME LIMIT: no result within 10 s; the kernel was stopped" in line(v, "n=1 "), v.text
    assert "not run: after the time limit above" in line(v, "n=3 ")
    assert grade("01.copy_probe", solution_source("01.copy_probe"), speed=False).passed


def test_correct_but_slow():
    v = grade("01.copy_probe", COPY_SLOW)
    assert "correctness: PASS" in v.text
    sp = line(v, "speed:")
    assert sp.startswith("speed: FAIL [") and "needs 85% of copy   0/2" in sp, v.text
    assert v.points == 3


# --------------------------------------------------------------------------------------- the batch

def _student_notebook(chapter: str, sources: dict) -> dict:
    path = next(LABS.glob(f"{chapter}-*/{N.STUDENT_NAME}"))
    nb = json.loads(path.read_text())
    for var, src in sources.items():
        nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"sub-{var}", "metadata": {},
                            "outputs": [], "source": f"{var} = r'''{src}'''\n"})
    return nb


def test_batch_grades_every_submission(tmp_path):
    subs = tmp_path / "subs"
    cases = {
        "good": ("01", {"copy_probe_src": solution_source("01.copy_probe"),
                        "roofline_answers": None}),
        "spin": ("01", {"copy_probe_src": COPY_SPIN}),
        "crash": ("01", {"copy_probe_src": COPY_ILLEGAL}),
        "broken": ("01", {"copy_probe_src": COPY_COMPILE_ERROR}),
        "slow": ("01", {"copy_probe_src": COPY_SLOW}),
        "overflow": ("02", {"add_bf16_src": ADD_INT_INDEX}),
    }
    for who, (ch, sources) in cases.items():
        (subs / who).mkdir(parents=True)
        sources = {k: v for k, v in sources.items() if v is not None}
        (subs / who / "exercises.ipynb").write_text(json.dumps(_student_notebook(ch, sources)))
    (subs / "junk").mkdir()
    (subs / "junk" / "exercises.ipynb").write_text("not json")
    from labkit.grading.batch import grade_batch
    out = tmp_path / "grades.csv"
    grade_batch(subs, out, timeout=240, progress=False)
    rows = list(csv.DictReader(out.open()))
    by = {(r["submission"].split("/")[0], r["exercise"]): r for r in rows}
    assert {r["submission"].split("/")[0] for r in rows} == set(cases) | {"junk"}
    assert by["good", "01.copy_probe"]["points"] == by["good", "01.copy_probe"]["max_points"] == "6"
    assert "TIME LIMIT" in by["spin", "01.copy_probe"]["lost"]
    assert "CRASH" in by["crash", "01.copy_probe"]["lost"]
    assert "compile error" in by["broken", "01.copy_probe"]["lost"]
    assert by["slow", "01.copy_probe"]["points"] == "4" and "speed:" in by["slow", "01.copy_probe"]["lost"]
    ov = by["overflow", "02.add_any_n"]
    assert ov["points"] == "3" and "hidden" in ov["lost"] and "2147483651" in ov["lost"], ov
    assert "not a readable notebook" in by["junk", ""]["lost"]

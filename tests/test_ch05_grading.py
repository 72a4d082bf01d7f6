"""Chapter 05's graded exercises (labkit/grading/ch05.py, labs/05-gemm-simt/exercises.solution.ipynb) and the
grader's library speed baseline they brought (KernelTask.speed_baseline: "% of cuBLAS fp32" in TFLOP/s).

CPU: the registry, the numeric answers through the static extractor, the solutions and starters compile
(sm_80, sm_90, no spills), the release is in step, the tolerance tells a correct fp32 sum from TF32 or a
missing product, the verdict's two speed forms and the sanitize pattern nbval applies to them.
GPU (the H200 runner): the reference solutions get full marks, on drawn hidden shapes too; a kernel that
skips the K tail, one that ignores the M / N edges, one that zero-fills only one operand, one with TF32-like
operands fail; one that works only on the first launch of a buffer gets no speed points; a grade takes
about a minute at most.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from labkit.grading import ch05 as G
from labkit.grading import check_answers, grade
from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.grading import worker as W
from labkit.grading.verdict import SPEED_PATTERN, CaseResult, RunResult, SpeedResult, sanitize, score
from labkit.paths import LABS

from exercise_sources import edit as _edit, solution_source, student_source, verdict_line as line

pytestmark = pytest.mark.chapter("05")

SOLUTION = LABS / "05-gemm-simt" / N.SOLUTION_NAME
STUDENT = LABS / "05-gemm-simt" / N.STUDENT_NAME
SMEM, REG = T.get("05.smem_sgemm"), T.get("05.regblock_sgemm")


# ------------------------------------------------------------------------------------------ CPU

def test_the_registry_finds_the_three_tasks():
    tasks = T.for_chapter("05")
    assert [t.id for t in tasks] == ["05.numbers", "05.smem_sgemm", "05.regblock_sgemm"]
    assert isinstance(tasks[0], T.NumericTask) and 4 <= len(tasks[0].questions) <= 6
    for t in (SMEM, REG):
        assert t.speed_baseline is G.cublas_baseline and t.baseline_name == "cuBLAS fp32"
        assert t.floor_peaks == ("fp32_tflops",) and callable(t.atol)
        assert T.norm_shape(t.speed_shape) == (4096, 4096, 4096)
    assert SMEM.speed_threshold is None and SMEM.max_points == 4          # timed for information only
    assert REG.speed_threshold == G.REGBLOCK_SPEED_PCT and REG.max_points == 6


def test_launch_geometry():
    calls = []
    for task, grid_tile, block in ((SMEM, 32, (32, 32)), (REG, 128, (256,))):
        case = task.cases([(257, 130, 9)])[0]
        calls.clear()
        task.launch(lambda *a: calls.append(a), {"A": "a", "B": "b"}, "c", case, None)
        (grid, blk, args), = calls
        assert grid == (-(-130 // grid_tile), -(-257 // grid_tile)) and blk == block
        assert args[:3] == ("a", "b", "c") and [int(v) for v in args[3:]] == [257, 130, 9]


def test_numeric_answers_of_the_solution_score_full_marks_and_the_students_none():
    task = T.get("05.numbers")
    sol = N.extract_answers(N.read_notebook(SOLUTION), task.id, task.answers_var)
    v = check_answers(task.id, sol)
    assert v.passed and v.points == 6, v.text
    stu = N.extract_answers(N.read_notebook(STUDENT), task.id, task.answers_var)
    assert set(stu) == {q.key for q in task.questions} and check_answers(task.id, stu).points == 0


def test_numeric_hints_name_the_part_to_recheck():
    task = T.get("05.numbers")
    right = {q.key: q.expected for q in task.questions}
    v = check_answers(task.id, {**right, "intensity_128x128": 16, "smem_bytes_bk8": 2048,
                                "blocks_per_sm_256x128regs": 8})
    assert v.points == 3
    assert "too low by a factor of 2" in v.text and "BK cancels" in v.text
    assert "4 bytes per float" in v.text and "registers (65536 / (256 x 128))" in v.text
    assert right["intensity_128x128"] == 32 and right["gemm_flops_4096"] == 2 * 4096 ** 3


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_solutions_compile_without_spills_and_starters_compile(arch):
    from labkit.measure.compile import compile_check
    for task in (SMEM, REG):
        rep = compile_check(solution_source(task), arch)
        f = rep.functions[task.kernel]
        assert f.spills == 0, str(rep)
        assert task.kernel in compile_check(student_source(task), arch).functions
    assert compile_check(solution_source(REG), arch).functions[REG.kernel].registers <= 128   # 2 blocks / SM


def test_the_student_view_is_in_step_and_keeps_the_skeleton():
    assert STUDENT.read_text(encoding="utf-8") == N.release_text(SOLUTION), "run `python -m labkit release 05`"
    stub = student_source(REG)
    # the staging of the slabs is given; the outer products and the edge-checked store are the learner's
    assert "As[k][r] = (gm < M && gk < K)" in stub and "Bs[k][c] = (gk < K && gn < N)" in stub
    assert stub.count("// TODO:") == 2 and "fmaf" not in stub
    assert student_source(SMEM).count("// TODO:") == 1
    text = STUDENT.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "hidden=True" not in text


def test_the_notebook_states_the_speed_bar_of_the_task():
    md = "".join(c["source"] for c in N.read_notebook(SOLUTION)["cells"] if c["cell_type"] == "markdown")
    assert f"at least **{G.REGBLOCK_SPEED_PCT:.0f}% of cuBLAS fp32**" in md, "update the notebook with the bar"
    assert REG.launch_text in md and SMEM.launch_text in md


def test_hidden_shapes_hold_the_edge_cases_and_stay_cheap_on_the_host():
    for task, tile in ((SMEM, 32), (REG, 128)):
        for seed in (1, 2, 3):
            shapes = task.draw_hidden(seed)
            assert (1024, 32, 256) in shapes and (32, 32, 4099) in shapes         # tall-skinny, K-heavy
            assert any(m % tile and n % tile for m, n, _ in shapes)             # tiles off the edge
            assert any(k % (32 if task is SMEM else 8) for *_, k in shapes)      # a partial last slab
            for s in shapes:     # the worker's host reference (float64 numpy) stays a fraction of a second
                assert task.elements(s) <= W.HOST_LIMIT and s[0] * s[1] * s[2] <= 5e8, s
        assert task.draw_hidden(1) != task.draw_hidden(2)


def test_the_tolerance_tells_a_correct_fp32_product_from_tf32_and_a_missing_term():
    """On the public shapes, with numpy standing in for the GPU: an fp32 sum in order (what a kernel does)
    stays inside 4 K eps rms(A) rms(B) (+ eps relative); operands truncated to TF32's 10 mantissa bits,
    and a product with its last k dropped, do not."""
    from labkit.chapters.ch05 import tolerance
    rng = np.random.default_rng(5)
    for M, N_, K in [(1, 1, 1), (17, 19, 23), (33, 31, 65), (129, 127, 1), (32, 32, 4099)]:
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N_)).astype(np.float32)
        case = REG.cases([(M, N_, K)])[0]
        ref, atol = W.expected(REG, {"A": (a, "f32"), "B": (b, "f32")}, case)
        assert atol == pytest.approx(tolerance(K, a, b), rel=1e-9)
        assert atol == pytest.approx(G.gemm_atol(np, {"A": a.astype(np.float64), "B": b.astype(np.float64)}, case))
        acc = np.zeros((M, N_), dtype=np.float32)
        for k in range(K):                      # one fp32 FMA per k, like a kernel (fma rounds once; a * b + c twice)
            acc = (acc + a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float32)

        def ok(got):
            return bool(np.all(np.abs(got - ref) <= atol + REG.rtol * np.abs(ref)))
        assert ok(acc.astype(np.float64)), (M, N_, K)
        t = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)  # noqa: E731
        assert not ok(t(a).astype(np.float64) @ t(b).astype(np.float64)), (M, N_, K)
        if K > 1:
            assert not ok(a[:, :-1].astype(np.float64) @ b[:-1].astype(np.float64)), (M, N_, K)


def test_physical_floor_is_the_fp32_peak():
    ms, why = W.physical_floor(REG, (4096, 4096, 4096), "NVIDIA H200")
    assert ms == pytest.approx(2 * 4096 ** 3 / 67e12 * 1e3) and "67 TFLOP/s" in why
    assert W.physical_floor(T.get("03.bias_gelu"), (8192, 8192), "NVIDIA H200")[0] > 0   # others unchanged


def test_the_speed_case_fits_an_h200_comfortably():
    case = REG.cases(speed=True)[-1]
    assert case.role == "speed" and W.case_memory(REG, case, speed=True) < 8e9


def _timed_run(task, kernel_ms, base_ms, statuses=None):
    cases = task.cases(speed=True)
    res = RunResult(task.id, [CaseResult(c.label, c.hidden, c.role, "ok") for c in cases])
    res.speed = SpeedResult("measured", cases[-1].label, kernel_ms=kernel_ms, copy_ms=base_ms,
                            bytes=task.bytes_moved(cases[-1].shape))
    return res


def test_the_verdict_against_cublas_reads_tflops():
    flops = 2 * 4096 ** 3
    base_ms = flops / 51.4e12 * 1e3
    v = score(REG, _timed_run(REG, 3.752, base_ms), speed_requested=True)
    pct = 100 * base_ms / 3.752
    line = next(ln for ln in v.text.splitlines() if ln.startswith("speed:"))
    want_pass = pct >= G.REGBLOCK_SPEED_PCT
    assert line == (f"speed: {'PASS' if want_pass else 'FAIL'} [{pct:.1f}% of cuBLAS fp32: 36.6 vs 51.4 TFLOP/s, "
                    f"3.752 ms], needs {G.REGBLOCK_SPEED_PCT:.0f}% of cuBLAS fp32   {2 if want_pass else 0}/2")
    slow = score(REG, _timed_run(REG, 100 * base_ms / 30.0, base_ms), speed_requested=True)
    assert f"-2 speed: 30.0% of cuBLAS fp32, needs {G.REGBLOCK_SPEED_PCT:.0f}%" in slow.lost
    assert slow.points == 3 and "speed: FAIL [" in slow.text
    info = score(SMEM, _timed_run(SMEM, 20.0, base_ms), speed_requested=True)
    assert re.search(r"^speed: \[\d+\.\d% of cuBLAS fp32: 6\.9 vs 51\.4 TFLOP/s, 20\.000 ms\] \(for information: "
                     r"this exercise has no speed points\)$", info.text, re.M), info.text
    assert info.points == info.max_points == 3


def test_the_copy_form_is_unchanged():
    sp = SpeedResult("measured", "x", kernel_ms=0.2670, copy_ms=0.2598, bytes=8 * 2 ** 27)
    assert sp.figure() == "[97.3% of copy: 4022 vs 4133 GB/s, 0.2670 ms]"
    copy = T.get("01.copy_probe")
    res = _timed_run(copy, 0.6105, 0.2570)
    v = score(copy, res, speed_requested=True)
    assert "needs 85% of copy   0/2" in v.text and "-2 speed: 42.1% of copy bandwidth, needs 85%" in v.lost


def test_the_sanitize_file_replaces_both_forms():
    """As nbval reads labs/nbval-sanitize.cfg (its own parser), on what verdict.py prints."""
    from nbval.plugin import get_sanitize_patterns
    pairs = get_sanitize_patterns((LABS / "nbval-sanitize.cfg").read_text())
    assert pairs == [(SPEED_PATTERN, "[SPEED]")]
    flops = 2 * 4096 ** 3
    texts = [score(REG, _timed_run(REG, 3.752, flops / 51.4e12 * 1e3), speed_requested=True).text,
             score(REG, _timed_run(REG, 0.0071, 0.0070), speed_requested=True).text,
             score(SMEM, _timed_run(SMEM, 123.4567, 2.5), speed_requested=True).text,
             score(T.get("01.copy_probe"), _timed_run(T.get("01.copy_probe"), 0.2670, 0.2598),
                   speed_requested=True).text]
    for text in texts:
        out = text
        for rx, rep in pairs:
            out = re.sub(rx, rep, out)
        speed = next(ln for ln in out.splitlines() if ln.startswith("speed:"))
        assert "[SPEED]" in speed and "TFLOP/s" not in speed and "GB/s" not in speed and " ms]" not in speed, speed
        assert out == sanitize(text)
    # two runs of one kernel with different figures read the same once sanitized
    a = score(REG, _timed_run(REG, 3.752, 2.60), speed_requested=True).text
    b = score(REG, _timed_run(REG, 3.7, 2.62), speed_requested=True).text
    assert a != b and sanitize(a) == sanitize(b)


def test_the_student_tree_strips_the_hidden_generators():
    from labkit.grading.release import strip_hidden_generators
    src = (T.__file__.rsplit("/", 1)[0] + "/ch05.py")
    text = strip_hidden_generators(open(src, encoding="utf-8").read())
    assert "(1024, 32, 256)" not in text and text.count("return []   # hidden shapes") == 2


# ------------------------------------------------------------------------------------------ GPU


TF32_HELPER = ('__device__ __forceinline__ float tf32(float x) { return __uint_as_float(__float_as_uint(x) '
               '& 0xffffe000u); }   // 10 mantissa bits, truncated\n')


def smem_wrong(kind: str) -> str:
    s = solution_source(SMEM)
    if kind == "no_k_tail":          # whole slabs only: the last K % 32 products are missing
        return _edit(s, "const int slabs = (K + TILE - 1) / TILE;", "const int slabs = K / TILE;")
    if kind == "no_edges":           # every thread stores, inside C or not
        return _edit(s, "if (row < M && col < N) {", "{")
    if kind == "one_sided_zero":     # A's slab is not zero-filled past K: "B's zero takes care of it"
        return _edit(s, "(row < M && ka < K) ?", "(row < M) ?")
    if kind == "tf32":
        s = _edit(s, 'extern "C"', TF32_HELPER + 'extern "C"')
        return _edit(s, "sum = fmaf(a_tile[r][k], b_tile[k][c], sum);", "sum = fmaf(tf32(a_tile[r][k]), tf32(b_tile[k][c]), sum);")
    raise KeyError(kind)


def reg_wrong(kind: str) -> str:
    s = solution_source(REG)
    if kind == "no_k_tail":
        return _edit(s, "for (int k0 = 0; k0 < K; k0 += BK)", "for (int k0 = 0; k0 + BK <= K; k0 += BK)")
    if kind == "no_edges":
        s = _edit(s, "if (gm < M) {", "{")
        return _edit(s, "if (gn < N) C[", "C[")
    if kind == "tf32":
        s = _edit(s, 'extern "C"', TF32_HELPER + 'extern "C"')
        s = _edit(s, "a[i] = As[k][ty * TM + i];", "a[i] = tf32(As[k][ty * TM + i]);")
        return _edit(s, "b[j] = Bs[k][tx * TN + j];", "b[j] = tf32(Bs[k][tx * TN + j]);")
    if kind == "once":               # the work only on the first launch into a given C (and shape)
        s = _edit(s, 'extern "C" __global__ void __launch_bounds__(THREADS, 2)\nsgemm_regblock(',
                  "__device__ __forceinline__ void regblock_body(")
        return s + r"""
__device__ float* last_c;
__device__ int last_m, last_n, last_k;
__device__ unsigned int finished;

extern "C" __global__ void __launch_bounds__(THREADS, 2)
sgemm_regblock(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    __shared__ int skip;
    if (threadIdx.x == 0) {
        skip = *(float* volatile*)&last_c == C && *(volatile int*)&last_m == M && *(volatile int*)&last_n == N
               && *(volatile int*)&last_k == K;
    }
    __syncthreads();
    if (skip) return;
    regblock_body(A, B, C, M, N, K);
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&finished, 1u) == gridDim.x * gridDim.y - 1) {
        last_c = C; last_m = M; last_n = N; last_k = K; finished = 0;
    }
}
"""
    raise KeyError(kind)


def test_the_wrong_kernels_of_the_gpu_tests_compile():
    """So that the GPU tests below fail a kernel for what it computes, not for a typo in its edit."""
    from labkit.measure.compile import compile_check
    for kind in ("no_k_tail", "no_edges", "one_sided_zero", "tf32"):
        assert SMEM.kernel in compile_check(smem_wrong(kind), "sm_90").functions
    for kind in ("no_k_tail", "no_edges", "tf32", "once"):
        assert compile_check(reg_wrong(kind), "sm_90").functions[REG.kernel].spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("task", [SMEM, REG], ids=lambda t: t.id)
def test_reference_solution_gets_full_marks(task):
    t0 = time.monotonic()
    v = grade(task.id, solution_source(task))
    took = time.monotonic() - t0
    assert v.passed, v.text
    assert "FAIL" not in v.text and "CRASH" not in v.text, v.text
    sp = line(v, "speed:")
    assert re.search(r"\[\d+\.\d% of cuBLAS fp32: \d+\.\d vs \d+\.\d TFLOP/s, \d+\.\d{3} ms\]", sp), v.text
    base = float(re.search(r"vs (\d+\.\d) TFLOP/s", sp)[1])
    assert 20 < base <= 67, f"cuBLAS fp32 at {base} TFLOP/s: TF32 on, or the GPU busy? {sp}"
    assert took < 90, f"a whole grade took {took:.0f} s (about a minute at most on an H200)"


@pytest.mark.gpu
@pytest.mark.parametrize("task", [SMEM, REG], ids=lambda t: t.id)
def test_reference_solution_passes_the_drawn_hidden_shapes(task):
    t0 = time.monotonic()
    v = grade(task.id, solution_source(task), hidden=True, seed=2026)
    assert v.passed, v.text
    assert time.monotonic() - t0 < 90


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["no_k_tail", "no_edges", "one_sided_zero", "tf32"])
def test_wrong_smem_kernels_fail(kind):
    v = grade(SMEM.id, smem_wrong(kind), speed=False)
    assert "correctness: FAIL" in v.text, v.text
    if kind == "no_k_tail":
        assert "FAIL" in line(v, "17x19x23") and line(v, "128x128x128").endswith("ok"), v.text
    if kind == "no_edges":
        assert "FAIL" in line(v, "17x19x23"), v.text
    if kind == "one_sided_zero":     # the last row of A reads the NaN past its end, times B's zeros
        assert "got nan" in line(v, "17x19x23"), v.text
    if kind == "tf32":               # every shape: the rounding is 1000 x what fp32 allows
        assert all("FAIL" in line(v, SMEM.label(s)) for s in SMEM.shapes), v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["no_k_tail", "no_edges", "tf32"])
def test_wrong_regblock_kernels_fail(kind):
    v = grade(REG.id, reg_wrong(kind), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text
    if kind == "no_k_tail":
        assert "FAIL" in line(v, "129x127x9") and line(v, "128x128x128").endswith("ok"), v.text
    if kind == "no_edges":
        assert "FAIL" in line(v, "129x127x9") and "wrote past the end" in v.text, v.text
    if kind == "tf32":
        assert all("FAIL" in line(v, REG.label(s)) for s in REG.shapes), v.text


@pytest.mark.gpu
def test_a_kernel_that_works_only_on_the_first_launch_gets_no_speed_points():
    v = grade(REG.id, reg_wrong("once"))
    assert "correctness: PASS" in v.text, v.text          # every checked launch is into a fresh output
    sp = line(v, "speed:")
    assert "not measured: timed launch 1 did not do the work" in sp and "never written" in sp, v.text
    assert v.points == 3


@pytest.mark.gpu
def test_the_starters_fail_cleanly():
    for task in (SMEM, REG):
        v = grade(task.id, student_source(task), speed=False)
        assert "never written" in v.text and v.points == 0, v.text


@pytest.mark.gpu
def test_memory_estimate_covers_the_real_peak_of_the_speed_shape():
    import types
    import cupy as cp
    from labkit.measure.compile import load_kernel
    case = REG.cases(speed=True)[-1]
    kernel = load_kernel(solution_source(REG), REG.kernel)
    ctx = types.SimpleNamespace(sms=T.sms(), gpu="", module_bytes=0, flusher=None)
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    status, detail, kept = W.run_case(REG, kernel, case, ctx)
    peak = pool.total_bytes()
    assert status == "ok", detail
    assert peak <= W.case_memory(REG, case), (peak, W.case_memory(REG, case))
    del kept

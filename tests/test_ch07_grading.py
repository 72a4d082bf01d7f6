"""Chapter 07's graded exercises (labkit/grading/ch07.py, labs/07-gemm-hopper/exercises.solution.ipynb): Hopper
only (sm_90a), tensor maps built by the grader, a GEMM timed against cuBLAS bf16.

CPU: the registry, the numeric answers (right, wrong, the student view's blanks), the release is in step and
keeps the skeleton, solutions and starters compile for sm_90a (no spills, no serialised wgmma), the grader
compiles for sm_90a whatever the source's marker says, a non-Hopper GPU gets "not graded" from the worker's
message, the speed bar in the notebook agrees with the constant, the hidden shapes hold their edge cases.
GPU (an H200; `pytest -m gpu tests/test_ch07_grading.py`): the reference solutions get full marks, on drawn
hidden shapes too; adversarial kernels fail: the starters, zeros, no un-swizzle, writes of the zero-filled
tail, a wrong transaction count or barrier parity that hangs (stopped at the time limit), a skipped last K
slice, writes past C; a submission that builds its source by calling cuBLAS from Python gets nothing.
"""
from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

from labkit.grading import ch07 as G
from labkit.grading import check_answers, grade
from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.grading import worker as W
from labkit.grading.verdict import CaseResult, RunResult, SpeedResult, score
from labkit.paths import LABS

from exercise_sources import edit as _edit, solution_source, student_source, verdict_line as line

pytestmark = pytest.mark.chapter("07")

SOLUTION = LABS / "07-gemm-hopper" / N.SOLUTION_NAME
STUDENT = LABS / "07-gemm-hopper" / N.STUDENT_NAME
TILE, GEMM = T.get("07.tma_tile"), T.get("07.wgmma_gemm")


# ------------------------------------------------------------------------------- wrong kernels (GPU)

def tile_wrong(kind: str) -> str:
    s = solution_source(TILE)
    if kind == "zeros":              # no TMA at all: writes zeros where Y belongs
        return _edit(s, "const uint4 v = *reinterpret_cast<const uint4*>(box + r * 128 + ((j ^ (r & 7)) << 4));",
                     "const uint4 v = make_uint4(0u, 0u, 0u, 0u);")
    if kind == "no_unswizzle":       # reads chunk j where the swizzle put chunk j ^ (r % 8)
        return _edit(s, "((j ^ (r & 7)) << 4)", "(j << 4)")
    if kind == "writes_tail":        # writes the zero-filled part of the edge boxes too
        return _edit(s, "if (gr < R && gc < C) {", "{")
    if kind == "double_tx":          # announces twice the box's bytes: phase 0 never completes (a hang)
        return _edit(s, "mbar_arrive_expect_tx(bar, BOX_BYTES);", "mbar_arrive_expect_tx(bar, 2 * BOX_BYTES);")
    if kind == "parity_1":           # waits for the phase before phase 0: returns at once, before the data
        return _edit(s, "mbar_wait(bar, 0);", "mbar_wait(bar, 1);")
    raise KeyError(kind)


def gemm_wrong(kind: str) -> str:
    s = solution_source(GEMM)
    if kind == "zeros":              # the loop never runs: the given epilogue stores the zeroed accumulators
        s = _edit(s, "for (int kt = 0; kt < KT; ++kt) {\n                const int s = kt % STAGES;",
                  "for (int kt = 0; kt < 0; ++kt) {\n                const int s = kt % STAGES;")
        return _edit(s, "for (int kt = 0; kt < KT; ++kt) {\n            const int s = kt % STAGES;\n            mbar_wait(full0",
                     "for (int kt = 0; kt < 0; ++kt) {\n            const int s = kt % STAGES;\n            mbar_wait(full0")
    if kind == "no_k_tail":          # whole K slices only: the last, partial one is skipped
        return _edit(s, "const int KT = (K + BK - 1) / BK;", "const int KT = K / BK;")
    if kind == "producer_parity":    # the producer waits for phase 0 of empty[s] on pass 0: nobody releases
        return _edit(s, "mbar_wait(empty0 + 8 * s, (pass & 1) ^ 1);", "mbar_wait(empty0 + 8 * s, pass & 1);")
    if kind == "past_c":             # the store without its edge checks: rows past M, columns past N
        s = _edit(s, "if (c < N) {                             // N % 8 == 0", "{  //")
        s = _edit(s, "if (r < M)     *reinterpret_cast", "*reinterpret_cast")
        return _edit(s, "if (r + 8 < M) *reinterpret_cast", "*reinterpret_cast")
    raise KeyError(kind)


TILE_WRONG = ("zeros", "no_unswizzle", "writes_tail", "double_tx", "parity_1")
GEMM_WRONG = ("zeros", "no_k_tail", "producer_parity", "past_c")


# ------------------------------------------------------------------------------------------ CPU

def test_the_registry_finds_the_three_tasks():
    tasks = T.for_chapter("07")
    assert [t.id for t in tasks] == ["07.numbers", "07.tma_tile", "07.wgmma_gemm"]
    assert isinstance(tasks[0], T.NumericTask) and len(tasks[0].questions) == 9
    assert TILE.arch == GEMM.arch == "sm_90a"
    assert TILE.rtol == 0.0 and TILE.atol == 0.0 and TILE.speed_threshold is None and TILE.max_points == 4
    assert GEMM.speed_baseline is G.cublas_baseline and GEMM.baseline_name == "cuBLAS bf16"
    assert GEMM.speed_threshold == G.WGMMA_SPEED_PCT and GEMM.max_points == 6
    assert T.norm_shape(GEMM.speed_shape) == (4096, 4096, 4096) and GEMM.floor_peaks == ("bf16_tflops",)
    for t in (TILE, GEMM):              # the contract: 16-byte rows for TMA
        for s in t.shapes + t.draw_hidden(1) + t.draw_hidden(2):
            assert s[1] % 8 == 0 and s[-1] % 8 == 0 and min(s) >= 1, (t.id, s)


def test_the_numbers_and_their_hints():
    task = T.get("07.numbers")
    right = {q.key: q.expected for q in task.questions}
    assert right == {"stage_bytes": 49152, "stages_fit": 4, "sbo_field": 64, "desc_step_k16": 2,
                     "swizzle_span_bytes": 128, "k_per_swizzle_row": 64, "tx_bytes_k_tail": 49152,
                     "wgmma_flops": 524288, "acc_regs_per_thread": 128}
    assert check_answers(task.id, right).points == 9
    wrong = {**right, "sbo_field": 1024, "tx_bytes_k_tail": 40 * 384 * 2, "stages_fit": 4.7}
    v = check_answers(task.id, wrong)
    assert v.points == 6, v.text
    assert "PTX ISA, Matrix Descriptor Format" in v.text and "zero-filled part too" in v.text
    assert "a stage is all or nothing" in v.text


def test_numeric_answers_of_the_solution_score_full_marks_and_the_students_none():
    task = T.get("07.numbers")
    sol = N.extract_answers(N.read_notebook(SOLUTION), task.id, task.answers_var)
    v = check_answers(task.id, sol)
    assert v.passed and v.points == 9, v.text
    stu = N.extract_answers(N.read_notebook(STUDENT), task.id, task.answers_var)
    assert set(stu) == {q.key for q in task.questions} and check_answers(task.id, stu).points == 0


def test_the_student_view_is_in_step_and_keeps_the_skeleton():
    assert STUDENT.read_text(encoding="utf-8") == N.release_text(SOLUTION), "run `python -m labkit release 07`"
    text = STUDENT.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "hidden=True" not in text and "HIDDEN TESTS" not in text
    tile = student_source(TILE)
    assert tile.count("// TODO:") == 2 and "tma_load_2d(sbox" not in tile and "uint4" not in tile
    assert "__device__ __forceinline__ void tma_load_2d(" in tile and "// requires: sm_90a" in tile
    gemm = student_source(GEMM)
    assert gemm.count("// TODO:") == 2 and "wgmma_m64n256k16(acc" not in gemm and "mbar_wait(" in gemm
    for given in ("__device__ __forceinline__ void wgmma_m64n256k16(", "store_tile(acc, C, M, N, m0 + 64 * c, n0, t);",
                  "mbar_init(empty0 + 8 * s, 2);", "const int KT = (K + BK - 1) / BK;", "// requires: sm_90a"):
        assert given in gemm, given
    assert "#include" not in gemm and "#include" not in tile          # self-contained cells


def _compiles(src, kernel):
    from labkit.measure.compile import compile_check
    rep = compile_check(src, "sm_90a")        # raises on ptxas' "wgmma ... serialized" line
    return rep.functions[kernel]


def test_solutions_and_starters_compile_for_sm_90a_without_spills():
    f = _compiles(solution_source(GEMM), GEMM.kernel)
    assert f.spills == 0 and f.registers <= 168, f          # 65536 / 384 threads, rounded to 8
    f = _compiles(solution_source(TILE), TILE.kernel)
    assert f.spills == 0 and f.shared_bytes >= 8192
    for task in (TILE, GEMM):
        assert _compiles(student_source(task), task.kernel).spills == 0


def test_the_wrong_kernels_of_the_gpu_tests_compile():
    """So that the GPU tests fail a kernel for what it does, not for a typo in its edit."""
    for kind in TILE_WRONG:
        _compiles(tile_wrong(kind), TILE.kernel)
    for kind in GEMM_WRONG:
        assert _compiles(gemm_wrong(kind), GEMM.kernel).spills == 0


def test_the_grader_compiles_for_sm_90a_without_the_marker():
    from labkit.grading import compile_error_without_gpu
    src = solution_source(GEMM)
    bare = src.replace("// requires: sm_90a", "// (no marker)")
    assert W.compile_options(GEMM, src) == ()                       # the marker already asks for it
    assert W.compile_options(GEMM, bare) == ("-arch=sm_90a",)
    assert W.compile_options(T.get("05.regblock_sgemm"), bare) == ()  # other chapters: as before
    assert compile_error_without_gpu(GEMM, bare) is None
    assert compile_error_without_gpu(TILE, solution_source(TILE)) is None
    err = compile_error_without_gpu(GEMM, src.replace("extern \"C\" __global__", "__global__"))
    assert err and "no kernel named 'gemm_wgmma'" in err


def test_a_gpu_other_than_hopper_is_not_graded():
    assert GEMM.runs_on("9.0") is None and TILE.runs_on("9.0") is None
    for cc in ("8.0", "8.9", "10.0", "12.0"):
        why = GEMM.runs_on(cc)
        assert "compute capability exactly 9.0 (Hopper: H100, H200, GH200)" in why and f"this GPU is {cc}" in why
    assert T.get("05.regblock_sgemm").runs_on("7.5") is None


def worker_on_an_a100(conn, req):
    """What the worker sends for a sm_90a task on a GPU of compute capability 8.0 (without running it)."""
    from labkit.grading import messages as M
    from labkit.grading import tasks as TT
    conn.send(M.Stage("startup", None, 5.0))
    conn.send(M.Unsupported(TT.get(req["task"]).runs_on("8.0") + "; grade it on such a GPU"))


def test_the_verdict_on_a_non_hopper_gpu_is_clear():
    from labkit.grading.supervisor import run_task
    cases = GEMM.cases(speed=True)
    run = run_task(GEMM, "src", cases, speed=True, target=worker_on_an_a100)
    v = score(GEMM, run, speed_requested=True)
    assert v.points == 0 and "CRASH" not in v.text and "grader error" not in v.text, v.text
    assert re.search(r"^not graded: this exercise compiles for sm_90a and needs a GPU of compute capability exactly "
                     r"9\.0 \(Hopper: H100, H200, GH200\); this GPU is 8\.0; grade it on such a GPU$", v.text, re.M), v.text
    assert v.text.splitlines()[-1] == "points: 0/5"          # public 3 + speed 2


def test_the_notebook_states_the_speed_bar_and_the_launches():
    md = "".join(c["source"] for c in N.read_notebook(SOLUTION)["cells"] if c["cell_type"] == "markdown")
    assert f"at least **{G.WGMMA_SPEED_PCT:.0f}% of cuBLAS bf16**" in md, "update the notebook with the bar"
    assert TILE.launch_text in md and GEMM.launch_text in md
    assert TILE.signature in md and GEMM.signature in md
    assert f"dynamic shared memory {G.GEMM_SMEM} bytes" in md
    gemm = solution_source(GEMM)        # the notebook's constants are the grader's
    for name, value in (("BM", G.GEMM_BM), ("BN", G.GEMM_BN), ("BK", G.GEMM_BK), ("STAGES", G.GEMM_STAGES),
                        ("THREADS", G.GEMM_THREADS)):
        assert re.search(rf"^#define {name} {value}\b", gemm, re.M), name
    assert G.GEMM_SMEM == 1024 + 4 * 49152 + 64 and G.GEMM_SMEM <= G.H200_SMEM_PER_BLOCK


def test_the_launch_geometry():
    calls = []

    class K:
        max_dynamic_shared_size_bytes = 0

        def __call__(self, *a, **kw):
            calls.append((a, kw))
    import labkit.grading.ch07 as mod
    real = mod._maps
    mod._maps = lambda ctx, *specs: ["map"] * len(specs)
    try:
        k = K()
        GEMM.launch(k, {"A": "a", "B_t": "b"}, "c", GEMM.cases([(333, 264, 200)])[0], None)
        (grid, block, args), kw = calls[-1]
        assert grid == (2, 3) and block == (384,) and kw == {"shared_mem": G.GEMM_SMEM}
        assert k.max_dynamic_shared_size_bytes == G.GEMM_SMEM
        assert args[:3] == ("map", "map", "c") and [int(v) for v in args[3:]] == [333, 264, 200]
        TILE.launch(k, {"X": "x"}, "y", TILE.cases([(65, 72)])[0], None)
        (grid, block, args), kw = calls[-1]
        assert grid == (2, 2) and block == (128,) and kw == {}
        assert args[:2] == ("map", "y") and [int(v) for v in args[2:]] == [65, 72]
    finally:
        mod._maps = real


def test_hidden_shapes_hold_the_edge_cases_and_stay_cheap_on_the_host():
    for seed in (1, 2, 3):
        g = GEMM.draw_hidden(seed)
        assert (1, 8, 8) in g and (64, 72, 8200) in g and (128, 256, 128) in g     # one row, deep K, < STAGES
        assert any(m % 128 and n % 256 and k % 64 for m, n, k in g)
        for s in g:
            assert s[0] * s[1] * s[2] <= 5e8 and GEMM.elements(s) <= W.HOST_LIMIT, s
        t = TILE.draw_hidden(seed)
        assert (1, 8) in t and (1000, 8) in t and any(r % 64 and c % 64 for r, c in t)
    assert GEMM.draw_hidden(1) != GEMM.draw_hidden(2) and TILE.draw_hidden(1) != TILE.draw_hidden(2)


def test_the_tolerance_tells_a_correct_product_from_a_missing_slice():
    """With numpy standing in for the GPU: an fp32 accumulation rounded once to bf16 stays inside the
    tolerance; the same without the last K slice (K % 64 columns, or 64) does not."""
    from labkit.chapters.ch06 import tolerance
    from labkit.measure import bf16
    rng = np.random.default_rng(7)
    for M, N_, K in [(1, 8, 8), (33, 264, 200), (64, 72, 1032)]:
        a = bf16.from_bits(bf16.to_bits(rng.standard_normal((M, K)).astype(np.float32))).astype(np.float32)
        b = bf16.from_bits(bf16.to_bits(rng.standard_normal((N_, K)).astype(np.float32))).astype(np.float32)
        case = GEMM.cases([(M, N_, K)])[0]
        ref, atol = W.expected(GEMM, {"A": (bf16.to_bits(a), "bf16"), "B_t": (bf16.to_bits(b), "bf16")}, case)
        rtol, want = tolerance(K, a.astype(np.float64), b.astype(np.float64))
        assert atol == pytest.approx(want, rel=1e-9) and GEMM.rtol == rtol

        def ok(got):
            return bool(np.all(np.abs(got - ref) <= atol + GEMM.rtol * np.abs(ref)))
        full = bf16.from_bits(bf16.to_bits((a @ b.T).astype(np.float32))).astype(np.float64)
        assert ok(full), (M, N_, K)
        cut = (K - 1) // 64 * 64
        short = bf16.from_bits(bf16.to_bits((a[:, :cut] @ b[:, :cut].T).astype(np.float32))).astype(np.float64)
        assert not ok(short), (M, N_, K)


def test_the_speed_line_reads_tflops_against_cublas_bf16():
    cases = GEMM.cases(speed=True)
    res = RunResult(GEMM.id, [CaseResult(c.label, c.hidden, c.role, "ok") for c in cases])
    flops = 2 * 4096 ** 3
    res.speed = SpeedResult("measured", cases[-1].label, kernel_ms=flops / 600e12 * 1e3,
                            copy_ms=flops / 750e12 * 1e3, bytes=GEMM.bytes_moved(cases[-1].shape))
    v = score(GEMM, res, speed_requested=True)
    line = next(ln for ln in v.text.splitlines() if ln.startswith("speed:"))
    assert line == (f"speed: PASS [80.0% of cuBLAS bf16: 600.0 vs 750.0 TFLOP/s, 0.229 ms], needs "
                    f"{G.WGMMA_SPEED_PCT:.0f}% of cuBLAS bf16   2/2"), line
    ms, why = W.physical_floor(GEMM, (4096, 4096, 4096), "NVIDIA H200")
    assert ms > 0 and "TFLOP/s" in why


def test_the_speed_case_fits_an_h200_comfortably():
    case = GEMM.cases(speed=True)[-1]
    assert case.role == "speed" and W.case_memory(GEMM, case, speed=True) < 8e9


def test_the_student_tree_strips_the_hidden_generators():
    from labkit.grading.release import strip_hidden_generators
    text = strip_hidden_generators(open(G.__file__, encoding="utf-8").read())
    assert "(64, 72, 8200)" not in text and "(1000, 8)" not in text
    assert text.count("return []   # hidden shapes") == 2


# ------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("task", [TILE, GEMM], ids=lambda t: t.id)
def test_reference_solution_gets_full_marks(task):
    t0 = time.monotonic()
    v = grade(task.id, solution_source(task))
    took = time.monotonic() - t0
    assert v.passed, v.text
    assert "FAIL" not in v.text and "CRASH" not in v.text and "not graded" not in v.text, v.text
    if task is GEMM:
        sp = line(v, "speed:")
        assert re.search(r"\[\d+\.\d% of cuBLAS bf16: \d+\.\d vs \d+\.\d TFLOP/s, \d+\.\d{3} ms\]", sp), v.text
        base = float(re.search(r"vs (\d+\.\d) TFLOP/s", sp)[1])
        assert 400 < base <= 990, f"cuBLAS bf16 at {base} TFLOP/s: the GPU busy? {sp}"
        print(sp)                       # the lead sets WGMMA_SPEED_PCT from this figure
    assert took < 120, f"a whole grade took {took:.0f} s"


@pytest.mark.gpu
@pytest.mark.parametrize("task", [TILE, GEMM], ids=lambda t: t.id)
def test_reference_solution_passes_the_drawn_hidden_shapes(task):
    for seed in (2026, 7):
        v = grade(task.id, solution_source(task), hidden=True, seed=seed)
        assert v.passed, v.text


@pytest.mark.gpu
def test_the_starters_fail_cleanly():
    v = grade(TILE.id, student_source(TILE), speed=False)
    assert "never written" in v.text and v.points == 0, v.text
    v = grade(GEMM.id, student_source(GEMM), speed=False)        # the given epilogue stores zeros
    assert "correctness: FAIL" in v.text and "got 0" in v.text and v.points == 0, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", TILE_WRONG)
def test_wrong_tma_tile_kernels_fail(kind):
    t0 = time.monotonic()
    v = grade(TILE.id, tile_wrong(kind), speed=False)
    assert not v.passed and v.points == 0, v.text
    if kind in ("zeros", "no_unswizzle"):
        assert "FAIL" in line(v, "64x64") and "got 0" in v.text if kind == "zeros" else "FAIL" in line(v, "64x64"), v.text
    if kind == "no_unswizzle":                   # rows 0, 8, 16, ... are not permuted: only some elements off
        assert line(v, "1x8").endswith("ok"), v.text
    if kind == "writes_tail":
        assert line(v, "64x64").endswith("ok") and "wrote past the end" in line(v, "65x72"), v.text
    if kind == "double_tx":                      # phase 0 never completes: the worker is stopped
        assert "TIME LIMIT: no result within" in line(v, "1x8"), v.text
        assert "the worker running the kernel was stopped at the time limit" in v.text
        assert time.monotonic() - t0 < 120
    if kind == "parity_1":                       # the wait returns before the data lands
        assert "correctness: FAIL" in v.text, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", GEMM_WRONG)
def test_wrong_gemm_kernels_fail(kind):
    t0 = time.monotonic()
    v = grade(GEMM.id, gemm_wrong(kind), speed=False)
    assert not v.passed and v.points == 0, v.text
    if kind == "zeros":
        assert all("FAIL" in line(v, GEMM.label(s)) for s in GEMM.shapes), v.text
    if kind == "no_k_tail":                      # K % 64 != 0 fails, whole slices pass
        assert "FAIL" in line(v, "333x264x200") and "FAIL" in line(v, "1000x1000x1008"), v.text
        assert line(v, "128x256x64").endswith("ok") and line(v, "64x72x4096").endswith("ok"), v.text
    if kind == "producer_parity":                # a deadlock: stopped at the time limit, named
        assert "TIME LIMIT: no result within" in line(v, "1x8x8"), v.text
        assert "the worker running the kernel was stopped at the time limit" in v.text
        assert time.monotonic() - t0 < 120
        assert grade(GEMM.id, solution_source(GEMM), speed=False).passed      # the next grade works
    if kind == "past_c":
        assert "wrote past the end" in line(v, "1x8x8"), v.text


@pytest.mark.gpu
def test_a_submission_that_calls_cublas_from_python_gets_nothing(tmp_path):
    """The batch grader reads the source statically and never runs the notebook: a source built by Python (here
    after computing the product with torch) is not a string literal, so the exercise scores 0 and says why;
    the same notebook's literal tma_tile source is graded as usual."""
    from labkit.grading.batch import grade_batch
    subs = tmp_path / "subs"
    nb = json.loads(STUDENT.read_text())
    cheat = ("import torch\n"
             "A = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16)\n"
             "C = A @ A.T          # cuBLAS\n"
             "import labkit.grading as g\n"
             "g.grade = lambda *a, **k: 'points: 6/6'\n"
             "gemm_wgmma_src = open('my_kernel.cu').read() if C is None else ''.join(['extern \"C\" __global__ void gemm_wgmma() {}'])\n")
    good = "tma_tile_src = r'''" + solution_source(TILE) + "'''\n"
    for i, src in enumerate((cheat, good)):
        nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"sub-{i}", "metadata": {},
                            "outputs": [], "source": src})
    (subs / "cheat").mkdir(parents=True)
    (subs / "cheat" / "exercises.ipynb").write_text(json.dumps(nb))
    rows = grade_batch(subs, tmp_path / "g.csv", seed=7, timeout=600, progress=False)
    by = {r.exercise: r for r in rows}
    assert by["07.wgmma_gemm"].points == 0 and "not a string literal" in " ".join(by["07.wgmma_gemm"].lost)
    assert by["07.tma_tile"].points == by["07.tma_tile"].max_points

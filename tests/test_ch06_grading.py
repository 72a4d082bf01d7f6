"""Chapter 06's graded exercises (labkit/grading/ch06.py, labs/06-gemm-tensor-cores/exercises.solution.ipynb).

CPU: the registry, the fragment formulas (against the PTX ISA table and labkit.chapters.ch06's fragment
tables), the numeric answers through the static extractor, the solutions (sm_80, sm_90, no spills, 48 KB of
shared memory) and starters compile, the release is in step and strips the solutions, the tolerances tell a
correct fp32 accumulation from a bf16 one or a missing k-step, the notebook states the speed bar.
GPU (the H200 runner): the reference solutions get full marks, on drawn hidden shapes too; adversarial
submissions fail: one that does nothing, writes zeros, skips the last k16 step, rounds to bf16 early, never
finishes, writes past C, or hands the work to cuBLAS.
"""
from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

from labkit.grading import ch06 as G
from labkit.grading import check_answers, grade
from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.grading import worker as W
from labkit.grading.verdict import CaseResult, RunResult, SpeedResult, score
from labkit.paths import LABS

from exercise_sources import edit as _edit, solution_source, student_source, verdict_line as line

pytestmark = pytest.mark.chapter("06")

LAB = LABS / "06-gemm-tensor-cores"
SOLUTION = LAB / N.SOLUTION_NAME
STUDENT = LAB / N.STUDENT_NAME
FRAG, TILE, GEMM = T.get("06.fragments"), T.get("06.mma_tile"), T.get("06.mma_gemm")


# ------------------------------------------------------------------------------------- the layouts

def test_the_registry_finds_the_three_tasks():
    tasks = T.for_chapter("06")
    assert [t.id for t in tasks] == ["06.fragments", "06.mma_tile", "06.mma_gemm"]
    assert isinstance(FRAG, T.NumericTask) and len(FRAG.questions) == 11
    assert TILE.speed_shape is None and TILE.max_points == 4 and TILE.out_dtype == "float32"
    assert GEMM.out_dtype == "bfloat16" and GEMM.speed_threshold == G.MMA_GEMM_SPEED_PCT and GEMM.max_points == 6
    assert GEMM.speed_baseline is G.cublas_baseline and GEMM.baseline_name == "cuBLAS bf16"
    assert T.norm_shape(GEMM.speed_shape) == G.SPEED_SHAPE == (4096, 4096, 4096)
    for t in (TILE, GEMM):
        assert t.floor_peaks == ("bf16_tflops",) and callable(t.atol)


def test_the_fragment_formulas_are_the_ptx_table():
    """Written out from the PTX ISA's description, element by element (a_place and friends are the inverse
    direction: (row, col) -> (lane, element))."""
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        a = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
             (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
        b = [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]
        c = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
        for e, (r, col) in enumerate(a):
            assert G.a_place(r, col) == (lane, e)
        for e, (k, n) in enumerate(b):
            assert G.b_place(k, n) == (lane, e)
        for e, (r, n) in enumerate(c):
            assert G.c_place(r, n) == (lane, e)
    # every element of each tile has exactly one home
    for place, rows, cols, per in ((G.a_place, 16, 16, 8), (G.b_place, 16, 8, 4), (G.c_place, 16, 8, 4)):
        homes = {place(r, c) for r in range(rows) for c in range(cols)}
        assert homes == {(lane, e) for lane in range(32) for e in range(per)}


def test_the_fragment_formulas_agree_with_the_chapter():
    """labkit.chapters.ch06's fragment_a/b/c(lane): the (row, col) of each of the lane's elements, in element
    order; the questions' expected answers come from this module's own formulas, which must agree."""
    from labkit.chapters import ch06
    for fn, place, rows, cols, per in ((ch06.fragment_a, G.a_place, 16, 16, 8),
                                       (ch06.fragment_b, G.b_place, 16, 8, 4),
                                       (ch06.fragment_c, G.c_place, 16, 8, 4)):
        table = G.fragment_table(place, rows, cols, per)
        for lane in range(32):
            assert [tuple(rc) for rc in fn(lane)] == table[lane], (fn.__name__, lane)


def test_the_expected_answers():
    want = {"a_lane": 6, "a_element": 7, "b_lane": 21, "b_element": 3, "c_lane": 19, "c_element": 3,
            "fragment_registers": 10, "mma_flops": 4096, "ldmatrix_x4_bytes": 512, "smem_stage_bytes": 24576,
            "mma_per_k16_64x64": 32}
    assert {q.key: q.expected for q in FRAG.questions} == want
    assert all(q.rtol == 0 for q in FRAG.questions)          # integers: exact answers only


def test_numeric_answers_of_the_solution_score_full_marks_and_the_students_none():
    sol = N.extract_answers(N.read_notebook(SOLUTION), FRAG.id, FRAG.answers_var)
    v = check_answers(FRAG.id, sol)
    assert v.passed and v.points == 11, v.text
    stu = N.extract_answers(N.read_notebook(STUDENT), FRAG.id, FRAG.answers_var)
    assert set(stu) == {q.key for q in FRAG.questions} and check_answers(FRAG.id, stu).points == 0


def test_wrong_answers_are_rejected_with_a_hint():
    right = {q.key: q.expected for q in FRAG.questions}
    # the usual slips: lane = 4t + g, element of the left half, the k-row of B taken as its lane, fp32 C as
    # bf16 pairs, a FLOP per multiply-add, one 8x8 matrix, fp32 bytes, one mma per 16 x 16
    wrong = {"a_lane": 4 * 2 + 1, "a_element": 3, "b_lane": 4 * 1 + 5, "fragment_registers": 4 + 2 + 2,
             "mma_flops": 16 * 8 * 16, "ldmatrix_x4_bytes": 128, "smem_stage_bytes": (128 * 32 + 32 * 256) * 4,
             "mma_per_k16_64x64": 16}
    v = check_answers(FRAG.id, {**right, **wrong})
    assert v.points == len(right) - len(wrong), v.text
    assert "too low by a factor of 2" in v.text and "2 bytes per bf16" in v.text
    assert "lane = 4 groupID + threadID_in_group" in v.text
    assert check_answers(FRAG.id, {**right, "c_lane": 19.5}).points == 10      # no tolerance on a lane


# --------------------------------------------------------------------------- sources and the release

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_solutions_compile_without_spills_and_starters_compile(arch):
    from labkit.measure.compile import compile_check
    for task in (TILE, GEMM):
        f = compile_check(solution_source(task), arch).functions[task.kernel]
        assert f.spills == 0, (task.id, f)
        assert task.kernel in compile_check(student_source(task), arch).functions
    f = compile_check(solution_source(GEMM), arch).functions[GEMM.kernel]
    assert f.registers <= 128 and f.shared_bytes <= 48 * 1024, f       # 2 blocks / SM, static shared memory


def test_the_solutions_use_the_instructions_and_no_course_header():
    tile, gemm = solution_source(TILE), solution_source(GEMM)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in tile and "ldmatrix" not in tile
    for instr in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared",
                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared", "cp.async.cg.shared.global",
                  "cp.async.wait_group", "#define STAGES 3"):
        assert instr in gemm, instr
    assert re.findall(r"#include\s*[<\"]([^>\"]+)", tile + gemm) == ["cuda_bf16.h"]   # self-contained


def test_the_student_view_is_in_step_and_keeps_the_skeleton():
    assert STUDENT.read_text(encoding="utf-8") == N.release_text(SOLUTION), "run `python -m labkit release 06`"
    tile, gemm = student_source(TILE), student_source(GEMM)
    assert tile.count("// TODO:") == 2 and "asm" not in tile and "pair_of_a(const" in tile
    assert gemm.count("// TODO:") == 2 and "cp_async16(sa" not in gemm and "ldmatrix_x4(af" not in gemm
    # given: the wrappers, the swizzle, the accumulators, the epilogue
    for given in ("void cp_async16(", "void ldmatrix_x4_trans(", "void mma_bf16(", "a_offset(int r, int c)",
                  "float acc[MI][NI][4];", "__floats2bfloat162_rn"):
        assert given in gemm, given
    text = STUDENT.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "hidden=True" not in text and '"outputs": []' in text
    nb = N.read_notebook(STUDENT)
    assert nb["metadata"]["labkit"]["exercises"] == "06" and nb["metadata"]["labkit"]["view"] == "student"


def test_the_solution_notebook_has_chapter_05s_structure():
    nb = N.read_notebook(SOLUTION)
    cells = nb["cells"]
    kinds = [c["cell_type"] for c in cells]
    assert kinds == ["markdown", "code", "code", "markdown", "code", "markdown", "code", "code", "code",
                     "markdown", "code", "code", "code"]
    ch05 = N.read_notebook(LABS / "05-gemm-simt" / N.SOLUTION_NAME)
    assert cells[1]["source"] == ch05["cells"][1]["source"]                      # the same setup cell
    assert N.graded_tasks(nb) == ["06.fragments", "06.mma_tile", "06.mma_gemm"]
    hidden = N.hidden_shapes(nb)
    assert set(hidden) == {"06.mma_tile", "06.mma_gemm"}
    for task_id, shapes in hidden.items():
        assert all(s in T.get(task_id).draw_hidden(0) or s in T.get(task_id).draw_hidden(1) for s in shapes)


def test_the_notebook_states_the_speed_bar_and_the_contracts():
    md = "".join(c["source"] for c in N.read_notebook(SOLUTION)["cells"] if c["cell_type"] == "markdown")
    assert f"at least **{G.MMA_GEMM_SPEED_PCT:.0f}% of cuBLAS bf16**" in md, "update the notebook with the bar"
    assert TILE.launch_text in md and GEMM.launch_text in md
    assert TILE.signature in md and GEMM.signature in md
    assert "$M \\% 128 = 0$, $N \\% 128 = 0$,\n$K \\% 32 = 0$" in md
    assert "warp-level-matrix-fragment-mma-16816-float" in md                   # the PTX ISA section cited


def test_launch_geometry():
    calls = []
    for task, shape, grid, block in ((TILE, (48, 40, 32), (5, 3), (32,)), (GEMM, (256, 384, 64), (3, 2), (256,))):
        calls.clear()
        task.launch(lambda *a: calls.append(a), {"A": "a", "B": "b"}, "c", task.cases([shape])[0], None)
        (g, b, args), = calls
        assert g == grid and b == block and args[:3] == ("a", "b", "c") and [int(v) for v in args[3:]] == list(shape)


def test_every_shape_keeps_the_contract_and_stays_cheap_on_the_host():
    for task, (tm, tn, tk) in ((TILE, (16, 8, 16)), (GEMM, (128, 128, 32))):
        for seed in (0, 1, 2, 3, 2026):
            shapes = task.draw_hidden(seed)
            for s in shapes + [T.norm_shape(x) for x in task.shapes]:
                assert s[0] % tm == 0 and s[1] % tn == 0 and s[2] % tk == 0 and min(s) > 0, (task.id, s)
                assert task.elements(s) <= W.HOST_LIMIT and s[0] * s[1] * s[2] <= 5e8, (task.id, s)
        assert task.draw_hidden(1) != task.draw_hidden(2)
    assert {(16, 8, 16), (32, 64, 48), (128, 72, 256)} <= set(TILE.draw_hidden(5))
    assert any(k == 1024 for *_, k in TILE.draw_hidden(5))
    assert (128, 128, 32) in GEMM.draw_hidden(5) and any(k >= 2048 for *_, k in GEMM.draw_hidden(5))
    s = GEMM.speed_shape
    assert s[0] % 128 == 0 and s[1] % 128 == 0 and s[2] % 32 == 0


def test_the_student_tree_strips_the_hidden_generators():
    from labkit.grading.release import strip_hidden_generators
    text = strip_hidden_generators(open(G.__file__, encoding="utf-8").read())
    assert "(1024, 128, 2048)" not in text and "(128, 72, 256)" not in text
    assert text.count("return []   # hidden shapes") == 2


# ------------------------------------------------------------------------------------- tolerances

def _bf16(rng, shape):
    from labkit.measure import bf16
    return bf16.round_trip(rng.standard_normal(shape).astype(np.float32))


def _to_bf16(x):
    from labkit.measure import bf16
    return bf16.round_trip(np.asarray(x, dtype=np.float32))


def _fp32_mma_accumulate(a, b, round_each_step=None):
    """What a tensor-core kernel does, modelled in numpy: exact bf16 products summed in fp32, one k16 step at a
    time (within a step in float64, then rounded to fp32: at least as exact as the hardware)."""
    M, K = a.shape
    acc = np.zeros((M, b.shape[1]), dtype=np.float32)
    for k0 in range(0, K, 16):
        step = a[:, k0:k0 + 16].astype(np.float64) @ b[k0:k0 + 16].astype(np.float64)
        acc = (acc.astype(np.float64) + step).astype(np.float32)
        if round_each_step is not None:
            acc = round_each_step(acc)
    return acc


def _within(task, got, a, b, shape):
    case = task.cases([shape])[0]
    ref, atol = W.expected(task, {"A": (_bits(a), "bf16"), "B": (_bits(b), "bf16")}, case)
    return bool(np.all(np.abs(got.astype(np.float64) - ref) <= atol + task.rtol * np.abs(ref)))


def _bits(x):
    from labkit.measure import bf16
    return bf16.to_bits(x)


@pytest.mark.parametrize("shape", [(16, 8, 16), (64, 24, 80), (96, 128, 512), (32, 8, 1024)])
def test_the_tile_tolerance_passes_fp32_accumulation_and_fails_bf16_or_a_missing_step(shape):
    M, N_, K = shape
    rng = np.random.default_rng(6)
    a, b = _bf16(rng, (M, K)), _bf16(rng, (K, N_))
    assert _within(TILE, _fp32_mma_accumulate(a, b), a, b, shape)
    assert not _within(TILE, _to_bf16(_fp32_mma_accumulate(a, b)), a, b, shape)     # C stored as bf16
    if K > 16:
        assert not _within(TILE, _fp32_mma_accumulate(a[:, :-16], b[:-16]), a, b, shape)   # last k16 step


@pytest.mark.parametrize("shape", [(128, 128, 32), (128, 128, 160), (128, 128, 1024), (128, 128, 2048)])
def test_the_gemm_tolerance_passes_one_rounding_and_fails_early_rounding_or_a_missing_step(shape):
    M, N_, K = shape
    rng = np.random.default_rng(7)
    a, b = _bf16(rng, (M, K)), _bf16(rng, (K, N_))
    assert _within(GEMM, _to_bf16(_fp32_mma_accumulate(a, b)), a, b, shape)
    assert not _within(GEMM, _to_bf16(_fp32_mma_accumulate(a[:, :-16], b[:-16])), a, b, shape)
    if K >= 64:     # accumulators rounded to bf16 after every k16 step
        assert not _within(GEMM, _fp32_mma_accumulate(a, b, round_each_step=_to_bf16), a, b, shape)


def test_physical_floor_is_the_bf16_peak_and_the_speed_case_fits():
    ms, why = W.physical_floor(GEMM, G.SPEED_SHAPE, "NVIDIA H200")
    assert "TFLOP/s" in why and ms == pytest.approx(2 * 4096 ** 3 / (float(why.split(" at ")[1].split()[0]) * 1e12) * 1e3)
    case = GEMM.cases(speed=True)[-1]
    assert case.role == "speed" and W.case_memory(GEMM, case, speed=True) < 8e9


def test_the_verdict_against_cublas_bf16():
    cases = GEMM.cases(speed=True)
    flops = 2 * 4096 ** 3
    base_ms = flops / 760e12 * 1e3
    res = RunResult(GEMM.id, [CaseResult(c.label, c.hidden, c.role, "ok") for c in cases])
    res.speed = SpeedResult("measured", cases[-1].label, kernel_ms=base_ms * 100 / 45,
                            copy_ms=base_ms, bytes=GEMM.bytes_moved(cases[-1].shape))
    v = score(GEMM, res, speed_requested=True)
    line_ = next(ln for ln in v.text.splitlines() if ln.startswith("speed:"))
    assert "[45.0% of cuBLAS bf16: 342.0 vs 760.0 TFLOP/s," in line_ and f"needs {G.MMA_GEMM_SPEED_PCT:.0f}%" in line_


# ----------------------------------------------------------------------------- adversarial sources

SPIN = "    while (((volatile float*)C)[0] != 12345.0f) { }   // C starts as poison: never true\n"


def tile_wrong(kind: str) -> str:
    s = solution_source(TILE)
    if kind == "nothing":
        return re.sub(r"// ### BEGIN SOLUTION.*?// ### END SOLUTION", "", s, flags=re.S)
    if kind == "zeros":
        return _edit(s, "make_float2(c[0], c[1]);", "make_float2(0.0f, 0.0f);").replace(
            "make_float2(c[2], c[3]);", "make_float2(0.0f, 0.0f);")
    if kind == "skip_last_step":
        return _edit(s, "for (int k0 = 0; k0 < K; k0 += 16)", "for (int k0 = 0; k0 + 16 < K; k0 += 16)")
    if kind == "bf16_c":             # C rounded to bf16 before the fp32 store
        s = _edit(s, 'extern "C"', "__device__ __forceinline__ float bf(float x) { return __uint_as_float("
                  "(__float_as_uint(x) + 0x7FFFu + ((__float_as_uint(x) >> 16) & 1u)) & 0xFFFF0000u); }\n"
                  'extern "C"')
        return _edit(s, "make_float2(c[0], c[1]);", "make_float2(bf(c[0]), bf(c[1]));")
    if kind == "hang":
        return _edit(s, "    float c[4] = {0.0f", SPIN + "    float c[4] = {0.0f")
    if kind == "past_c":             # one stray store 64 elements past the end of C
        return _edit(s, "    // ### END SOLUTION\n}", "    if (blockIdx.x == 0 && blockIdx.y == 0 && lane == 0) "
                     "C[(long long)M * N + 64] = 1.0f;\n    // ### END SOLUTION\n}")
    raise KeyError(kind)


def gemm_wrong(kind: str) -> str:
    s = solution_source(GEMM)
    if kind == "nothing":
        return _edit(s, "    // the epilogue (given)", "    return;\n    // the epilogue (given)")
    if kind == "zeros":
        return _edit(s, "    cp_async_wait<0>();\n    // ### END SOLUTION",
                     "    cp_async_wait<0>();\n    for (int mi = 0; mi < MI; ++mi) for (int ni = 0; ni < NI; ++ni) "
                     "for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;\n    // ### END SOLUTION")
    if kind == "skip_last_step":     # fp32 from bf16, but the last k16 step of the last k-tile is left out
        return _edit(s, "for (int kk = 0; kk < BK / 16; ++kk) {",
                     "for (int kk = 0; kk < (kt == ktiles - 1 ? BK / 16 - 1 : BK / 16); ++kk) {")
    if kind == "bf16_early":         # the accumulators rounded to bf16 after every k-tile
        return _edit(s,
            "                    mma_bf16(acc[mi][ni], af[mi], bfr[ni / 2][(ni & 1) * 2], bfr[ni / 2][(ni & 1) * 2 + 1]);\n"
            "        }\n",
            "                    mma_bf16(acc[mi][ni], af[mi], bfr[ni / 2][(ni & 1) * 2], bfr[ni / 2][(ni & 1) * 2 + 1]);\n"
            "        }\n"
            "        for (int mi = 0; mi < MI; ++mi) for (int ni = 0; ni < NI; ++ni) for (int q = 0; q < 4; ++q)\n"
            "            acc[mi][ni][q] = __bfloat162float(__float2bfloat16_rn(acc[mi][ni][q]));\n")
    if kind == "hang":
        return _edit(s, "    float acc[MI][NI][4];\n", SPIN + "    float acc[MI][NI][4];\n")
    if kind == "past_c":
        return _edit(s, "    // the epilogue (given)", "    if (blockIdx.x == 0 && blockIdx.y == 0 && tid == 0) "
                     "C[(long long)M * N + 64] = __float2bfloat16(1.0f);\n    // the epilogue (given)")
    if kind == "cublas":             # "call cuBLAS": there is no device-side cuBLAS to link against
        return "#include <cublas_v2.h>\n" + s
    raise KeyError(kind)


TILE_KINDS = ["nothing", "zeros", "skip_last_step", "bf16_c", "hang", "past_c"]
GEMM_KINDS = ["nothing", "zeros", "skip_last_step", "bf16_early", "hang", "past_c"]


def test_the_wrong_kernels_of_the_gpu_tests_compile():
    """So that the GPU tests below fail a kernel for what it computes, not for a typo in its edit."""
    from labkit.measure.compile import compile_check
    for kind in TILE_KINDS:
        assert TILE.kernel in compile_check(tile_wrong(kind), "sm_90").functions, kind
    for kind in GEMM_KINDS:
        src = gemm_wrong(kind)
        assert src != solution_source(GEMM), kind
        assert compile_check(src, "sm_90").functions[GEMM.kernel].spills == 0, kind
    assert "__float2bfloat16_rn(acc" in gemm_wrong("bf16_early")


def test_cublas_from_the_kernel_or_python_is_refused_without_a_gpu():
    """The grader reads the source as a string literal and compiles it: a header outside the course and CUDA's
    include folders is refused, and a source computed by Python (torch, cuBLAS, a file) is never run."""
    from labkit.grading import compile_error_without_gpu
    from labkit.grading.extract import Missing
    err = compile_error_without_gpu(GEMM, gemm_wrong("cublas"))
    assert err and ("cublas_v2.h" in err or "cannot open source file" in err), err
    nb = json.loads(STUDENT.read_text())
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "cheat", "metadata": {}, "outputs": [],
                        "source": "import torch\ngemm_mma_src = torch.__file__\n"})
    with pytest.raises(Missing, match="not a string literal"):
        N.extract_source(nb, GEMM.source_var)


# ------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_reference_tile_solution_gets_full_marks():
    v = grade(TILE.id, solution_source(TILE))
    assert v.passed and "FAIL" not in v.text, v.text
    v = grade(TILE.id, solution_source(TILE), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.gpu
def test_reference_gemm_solution_gets_full_marks():
    t0 = time.monotonic()
    v = grade(GEMM.id, solution_source(GEMM))
    took = time.monotonic() - t0
    assert v.passed, v.text
    sp = line(v, "speed:")
    assert re.search(r"\[\d+\.\d% of cuBLAS bf16: \d+\.\d vs \d+\.\d TFLOP/s, \d+\.\d{3} ms\]", sp), v.text
    base = float(re.search(r"vs (\d+\.\d) TFLOP/s", sp)[1])
    assert 300 < base <= 989, f"cuBLAS bf16 at {base} TFLOP/s: the GPU busy, or not an H100/H200? {sp}"
    assert took < 120, f"a whole grade took {took:.0f} s"
    v = grade(GEMM.id, solution_source(GEMM), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.gpu
def test_the_cupy_and_torch_baselines_agree():
    """cublas_baseline runs torch (labkit.chapters.ch06.cublas_bf16) when torch is installed, cublasGemmEx
    through CuPy without it: both cuBLAS bf16, within the task's tolerance of the reference."""
    import cupy as cp
    case = GEMM.cases([(512, 384, 1024)])[0]
    ins = GEMM.inputs(case, T.Gen(3))
    ref, atol = W.expected(GEMM, ins, case)
    arrays = {k: a for k, (a, _) in ins.items()}
    for run in (G.cublas_baseline, lambda i, o, c: G.gemm_ex_bf16(i["A"], i["B"], o)):
        out = cp.zeros((512, 384), dtype=cp.uint16)
        run(arrays, out, case)
        cp.cuda.Device().synchronize()
        assert W.check_array(GEMM, out, ref, atol, (512, 384)) is None


@pytest.mark.gpu
@pytest.mark.parametrize("kind", TILE_KINDS)
def test_wrong_tile_kernels_fail(kind):
    v = grade(TILE.id, tile_wrong(kind), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text
    first = line(v, TILE.label(TILE.shapes[0]))
    if kind == "nothing":
        assert "never written" in first, v.text
    if kind == "skip_last_step":     # (16, 8, 16) has one step only: nothing computed is still written
        assert "FAIL" in line(v, "16x16x32"), v.text
    if kind in ("zeros", "bf16_c"):
        assert all("FAIL" in line(v, TILE.label(s)) for s in TILE.shapes), v.text
    if kind == "hang":
        assert "TIME LIMIT: no result within" in first and "stopped" in first, v.text
    if kind == "past_c":
        assert "wrote past the end of the output" in first, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", GEMM_KINDS)
def test_wrong_gemm_kernels_fail(kind):
    v = grade(GEMM.id, gemm_wrong(kind), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text
    first = line(v, GEMM.label(GEMM.shapes[0]))
    if kind == "nothing":
        assert "never written" in first, v.text
    if kind in ("skip_last_step", "zeros"):
        assert all("FAIL" in line(v, GEMM.label(s)) for s in GEMM.shapes), v.text
    if kind == "bf16_early":         # 32 roundings of the accumulators at K = 1024
        assert "FAIL" in line(v, "384x256x1024"), v.text
    if kind == "hang":
        assert "TIME LIMIT: no result within" in first and "stopped" in first, v.text
        assert "endless loop" in v.text
    if kind == "past_c":
        assert "wrote past the end of the output" in first, v.text


@pytest.mark.gpu
def test_a_notebook_that_hands_the_work_to_torch_gets_nothing(tmp_path):
    """A batch of submissions: the source variable computed by Python (torch, cuBLAS), a kernel that includes
    cuBLAS, the starter as released, and the solution."""
    from labkit.grading.batch import grade_batch
    subs = tmp_path / "subs"
    who = {"torch": "import torch\ngemm_mma_src = torch.__file__\n",
           "header": f"gemm_mma_src = r'''{gemm_wrong('cublas')}'''\n",
           "starter": "", "good": f"gemm_mma_src = r'''{solution_source(GEMM)}'''\n"}
    for name, cell in who.items():
        nb = json.loads(STUDENT.read_text())
        if cell:
            nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"s-{name}", "metadata": {},
                                "outputs": [], "source": cell})
        (subs / name).mkdir(parents=True)
        (subs / name / "exercises.ipynb").write_text(json.dumps(nb))
    rows = grade_batch(subs, tmp_path / "g.csv", seed=7, timeout=600, speed=False, progress=False)
    by = {(r.submission.split("/")[0], r.exercise): r for r in rows}
    assert by["good", GEMM.id].points == by["good", GEMM.id].max_points
    assert by["torch", GEMM.id].points == 0 and "not a string literal" in " ".join(by["torch", GEMM.id].lost)
    assert by["header", GEMM.id].points == 0 and "compile error" in " ".join(by["header", GEMM.id].lost)
    assert by["starter", GEMM.id].points == 0


@pytest.mark.gpu
def test_the_starters_fail_cleanly():
    for task in (TILE, GEMM):
        v = grade(task.id, student_source(task), speed=False)
        assert "never written" in v.text or "FAIL" in v.text, v.text
        assert v.points == 0 and "CRASH" not in v.text, v.text


@pytest.mark.gpu
def test_memory_estimate_covers_the_real_peak_of_the_speed_shape():
    import types
    import cupy as cp
    from labkit.measure.compile import load_kernel
    case = GEMM.cases(speed=True)[-1]
    kernel = load_kernel(solution_source(GEMM), GEMM.kernel)
    ctx = types.SimpleNamespace(sms=T.sms(), gpu="", module_bytes=0, flusher=None)
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    status, detail, kept = W.run_case(GEMM, kernel, case, ctx)
    peak = pool.total_bytes()
    assert status == "ok", detail
    assert peak <= W.case_memory(GEMM, case), (peak, W.case_memory(GEMM, case))
    del kept

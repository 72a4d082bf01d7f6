"""Chapter 08's graded exercises (labkit/grading/ch08.py, labs/08-flash-attention/exercises.solution.ipynb).

CPU: the registry, the numeric answers (right ones through the static extractor, the usual slips rejected), the
solutions (sm_80, sm_90, no spills) and starters compile, the release is in step and strips the solutions, the
notebook states the contracts and the speed bar, the hidden shapes hold the edge cases, the memory estimate of
the speed case, the speed verdict against SDPA flash and without torch.
GPU (the H200 runner): the reference solutions get full marks, on drawn hidden shapes too; a correct kernel that
walks the key tiles last to first passes; adversarial submissions fail: one that does nothing, writes zeros,
skips the rescale of O when the max grows, ignores the causal mask, takes no row max (exp overflows on the
planted key), gives NaN on rows whose first tiles are all masked, writes past O, never finishes, or hands the
work to torch from Python.
"""
from __future__ import annotations

import json
import math
import re
import time

import pytest

from labkit.grading import ch08 as G
from labkit.grading import check_answers, grade
from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.grading import worker as W
from labkit.grading.verdict import CaseResult, RunResult, SpeedResult, score
from labkit.paths import LABS

from exercise_sources import edit as _edit, solution_source, student_source, verdict_line as line

pytestmark = pytest.mark.chapter("08")

LAB = LABS / "08-flash-attention"
SOLUTION = LAB / N.SOLUTION_NAME
STUDENT = LAB / N.STUDENT_NAME
NUM, TILE, FLASH = T.get("08.numbers"), T.get("08.attention_tile"), T.get("08.flash_fwd")


# ------------------------------------------------------------------------------------------ the specs

def test_the_registry_finds_the_three_tasks():
    assert [t.id for t in T.for_chapter("08")] == ["08.numbers", "08.attention_tile", "08.flash_fwd"]
    assert isinstance(NUM, T.NumericTask) and len(NUM.questions) == 10
    assert TILE.speed_shape is None and TILE.max_points == 4
    assert FLASH.speed_threshold == G.FLASH_SPEED_PCT and FLASH.max_points == 6
    assert FLASH.speed_baseline is G.sdpa_baseline and FLASH.baseline_name == "SDPA flash"
    assert T.norm_shape(FLASH.speed_shape) == G.SPEED_SHAPE == (16, 16, 4096, 128)
    for t in (TILE, FLASH):
        assert t.floor_peaks == ("bf16_tflops",) and t.out_dtype == "bfloat16" and callable(t.verify)
        s = T.norm_shape(t.shapes[-1])
        assert t.outputs(s) == (("O", s, "bfloat16"), ("LSE", s[:-1], "float32"))
    assert G.FLASH_SMEM == 81920


def test_the_expected_answers():
    e = math.e
    want = {"flops": 4 * 16 * 16 * 4096 ** 2 * 128, "flops_causal": 2 * 16 * 16 * 4096 ** 2 * 128,
            "fused_bytes": 2 ** 30, "naive_bytes": 2 ** 30 + 2 ** 35, "fused_intensity": 2048.0,
            "naive_intensity": 2 ** 41 / (2 ** 30 + 2 ** 35), "kv_tile_bytes": 32768, "merged_m": 5.0,
            "merged_l": 3 * e ** -3 + 1, "o1_factor": e ** -3}
    got = {q.key: q.expected for q in NUM.questions}
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12), k
    from labkit.chapters import ch08
    assert got["flops"] == ch08.flops(16, 16, 4096, 128, 0) and got["flops_causal"] == ch08.flops(16, 16, 4096, 128, 1)
    # the merge as the chapter's merge_states computes it
    import numpy as np
    m, l, o = ch08.merge_states(np.array([2.0]), np.array([3.0]), np.array([[1.0]]),
                                np.array([5.0]), np.array([1.0]), np.array([[0.0]]))
    assert float(m[0]) == got["merged_m"] and float(l[0]) == pytest.approx(got["merged_l"])
    assert float(o[0, 0]) == pytest.approx(got["o1_factor"])


def test_numeric_answers_of_the_solution_score_full_marks_and_the_students_none():
    sol = N.extract_answers(N.read_notebook(SOLUTION), NUM.id, NUM.answers_var)
    v = check_answers(NUM.id, sol)
    assert v.passed and v.points == 10, v.text
    stu = N.extract_answers(N.read_notebook(STUDENT), NUM.id, NUM.answers_var)
    assert set(stu) == {q.key for q in NUM.questions} and check_answers(NUM.id, stu).points == 0


def test_wrong_answers_are_rejected():
    right = {q.key: q.expected for q in NUM.questions}
    e = math.e
    # the usual slips: 2 B H S^2 d (one product), causal not halved, fp32 bytes, the naive path without the P
    # passes, a K tile alone, the merged max the smaller one, l1 + l2 unscaled, the factor e^(m2 - m1)
    wrong = {"flops": 2 * 16 * 16 * 4096 ** 2 * 128, "flops_causal": right["flops"],
             "fused_bytes": 2 * right["fused_bytes"], "naive_bytes": 2 ** 30 + 2 ** 34,
             "kv_tile_bytes": 64 * 128 * 2, "merged_m": 2, "merged_l": 4, "o1_factor": e ** 3}
    v = check_answers(NUM.id, {**right, **wrong})
    assert v.points == len(right) - len(wrong), v.text
    assert "too high" in v.text and "too low" in v.text
    assert check_answers(NUM.id, {**right, "merged_l": 3 * e ** -3 + 1.01}).points == 9      # 0.2% at most


# --------------------------------------------------------------------------- sources and the release

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_solutions_compile_without_spills_and_starters_compile(arch):
    from labkit.measure.compile import compile_check
    for task in (TILE, FLASH):
        f = compile_check(solution_source(task), arch).functions[task.kernel]
        assert f.spills == 0, (task.id, f)
        assert task.kernel in compile_check(student_source(task), arch).functions
    f = compile_check(solution_source(FLASH), arch).functions[FLASH.kernel]
    assert f.registers <= 255 and f.shared_bytes == 0, f          # all of it dynamic: the grader's 80 KB
    f = compile_check(solution_source(TILE), arch).functions[TILE.kernel]
    assert f.shared_bytes <= 48 * 1024, f


def test_the_solutions_use_the_instructions_and_no_header():
    tile, flash = solution_source(TILE), solution_source(FLASH)
    assert "mma.sync" not in tile and "__shfl_xor_sync" in tile and "exp2f" in tile       # CUDA cores
    for instr in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4.shared",
                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared", "cp.async.cg.shared.global", "cp.async.wait_group",
                  "ex2.approx", "cvt.rn.bf16x2.f32"):
        assert instr in flash, instr
    assert re.findall(r"#include", tile + flash) == []                                  # self-contained
    assert "common/flash_mma.cuh" not in flash


def test_the_student_view_is_in_step_and_keeps_the_skeleton():
    assert STUDENT.read_text(encoding="utf-8") == N.release_text(SOLUTION), "run `python -m labkit release 08`"
    tile, flash = student_source(TILE), student_source(FLASH)
    assert tile.count("// TODO:") == 3 and "__shfl_xor_sync" not in tile and "exp2f" not in tile
    for given in ("__shared__ unsigned Ks[KT][D / 2];", "float q[32];", "float o[32];", "float m = NEG_INF",
                  "const int n_end = causal"):
        assert given in tile, given
    assert flash.count("// TODO:") == 3 and "ldmatrix_x4_trans(b," not in flash and "cp_async_wait<1>" not in flash
    for given in ("void cp_async16(", "void ldmatrix_x4_trans(", "void mma_bf16(", "unsigned off(int r, int c)",
                  "void load_tile(", "void qk_tile(", "float o[D / 8][4];", "void pv_tile("):
        assert given in flash, given
    text = STUDENT.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "hidden=True" not in text and '"outputs": []' in text
    nb = N.read_notebook(STUDENT)
    assert nb["metadata"]["labkit"]["exercises"] == "08" and nb["metadata"]["labkit"]["view"] == "student"


def test_the_solution_notebook_has_chapter_06s_structure():
    nb = N.read_notebook(SOLUTION)
    cells = nb["cells"]
    ch06 = N.read_notebook(LABS / "06-gemm-tensor-cores" / N.SOLUTION_NAME)
    assert [c["cell_type"] for c in cells] == [c["cell_type"] for c in ch06["cells"]]
    assert cells[1]["source"] == ch06["cells"][1]["source"]                      # the same setup cell
    assert N.graded_tasks(nb) == ["08.numbers", "08.attention_tile", "08.flash_fwd"]
    hidden = N.hidden_shapes(nb)
    assert set(hidden) == {"08.attention_tile", "08.flash_fwd"}
    for task_id, shapes in hidden.items():
        assert all(s in T.get(task_id).draw_hidden(0) for s in shapes)


def test_the_notebook_states_the_speed_bar_and_the_contracts():
    md = "".join(c["source"] for c in N.read_notebook(SOLUTION)["cells"] if c["cell_type"] == "markdown")
    assert f"at least **{G.FLASH_SPEED_PCT:.0f}% of SDPA flash**" in md, "update the notebook with the bar"
    assert TILE.launch_text in md and FLASH.launch_text in md
    assert TILE.signature in md and FLASH.signature in md
    assert "d = 64" in TILE.launch_text and "S >= 1" in TILE.launch_text and "one head" in TILE.launch_text
    assert f"dynamic shared memory {G.FLASH_SMEM} bytes" in FLASH.launch_text
    assert "2^{-8}|O_\\mathrm{ref}| + 2^{-6}(\\mathrm{rms}(O_\\mathrm{ref}) + \\mathrm{sd})" in md   # the tolerance
    assert "10^{-3} + 2^{-12}|\\mathrm{LSE}_\\mathrm{ref}|" in md
    assert "MUST BE SET FROM THE H200 MEASUREMENT" in open(G.__file__, encoding="utf-8").read()


def test_the_tolerance_is_the_chapters():
    from labkit.chapters import ch08
    assert (ch08.O_REL, ch08.O_ABS) == (2.0 ** -8, 2.0 ** -6)
    src = open(G.__file__, encoding="utf-8").read()
    assert "ch08.reference(" in src and "ch08.mismatches(" in src


def test_launch_geometry():
    class K:
        def __init__(self):
            self.calls = []

        def __call__(self, grid, block, args, shared_mem=0):
            self.calls.append((grid, block, args, shared_mem))
    ins = {"Q": "q", "K": "k", "V": "v"}
    out = {"O": "o", "LSE": "lse"}
    for variant, c in ((None, 0), ("causal", 1), ("causal_large", 1), ("large", 0)):
        k = K()
        TILE.launch(k, ins, out, T.Case("x", (100, 64), variant), None)
        (grid, block, args, smem), = k.calls
        assert grid == (7,) and block == (32,) and args[:5] == ("q", "k", "v", "o", "lse")
        assert [int(a) for a in args[5:]] == [100, c] and smem == 0
    k = K()
    FLASH.launch(k, ins, out, T.Case("x", (2, 3, 129, 128), "causal"), None)
    (grid, block, args, smem), = k.calls
    assert grid == (3, 6) and block == (128,) and [int(a) for a in args[5:]] == [129, 1] and smem == G.FLASH_SMEM
    assert k.max_dynamic_shared_size_bytes == G.FLASH_SMEM


def test_every_case_runs_causal_and_not_with_planted_keys():
    for task in (TILE, FLASH):
        variants = {c.variant for c in task.cases()}
        assert None in variants and "causal" in variants
    assert {c.variant for c in TILE.cases()} == {None, "causal", "large", "causal_large"}
    speed = FLASH.cases(speed=True)[-1]
    assert speed.role == "speed" and speed.variant is None          # non-causal, and no planted key


def test_the_shapes_hold_the_edge_cases():
    for task, d in ((TILE, 64), (FLASH, 128)):
        for seed in (0, 1, 2, 2026):
            for s in task.draw_hidden(seed) + [T.norm_shape(x) for x in task.shapes]:
                assert s[-1] == d and s[-2] >= 1, (task.id, s)
        seqs = [s[-2] for s in [T.norm_shape(x) for x in task.shapes]]
        assert 1 in seqs and any(S % 64 and S > 64 for S in seqs) and any(S % 16 == 1 and S > 16 for S in seqs)
        assert task.draw_hidden(1) != task.draw_hidden(2)
    assert any(s[0] * s[1] >= 128 for s in FLASH.draw_hidden(3))              # many heads
    assert any(s[2] > 8192 for s in FLASH.draw_hidden(3))                      # a long sequence
    assert (4099, 64) in TILE.draw_hidden(3)


def test_the_student_tree_strips_the_hidden_generators():
    from labkit.grading.release import strip_hidden_generators
    text = strip_hidden_generators(open(G.__file__, encoding="utf-8").read())
    assert "(4099, TILE_D)" not in text and "8193" not in text
    assert text.count("return []   # hidden shapes") == 2


def test_memory_estimate_and_physical_floor_of_the_speed_case():
    case = FLASH.cases(speed=True)[-1]
    need = W.case_memory(FLASH, case, speed=True)
    n = 16 * 16 * 4096 * 128
    assert 4 * n * 2 * 2 < need < 40e9, need             # inputs twice, O, the reference's fp32 O and sd, ...
    ms, why = W.physical_floor(FLASH, G.SPEED_SHAPE, "NVIDIA H200")
    assert "TFLOP/s" in why and ms > 1.0                # 2.2e12 FLOP at the datasheet's bf16 rate


def test_the_verdict_against_sdpa_flash():
    cases = FLASH.cases(speed=True)
    flops = 4 * 16 * 16 * 4096 ** 2 * 128
    base_ms = flops / 360e12 * 1e3
    res = RunResult(FLASH.id, [CaseResult(c.label, c.hidden, c.role, "ok") for c in cases])
    res.speed = SpeedResult("measured", cases[-1].label, kernel_ms=base_ms * 100 / 80, copy_ms=base_ms,
                            bytes=FLASH.bytes_moved(cases[-1].shape))
    v = score(FLASH, res, speed_requested=True)
    ln = next(x for x in v.text.splitlines() if x.startswith("speed:"))
    assert "PASS [80.0% of SDPA flash: 288.0 vs 360.0 TFLOP/s," in ln and f"needs {G.FLASH_SPEED_PCT:.0f}%" in ln
    res.speed = SpeedResult("skipped", cases[-1].label,
                            detail="not measured: the baseline, PyTorch's SDPA flash back end, needs torch")
    v = score(FLASH, res, speed_requested=True)
    assert v.points == 3 and "needs torch" in v.text


def test_the_baseline_says_it_needs_torch(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(T.BaselineUnavailable, match="needs torch"):
        G.sdpa_baseline({}, None, FLASH.cases(speed=True)[-1])


# ----------------------------------------------------------------------------- adversarial sources

SPIN_TILE = "    while (((volatile unsigned short*)O)[0] != 12345) { }   // O starts as poison: never true\n"


def tile_wrong(kind: str) -> str:
    s = solution_source(TILE)
    if kind == "nothing":
        return re.sub(r"// ### BEGIN SOLUTION.*?// ### END SOLUTION", "", s, flags=re.S)
    if kind == "zeros":
        return _edit(s, "orow[i] = (unsigned)to_bf16(o[2 * i] * inv) | ((unsigned)to_bf16(o[2 * i + 1] * inv) << 16);",
                     "orow[i] = 0u;")
    if kind == "no_rescale":         # l follows the max, o does not
        return _edit(s, "        for (int i = 0; i < 32; ++i) o[i] *= alpha;\n", "")
    if kind == "no_mask":            # the causal mask ignored (the key range still ends at the block's last row)
        return _edit(s, "(key >= S || (causal && key > row))", "(key >= S)")
    if kind == "no_max":             # p = 2^s, no running max at all (consistently): overflows on the planted key
        s = _edit(s, "const float base = m_new == NEG_INF ? 0.f : m_new;", "const float base = 0.f;")
        s = _edit(s, "const float alpha = exp2f(m - base);", "const float alpha = 1.f;")
        return _edit(s, "LSE[row] = (m + log2f(l)) * LN2;", "LSE[row] = log2f(l) * LN2;")
    if kind in ("reverse", "reverse_nan"):   # every key tile, last to first: rows meet all-masked tiles first
        s = _edit(s, "const int n_end = causal ? min(S, (int)blockIdx.x * ROWS + ROWS) : S;", "const int n_end = S;")
        s = _edit(s, "for (int n0 = 0; n0 < n_end; n0 += KT)", "for (int n0 = (n_end - 1) / KT * KT; n0 >= 0; n0 -= KT)")
        if kind == "reverse_nan":    # ... without the guard: 2^(-inf - (-inf)) = NaN
            s = _edit(s, "const float base = m_new == NEG_INF ? 0.f : m_new;", "const float base = m_new;")
        return s
    if kind == "past_o":             # one stray store 64 elements past the end of O
        return _edit(s, "    if (row < S) {\n", "    if (blockIdx.x == 0 && lane == 0) O[(size_t)S * D + 64] = 0;\n"
                     "    if (row < S) {\n")
    if kind == "hang":
        return _edit(s, "    float q[32];\n", SPIN_TILE + "    float q[32];\n")
    raise KeyError(kind)


def flash_wrong(kind: str) -> str:
    s = solution_source(FLASH)
    if kind == "nothing":
        return _edit(s, "    // ### BEGIN SOLUTION: the epilogue", "    return;\n    // ### BEGIN SOLUTION: the epilogue")
    if kind == "zeros":
        return _edit(s, "    // ### BEGIN SOLUTION: the epilogue",
                     "    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;\n"
                     "    // ### BEGIN SOLUTION: the epilogue")
    if kind == "no_rescale":
        return _edit(s, "                o[n][2 * h] *= alpha;\n                o[n][2 * h + 1] *= alpha;\n", "")
    if kind == "no_mask":
        return _edit(s, "if (key >= S || (causal && key > row[q >> 1]))", "if (key >= S)")
    if kind == "no_max":
        return _edit(s, "const float base = m_new == NEG_INF ? 0.f : m_new;", "const float base = 0.f;")
    if kind in ("reverse", "reverse_nan"):
        s = _edit(s, "const int n_end = causal ? min(S, m0 + BM) : S;", "const int n_end = S;")
        s = _edit(s, "load_tile(sKV, K, 0, S, tid);\n    load_tile(sKV + TILE_BYTES, V, 0, S, tid);",
                  "load_tile(sKV, K, (ntiles - 1) * BN, S, tid);\n    load_tile(sKV + TILE_BYTES, V, (ntiles - 1) * BN, S, tid);")
        s = _edit(s, "load_tile(st, K, (j + 1) * BN, S, tid);\n            load_tile(st + TILE_BYTES, V, (j + 1) * BN, S, tid);",
                  "load_tile(st, K, (ntiles - 2 - j) * BN, S, tid);\n            "
                  "load_tile(st + TILE_BYTES, V, (ntiles - 2 - j) * BN, S, tid);")
        s = _edit(s, "const int n0 = j * BN;", "const int n0 = (ntiles - 1 - j) * BN;")
        s = _edit(s, "        if (causal && n0 > w0 + 15) continue;                // wholly past this warp's rows (warp-uniform)\n", "")
        if kind == "reverse_nan":
            s = _edit(s, "const float base = m_new == NEG_INF ? 0.f : m_new;", "const float base = m_new;")
        return s
    if kind == "past_o":             # O was moved to this head: (gridDim.y - blockIdx.y) heads on is the end
        return _edit(s, "    // ### BEGIN SOLUTION: the epilogue",
                     "    if (blockIdx.x == 0 && blockIdx.y == 0 && tid == 0) O[(size_t)gridDim.y * S * D + 64] = 0;\n"
                     "    // ### BEGIN SOLUTION: the epilogue")
    if kind == "hang":
        return _edit(s, "    float o[D / 8][4];                                       // O of",
                     "    while (((volatile unsigned short*)O)[0] != 12345) { }\n"
                     "    float o[D / 8][4];                                       // O of")
    raise KeyError(kind)


WRONG_KINDS = ["nothing", "zeros", "no_rescale", "no_mask", "no_max", "reverse_nan", "past_o", "hang"]


def test_the_wrong_kernels_of_the_gpu_tests_compile():
    """So that the GPU tests below fail a kernel for what it computes, not for a typo in its edit."""
    from labkit.measure.compile import compile_check
    for task, wrong in ((TILE, tile_wrong), (FLASH, flash_wrong)):
        for kind in WRONG_KINDS + ["reverse"]:
            src = wrong(kind)
            assert src != solution_source(task), (task.id, kind)
            assert compile_check(src, "sm_90").functions[task.kernel].spills == 0, (task.id, kind)


def test_python_computed_sources_are_refused():
    from labkit.grading.extract import Missing
    nb = json.loads(STUDENT.read_text())
    nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "cheat", "metadata": {}, "outputs": [],
                        "source": "import torch\nflash_fwd_src = torch.__file__\n"})
    with pytest.raises(Missing, match="not a string literal"):
        N.extract_source(nb, FLASH.source_var)


# ------------------------------------------------------------------------------------------ GPU


def lines_of(v, variant_text: str) -> list[str]:
    return [ln for ln in v.text.splitlines() if f"({variant_text})" in ln]


@pytest.mark.gpu
def test_reference_tile_solution_gets_full_marks():
    v = grade(TILE.id, solution_source(TILE))
    assert v.passed and "FAIL" not in v.text, v.text
    v = grade(TILE.id, solution_source(TILE), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.gpu
def test_reference_flash_solution_gets_full_marks():
    t0 = time.monotonic()
    v = grade(FLASH.id, solution_source(FLASH))
    took = time.monotonic() - t0
    assert v.passed, v.text
    sp = line(v, "speed:")
    assert re.search(r"\[\d+\.\d% of SDPA flash: \d+\.\d vs \d+\.\d TFLOP/s, \d+\.\d{3} ms\]", sp), v.text
    base = float(re.search(r"vs (\d+\.\d) TFLOP/s", sp)[1])
    assert 150 < base <= 989, f"SDPA flash at {base} TFLOP/s: the GPU busy, or not an H100/H200? {sp}"
    assert took < 180, f"a whole grade took {took:.0f} s"
    v = grade(FLASH.id, solution_source(FLASH), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("task_id", ["08.attention_tile", "08.flash_fwd"])
def test_a_kernel_that_walks_the_tiles_backwards_with_the_guard_passes(task_id):
    task = T.get(task_id)
    src = (tile_wrong if task is TILE else flash_wrong)("reverse")
    v = grade(task.id, src, speed=False)
    assert "correctness: PASS" in v.text, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", WRONG_KINDS)
@pytest.mark.parametrize("task_id", ["08.attention_tile", "08.flash_fwd"])
def test_wrong_kernels_fail(task_id, kind):
    task = T.get(task_id)
    v = grade(task.id, (tile_wrong if task is TILE else flash_wrong)(kind), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text
    first = line(v, task.label(T.norm_shape(task.shapes[0])))
    if kind == "nothing":
        assert "O: " in first and "never written" in first, v.text
    if kind == "zeros":
        assert "O: " in v.text and "LSE" not in line(v, task.label(T.norm_shape(task.shapes[2]))), v.text
    plain = [ln for ln in v.text.splitlines() if ln.startswith("  ") and "(" not in ln]     # non-causal cases
    if kind == "no_mask":            # the causal cases fail, the others pass
        assert plain and all(ln.rstrip().endswith("ok") for ln in plain), v.text
        assert any("FAIL" in ln for ln in lines_of(v, "causal")), v.text
    if kind == "no_max":             # random scores are small: only the planted key overflows
        if task is TILE:
            assert plain and all(ln.rstrip().endswith("ok") for ln in plain), v.text
            assert any("FAIL" in ln for ln in lines_of(v, "a key of huge scores")), v.text
        else:                        # 08.flash_fwd plants the key in the last head of every case
            assert any("FAIL" in ln for ln in plain), v.text
    if kind == "reverse_nan":
        assert "got nan" in v.text, v.text
    if kind == "no_rescale":
        assert "FAIL" in line(v, task.label(T.norm_shape(task.shapes[3]))), v.text
    if kind == "hang":
        assert "TIME LIMIT: no result within" in first and "stopped" in first, v.text
    if kind == "past_o":
        assert "O: wrote past the end of the output" in first, v.text


@pytest.mark.gpu
def test_a_notebook_that_hands_the_work_to_torch_gets_nothing(tmp_path):
    """A batch of submissions: the source variable computed by Python (torch), the starter as released, and the
    solution."""
    from labkit.grading.batch import grade_batch
    subs = tmp_path / "subs"
    who = {"torch": "import torch\nflash_fwd_src = torch.__file__\n", "starter": "",
           "good": f"flash_fwd_src = r'''{solution_source(FLASH)}'''\n"}
    for name, cell in who.items():
        nb = json.loads(STUDENT.read_text())
        if cell:
            nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"s-{name}", "metadata": {},
                                "outputs": [], "source": cell})
        (subs / name).mkdir(parents=True)
        (subs / name / "exercises.ipynb").write_text(json.dumps(nb))
    rows = grade_batch(subs, tmp_path / "g.csv", seed=7, timeout=900, speed=False, progress=False)
    by = {(r.submission.split("/")[0], r.exercise): r for r in rows}
    assert by["good", FLASH.id].points == by["good", FLASH.id].max_points
    assert by["torch", FLASH.id].points == 0 and "not a string literal" in " ".join(by["torch", FLASH.id].lost)
    assert by["starter", FLASH.id].points == 0


@pytest.mark.gpu
def test_the_starters_fail_cleanly():
    for task in (TILE, FLASH):
        v = grade(task.id, student_source(task), speed=False)
        assert "never written" in v.text or "FAIL" in v.text, v.text
        assert v.points == 0 and "CRASH" not in v.text, v.text


@pytest.mark.gpu
def test_the_planted_key_overflows_a_naive_exp_and_the_reference_stays_finite():
    import cupy as cp
    for case in (TILE.cases([(100, 64)])[2], FLASH.cases([(1, 2, 200, 128)])[0]):
        ins = TILE.inputs(case, T.Gen(5)) if case.shape[0] == 100 else FLASH.inputs(case, T.Gen(5))
        from labkit.measure import bf16
        k = bf16.from_bits(ins["K"][0])
        assert float(cp.abs(k).max()) == G.PLANT
        check = (TILE if len(case.shape) == 2 else FLASH).verify(ins, case)
        zeros = {"O": cp.zeros(case.shape, dtype=cp.uint16), "LSE": cp.zeros(case.shape[:-1], dtype=cp.float32)}
        assert "LSE" in check(zeros) and "O:" in check(zeros)


@pytest.mark.gpu
def test_memory_estimate_covers_the_real_peak_of_the_speed_shape():
    import types
    import cupy as cp
    from labkit.measure.compile import load_kernel
    case = FLASH.cases(speed=True)[-1]
    kernel = load_kernel(solution_source(FLASH), FLASH.kernel)
    ctx = types.SimpleNamespace(sms=T.sms(), gpu="", module_bytes=0, flusher=None)
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    status, detail, kept = W.run_case(FLASH, kernel, case, ctx)
    peak = pool.total_bytes()
    assert status == "ok", detail
    assert peak <= W.case_memory(FLASH, case), (peak, W.case_memory(FLASH, case))
    del kept

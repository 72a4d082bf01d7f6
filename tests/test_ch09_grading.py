"""Chapter 09's graded exercises (labkit/grading/ch09.py, labs/09-decode-attention/exercises.solution.ipynb).

CPU: the registry, the numeric answers (right and the usual slips), the solutions (sm_80, sm_90, no spills) and
starters compile, the release is in step and strips the solutions, the notebook states the contracts and the speed
bar, the lengths and hidden shapes hold the edge cases, the speed verdict against a copy.
GPU (the H200 runner): the reference solutions get full marks, on drawn hidden shapes too; adversarial submissions
fail: nothing, zeros, no guard for empty splits (NaN), no max subtracted (merge), loads past a sequence's length
(NaN rows), the wrong GQA mapping, no counter reset, a write past the output, a hang.
"""
from __future__ import annotations

import math
import re

import pytest

from labkit.grading import ch09 as G
from labkit.grading import check_answers, grade
from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.grading.verdict import CaseResult, RunResult, SpeedResult, score
from labkit.paths import LABS

from exercise_sources import edit as _edit, solution_source, student_source, verdict_line as line

pytestmark = pytest.mark.chapter("09")

LAB = LABS / "09-decode-attention"
SOLUTION = LAB / N.SOLUTION_NAME
STUDENT = LAB / N.STUDENT_NAME
NUM, MERGE, PAGED = T.get("09.numbers"), T.get("09.merge"), T.get("09.paged_decode")


def test_the_registry_finds_the_three_tasks():
    assert [t.id for t in T.for_chapter("09")] == ["09.numbers", "09.merge", "09.paged_decode"]
    assert isinstance(NUM, T.NumericTask) and len(NUM.questions) == 9
    assert MERGE.speed_shape is None and MERGE.max_points == 4
    assert PAGED.speed_threshold == G.PAGED_SPEED_PCT and PAGED.max_points == 6 and PAGED.speed_baseline is None
    assert T.norm_shape(PAGED.speed_shape) == G.SPEED_SHAPE
    for t, names in ((MERGE, ("out", "out_lse")), (PAGED, ("out", "lse"))):
        s = T.norm_shape(t.shapes[-1])
        B, Hq = s[0], s[1] if t is MERGE else 8 * s[1]
        assert t.outputs(s) == ((names[0], (B, Hq, 128), "bfloat16"), (names[1], (B, Hq), "float32"))
        assert callable(t.verify) and t.out_shape(s) == (B, Hq, 128)


def test_the_expected_answers():
    got = {q.key: q.expected for q in NUM.questions}
    from labkit.chapters import ch09
    assert got["kv_bytes"] == ch09.kv_bytes(64, 4, 32768, 128) == 2 ** 32
    assert got["floor_us"] == pytest.approx(ch09.floor_ms(2 ** 32, 4190.0) * 1e3)
    assert (got["blocks_batch1"], got["splits_fill_1"], got["splits_fill_2"], got["page_bytes"]) == (4, 33, 66, 4096)
    import numpy as np
    out, lse = ch09.merge_splits(np.array([[1.0], [0.0], [0.0]])[None], np.array([[3 + math.log(2), 1 + math.log(5),
                                                                                   -np.inf]]))
    assert got["merged_lse"] == pytest.approx(float(lse[0]))
    assert got["weight_first"] == pytest.approx(float(out[0, 0])) and got["weight_empty"] == 0


def test_numeric_answers_of_the_solution_score_full_marks_and_the_students_none():
    sol = N.extract_answers(N.read_notebook(SOLUTION), NUM.id, NUM.answers_var)
    v = check_answers(NUM.id, sol)
    assert v.passed and v.points == 9, v.text
    stu = N.extract_answers(N.read_notebook(STUDENT), NUM.id, NUM.answers_var)
    assert set(stu) == {q.key for q in NUM.questions} and check_answers(NUM.id, stu).points == 0


def test_wrong_answers_are_rejected():
    right = {q.key: q.expected for q in NUM.questions}
    # the query heads for the KV heads, K alone, per-SM splits not rounded up, the blocks of batch 1 as Hq, a page of
    # every KV head, the empty split counted as e^0 = 1
    wrong = {"kv_bytes": 8 * right["kv_bytes"], "floor_us": right["floor_us"] / 2, "splits_fill_1": 32,
             "blocks_batch1": 32, "page_bytes": 4 * 4096, "weight_empty": 1}
    v = check_answers(NUM.id, {**right, **wrong})
    assert v.points == len(right) - len(wrong), v.text
    assert check_answers(NUM.id, {**right, "merged_lse": 3 + math.log(7)}).points == 8      # l1 + l2 unscaled


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_solutions_compile_without_spills_and_starters_compile(arch):
    from labkit.measure.compile import compile_check
    for task in (MERGE, PAGED):
        f = compile_check(solution_source(task), arch).functions[task.kernel]
        assert f.spills == 0 and f.registers <= 255 and f.shared_bytes <= 48 * 1024, (task.id, f)
        assert task.kernel in compile_check(student_source(task), arch).functions


def test_the_student_view_is_in_step_and_keeps_the_skeleton():
    assert STUDENT.read_text(encoding="utf-8") == N.release_text(SOLUTION), "run `python -m labkit release 09`"
    merge, paged = student_source(MERGE), student_source(PAGED)
    assert merge.count("// TODO:") == 2 and "block_max(mx" not in merge and "__shared__ float w[MAX_SPLITS];" in merge
    code = "\n".join(ln for ln in paged.splitlines() if "// TODO:" not in ln)
    assert paged.count("// TODO:") == 3 and "atomicAdd(" not in code and "__ldcg(" not in code
    for given in ('#include "common/decode_attn.cuh"', "dec_split_range<64>", "dec_load_q<GROUP, HEAD_DIM>",
                  "dec_simt_step<GROUP, HEAD_DIM, UNROLL>", "dec_finish<GROUP, HEAD_DIM, NSUB, NTHREADS>",
                  "__shared__ int is_last;"):
        assert given in paged, given
    text = STUDENT.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "hidden=True" not in text and '"outputs": []' in text
    nb = N.read_notebook(STUDENT)
    assert nb["metadata"]["labkit"]["exercises"] == "09" and nb["metadata"]["labkit"]["view"] == "student"


def test_the_solution_notebook_has_chapter_08s_structure():
    nb = N.read_notebook(SOLUTION)
    ch08 = N.read_notebook(LABS / "08-flash-attention" / N.SOLUTION_NAME)
    assert [c["cell_type"] for c in nb["cells"]] == [c["cell_type"] for c in ch08["cells"]]
    assert nb["cells"][1]["source"] == ch08["cells"][1]["source"]
    assert N.graded_tasks(nb) == ["09.numbers", "09.merge", "09.paged_decode"]
    hidden = N.hidden_shapes(nb)
    assert set(hidden) == {"09.merge", "09.paged_decode"}
    for task_id, shapes in hidden.items():
        assert all(s in T.get(task_id).draw_hidden(0) for s in shapes)
    toc = (LABS.parent / "_toc.yml").read_text(encoding="utf-8")
    assert "labs/09-decode-attention/lab\n          - file: labs/09-decode-attention/exercises" in toc


def test_the_notebook_states_the_speed_bar_and_the_contracts():
    md = "".join(c["source"] for c in N.read_notebook(SOLUTION)["cells"] if c["cell_type"] == "markdown")
    assert f"at least **{G.PAGED_SPEED_PCT:.0f}% of copy**" in md, "update the notebook with the bar"
    for t in (MERGE, PAGED):
        assert t.launch_text in md and t.signature in md
    assert "MUST BE SET FROM THE H200 MEASUREMENT" in open(G.__file__, encoding="utf-8").read()
    assert "counters (B, Hkv) int32 are zero at the launch and must be zero when it ends" in PAGED.launch_text
    assert "2^{-8}|o_\\mathrm{ref}|" in md and "10^{-3} + 2^{-12}" in md


def test_lengths_and_shapes_hold_the_edge_cases():
    for s in [T.norm_shape(x) for x in PAGED.shapes] + PAGED.draw_hidden(0) + PAGED.draw_hidden(5):
        B, Hkv, L, P = s
        lens = G.lengths(s)
        assert lens[0] == L and max(lens) == L and min(lens) >= 0 and P & (P - 1) == 0
        if B > 1:
            assert lens[1] == 1
        if B > 3:
            assert lens[3] == 0
        assert 1 <= G.nsplit(s) <= G.MAX_NSPLIT
    assert any(G.nsplit(T.norm_shape(s)) > 1 and T.norm_shape(s)[0] > 3 for s in PAGED.shapes)   # empty + splits
    assert G.nsplit((1, 4, 32768, 16)) == 64 and (1, 4, 32768, 16) in PAGED.draw_hidden(2)
    assert PAGED.bytes_moved(G.SPEED_SHAPE) == 2 * sum(G.lengths(G.SPEED_SHAPE)) * 4 * 128 * 2 + 2 * 64 * 32 * 128 * 2
    assert {s[2] for s in MERGE.draw_hidden(0)} >= {1, 2, 1024}
    assert PAGED.draw_hidden(1) != PAGED.draw_hidden(2)


def test_the_student_tree_strips_the_hidden_generators():
    from labkit.grading.release import strip_hidden_generators
    text = strip_hidden_generators(open(G.__file__, encoding="utf-8").read())
    assert "(1, 4, 32768, 16)" not in text and "(64, 32, 2)" not in text
    assert text.count("return []   # hidden shapes") == 2


def test_launch_geometry():
    class K:
        def __init__(self):
            self.calls = []

        def __call__(self, grid, block, args, shared_mem=0):
            self.calls.append((grid, block, args, shared_mem))
    k = K()
    MERGE.launch(k, {"o": "o", "lse": "l"}, {"out": "x", "out_lse": "y"}, T.Case("x", (3, 5, 7)), None)
    (grid, block, args, smem), = k.calls
    assert grid == (15,) and block == (128,) and args[:4] == ("o", "l", "x", "y") and int(args[4]) == 7


def test_the_verdict_against_a_copy():
    cases = PAGED.cases(speed=True)
    nbytes = PAGED.bytes_moved(cases[-1].shape)
    copy_ms = nbytes / 4000e9 * 1e3
    res = RunResult(PAGED.id, [CaseResult(c.label, c.hidden, c.role, "ok") for c in cases])
    res.speed = SpeedResult("measured", cases[-1].label, kernel_ms=copy_ms * 100 / 40, copy_ms=copy_ms, bytes=nbytes)
    v = score(PAGED, res, speed_requested=True)
    ln = next(x for x in v.text.splitlines() if x.startswith("speed:"))
    assert "PASS [40.0% of copy" in ln and f"needs {G.PAGED_SPEED_PCT:.0f}%" in ln, ln


# ----------------------------------------------------------------------------- adversarial sources

def merge_wrong(kind: str) -> str:
    s = solution_source(MERGE)
    if kind == "nothing":
        return re.sub(r"// ### BEGIN SOLUTION.*?// ### END SOLUTION", "", s, flags=re.S).replace(
            "const float* L = lse + row * nsplit;", "")
    if kind == "zeros":
        return _edit(s, "out[row * D + c] = to_bf16(W > 0.f ? acc / W : 0.f);", "out[row * D + c] = 0;")
    if kind == "no_guard":          # every split empty, no guard: w = e^(-inf - -inf) = NaN, lse = -inf + ln NaN
        s = _edit(s, "const float mu = M == NEG_INF ? 0.f : M;", "const float mu = M;")
        return _edit(s, "out_lse[row] = W > 0.f ? mu + logf(W) : NEG_INF;", "out_lse[row] = mu + logf(W);")
    if kind == "no_max":            # e^lse overflows at lse ~ 1e4
        return _edit(s, "const float mu = M == NEG_INF ? 0.f : M;", "const float mu = 0.f;")
    if kind == "past_out":
        return _edit(s, "    if (c == 0) out_lse[row]", "    if (row == 0 && c == 0) out[(size_t)gridDim.x * D + 64] = 0;\n"
                     "    if (c == 0) out_lse[row]")
    if kind == "hang":
        return _edit(s, "    float mx = NEG_INF;\n", "    while (((volatile unsigned short*)out)[0] != 12345) { }\n"
                     "    float mx = NEG_INF;\n")
    raise KeyError(kind)


def paged_wrong(kind: str) -> str:
    s = solution_source(PAGED)
    if kind == "nothing":
        return _edit(s, "    __syncthreads();\n    dec_finish<", "    return;\n    __syncthreads();\n    dec_finish<")
    if kind == "zeros":
        return _edit(s, "    dec_load_q<GROUP, HEAD_DIM>(qr, q + row0 * HEAD_DIM, sub, SM_SCALE * LOG2E);\n",
                     "    dec_load_q<GROUP, HEAD_DIM>(qr, q + row0 * HEAD_DIM, sub, SM_SCALE * LOG2E);\n"
                     "    const bool zero_out = true;\n").replace(
            "(bf16_t)(pack_bf16x2(W > 0.f ? acc / W : 0.f, 0.f) & 0xffffu)", "(bf16_t)(zero_out ? 0 : W)")
    if kind == "no_guard":          # an empty sequence: every split empty, W = 0 and out = 0 / 0 = NaN
        return _edit(s, "pack_bf16x2(W > 0.f ? acc / W : 0.f, 0.f)", "pack_bf16x2(acc / W, 0.f)")
    if kind == "past_len":          # rows loaded past k1 (NaN rows no sequence owns), masked only in the softmax
        return _edit(s, "            if (ok[u]) {", "            if (key < ((k1 + 15) & ~15)) {")
    if kind == "gqa":               # query head h read as KV head h % Hkv (the interleaved mapping)
        return _edit(s, "    dec_load_q<GROUP, HEAD_DIM>(qr, q + row0 * HEAD_DIM, sub, SM_SCALE * LOG2E);\n",
                     "    float qt[1][8];\n#pragma unroll\n    for (int g = 0; g < GROUP; ++g) {\n"
                     "        dec_load_q<1, HEAD_DIM>(qt, q + ((size_t)b * Hkv * GROUP + g * Hkv + hkv) * HEAD_DIM, sub,"
                     " SM_SCALE * LOG2E);\n#pragma unroll\n        for (int j = 0; j < 8; ++j) qr[g][j] = qt[0][j];\n    }\n")
    if kind == "no_reset":          # the counter left at nsplit: the next launch never merges
        return _edit(s, "        if (is_last) *cnt = 0;", "")
    if kind == "past_out":
        return _edit(s, "    if (nsplit == 1) return;\n",
                     "    if (b == 0 && hkv == 0 && split == 0 && tid == 0) out[(size_t)gridDim.z * Hkv * GROUP * HEAD_DIM"
                     " + 64] = 0;\n    if (nsplit == 1) return;\n")
    if kind == "hang":
        return _edit(s, "    float qr[GROUP][8],", "    while (((volatile unsigned short*)out)[0] != 12345) { }\n"
                     "    float qr[GROUP][8],")
    raise KeyError(kind)


MERGE_WRONG = ["nothing", "zeros", "no_guard", "no_max", "past_out", "hang"]
PAGED_WRONG = ["nothing", "zeros", "no_guard", "past_len", "gqa", "no_reset", "past_out", "hang"]


def test_the_wrong_kernels_of_the_gpu_tests_compile():
    from labkit.measure.compile import compile_check
    for task, wrong, kinds in ((MERGE, merge_wrong, MERGE_WRONG), (PAGED, paged_wrong, PAGED_WRONG)):
        for kind in kinds:
            src = wrong(kind)
            assert src != solution_source(task), (task.id, kind)
            assert compile_check(src, "sm_90").functions[task.kernel].spills == 0, (task.id, kind)


# ------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_reference_merge_solution_gets_full_marks():
    v = grade(MERGE.id, solution_source(MERGE))
    assert v.passed and "FAIL" not in v.text, v.text
    v = grade(MERGE.id, solution_source(MERGE), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.gpu
def test_reference_paged_solution_gets_full_marks():
    v = grade(PAGED.id, solution_source(PAGED))
    assert v.passed, v.text
    sp = line(v, "speed:")
    assert re.search(r"\[\d+\.\d% of copy", sp), v.text
    v = grade(PAGED.id, solution_source(PAGED), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", MERGE_WRONG)
def test_wrong_merge_kernels_fail(kind):
    v = grade(MERGE.id, merge_wrong(kind), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text
    if kind in ("no_guard",):
        assert "got nan" in v.text, v.text
    if kind == "hang":
        assert "TIME LIMIT" in v.text, v.text
    if kind == "past_out":
        assert "out: wrote past the end of the output" in v.text, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", PAGED_WRONG)
def test_wrong_paged_kernels_fail(kind):
    v = grade(PAGED.id, paged_wrong(kind), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text
    if kind in ("no_guard", "past_len"):
        assert "got nan" in v.text, v.text
    if kind == "no_reset":
        assert "counters:" in v.text and "not zero after the launch" in v.text, v.text
    if kind == "hang":
        assert "TIME LIMIT" in v.text, v.text
    if kind == "past_out":
        assert "out: wrote past the end of the output" in v.text, v.text


@pytest.mark.gpu
def test_the_starters_fail_cleanly():
    for task in (MERGE, PAGED):
        v = grade(task.id, student_source(task), speed=False)
        assert v.points == 0 and "CRASH" not in v.text, v.text

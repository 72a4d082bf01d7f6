"""Chapter 10's exercises: the numbers of a cross-entropy over a large vocabulary, and the fused forward and
backward kernel, graded on the grader's shapes (CPU: the registry, the answers, the notebooks, the builds;
GPU: the reference solution gets full marks and realistic mistakes get none)."""
from __future__ import annotations

import math

import pytest

from labkit.grading import ch10 as G
from labkit.grading import check_answers, grade
from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.measure.compile import compile_check
from labkit.paths import LABS

from exercise_sources import edit as _edit, solution_source, student_source

pytestmark = pytest.mark.chapter("10")

LAB = LABS / "10-recap"
SOLUTION = LAB / N.SOLUTION_NAME
STUDENT = LAB / N.STUDENT_NAME
NUM, CE = T.get("10.numbers"), T.get("10.cross_entropy")


def test_the_registry_finds_the_two_tasks():
    assert [t.id for t in T.for_chapter("10")] == ["10.numbers", "10.cross_entropy"]
    assert isinstance(NUM, T.NumericTask) and len(NUM.questions) == 6
    assert CE.speed_threshold == G.CE_SPEED_PCT and CE.max_points == 6 and T.norm_shape(CE.speed_shape) == G.SPEED_SHAPE
    assert [o[0] for o in CE.outputs((3, 7))] == ["grad", "loss"]


def test_the_expected_answers():
    got = {q.key: q.expected for q in NUM.questions}
    from labkit.chapters import ch10
    assert got["floor_gb"] == pytest.approx(ch10.ce_bytes(4096, 128256) / 1e9, rel=1e-4)
    assert got["blocks_per_sm_fit"] == 1 and got["rows_in_flight_mb"] == pytest.approx(33.86, abs=0.01)
    assert got["merged_lse"] == pytest.approx(math.log(math.exp(2) * 3 + math.exp(5)))


def test_numeric_answers_of_the_solution_score_full_marks_and_the_students_none():
    sol = N.extract_answers(N.read_notebook(SOLUTION), NUM.id, NUM.answers_var)
    v = check_answers(NUM.id, sol)
    assert v.passed and v.points == len(NUM.questions), v.text
    stu = N.extract_answers(N.read_notebook(STUDENT), NUM.id, NUM.answers_var)
    assert set(stu) == {q.key for q in NUM.questions} and check_answers(NUM.id, stu).points == 0


def test_wrong_answers_are_rejected():
    right = {q.key: q.expected for q in NUM.questions}
    # the gradient counted as read-and-written on top of a second read; two rows per SM taken to fit; the two
    # sums added without rescaling; the gradient not averaged
    wrong = {"floor_gb": 1.5 * right["floor_gb"], "blocks_per_sm_fit": 2, "merged_lse": 5 + math.log(4),
             "grad_at_target": 0.25 - 1}
    v = check_answers(NUM.id, {**right, **wrong})
    assert v.points == len(right) - len(wrong), v.text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_solution_builds_without_spills_and_the_starter_builds(arch):
    assert compile_check(solution_source(CE), arch).functions[CE.kernel].spills == 0
    compile_check(student_source(CE), arch)


def test_the_student_view_is_in_step_and_holds_no_solution():
    text = STUDENT.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "hidden=True" not in text
    assert text == N.release_text(SOLUTION)


def test_the_notebook_states_the_speed_bar_and_the_contract():
    md = "".join(c["source"] for c in N.read_notebook(SOLUTION)["cells"] if c["cell_type"] == "markdown")
    assert f"at least **{G.CE_SPEED_PCT:.0f}% of `cupy.copyto`**" in md, "update the notebook with the bar"
    assert CE.signature in md


def test_targets_hold_both_ends_and_ignored_rows():
    t = G.targets((30, 50), 1)
    assert t[0] == 0 and t[1] == 49 and (t[3::7] == G.IGNORE_INDEX).all() and (t == G.IGNORE_INDEX).sum() == 4
    assert G.scale_of((30, 50), 1) == pytest.approx(1 / 26)
    for seed in (1, 2):
        shapes = CE.draw_hidden(seed)
        assert (1, 1_000_003) in shapes and (33, 50257) in shapes and any(v % 8 for _, v in shapes)


# ------------------------------------------------------------------------------------------------ GPU

def wrong(kind: str) -> str:
    s = solution_source(CE)
    if kind == "no_ignore":         # the ignored rows' gradient and loss computed as if t were a class
        s = _edit(s, "    const bool ignored = t == -100;\n", "    const bool ignored = false;\n")
        return _edit(s, "lse - bf16_to_float(xr[t])", "lse - (t >= 0 ? bf16_to_float(xr[t]) : 0.0f)")
    if kind == "no_empty_guard":    # two empty parts merged: exp(-inf - -inf) = NaN
        return _edit(s, "    if (m == NEG_INF) return {NEG_INF, 0.0f};          // exp(-inf - -inf) would be NaN\n", "")
    if kind == "no_onehot":         # the softmax alone
        return _edit(s, "- (j == t)) * scale)", ") * scale)").replace("- (j == t)) * scale", ") * scale").replace(
            "- (j + 1 == t)) * scale", ") * scale")
    if kind == "no_scale":          # the gradient of the sum, not the mean
        return s.replace(") * scale", ")")
    raise KeyError(kind)


WRONG = ["no_ignore", "no_empty_guard", "no_onehot", "no_scale"]


def test_the_verdict_of_the_reference_outputs_is_clean_and_a_wrong_row_is_named():
    # the grader's check, on NumPy outputs: the loss and gradient of the fp64 reference pass (loss_mean is
    # no output of the exercise's kernel, so it must not be asked for), a loss off by 1% does not
    import numpy as np
    from labkit.chapters import ch10
    from labkit.measure import bf16
    shape = (9, 40)
    x = bf16.to_bits(np.random.default_rng(3).normal(0, 3, shape).astype(np.float32))
    t = G.targets(shape, 5)
    check = G._ce_verify({"x": (x, "bf16"), "target": (t, "i32")}, None)
    loss, _, grad, _ = ch10.reference(x, t)
    outs = {"grad": bf16.to_bits(grad.astype(np.float32)), "loss": loss.astype(np.float32)}
    assert check(outs) is None
    outs["loss"][4] *= 1.01
    assert check(outs).startswith("loss: 1 of 9 rows wrong; first row 4")


def test_the_wrong_kernels_compile():
    for kind in WRONG:
        src = wrong(kind)
        assert src != solution_source(CE), kind
        compile_check(src, "sm_90")


@pytest.mark.gpu
def test_the_reference_solution_gets_full_marks():
    v = grade(CE.id, solution_source(CE))
    assert v.passed and "FAIL" not in v.text, v.text
    v = grade(CE.id, solution_source(CE), hidden=True, seed=2026)
    assert v.passed, v.text


@pytest.mark.gpu
@pytest.mark.parametrize("kind", WRONG)
def test_wrong_kernels_fail(kind):
    v = grade(CE.id, wrong(kind), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text


@pytest.mark.gpu
def test_the_starter_fails_cleanly():
    v = grade(CE.id, student_source(CE), speed=False)
    assert "correctness: FAIL" in v.text and v.points == 0, v.text

"""Numeric questions: tolerance, points, and feedback that names the part that is off."""
from __future__ import annotations

import pytest

from labkit.grading import check_answers
from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.grading.answers import diagnose
from labkit.paths import LABS


def test_right_answers_full_points():
    v = check_answers("01.numbers", {"add_bytes": 3 * 2 * 2 ** 28, "add_flop_per_byte": 1 / 6,
                                     "add_floor_us": 335.5, "gemm_flops": 2 * 4096 ** 3,
                                     "gemm_bytes": 3 * 4096 ** 2 * 2, "gemm_flop_per_byte": 1365.3,
                                     "gemm_compute_bound": True, "softmax_bytes": 2 * 4 * 8192 ** 2})
    assert v.passed and v.points == 8 and v.text.endswith("points: 8/8"), v.text


def test_feedback_says_which_part_is_off():
    v = check_answers("01.numbers", {"add_bytes": 2 * 2 * 2 ** 28, "add_flop_per_byte": 1 / 3,
                                     "add_floor_us": 335.5e-6, "gemm_compute_bound": 0, "softmax_bytes": "a lot"})
    lines = {ln.split()[0]: ln for ln in v.text.splitlines()[1:-1]}
    assert "too low by a factor of 3/2" in lines["add_bytes"] and "count every tensor" in lines["add_bytes"]
    assert "too high by a factor of 2" in lines["add_flop_per_byte"]
    assert "factor of 1e6: check the units" in lines["add_floor_us"]
    assert "off: got 0, 0 is not right" in lines["gemm_compute_bound"]
    assert "not a number: 'a lot'" in lines["softmax_bytes"]
    assert "no answer yet" in lines["gemm_flops"]
    assert v.points == 0 and len(v.lost) == 8
    assert "335.54" not in v.text and "1610612736" not in v.text   # the expected figures are not revealed


def test_tolerance_is_relative():
    assert check_answers("01.numbers", {"add_floor_us": 335.54 * 1.019}).points == 1
    assert check_answers("01.numbers", {"add_floor_us": 335.54 * 1.03}).points == 0
    assert check_answers("01.numbers", {"gemm_flops": 2 * 4096 ** 3 + 10 ** 4}).points == 0   # counts: all but exact


def test_unknown_keys_are_noted():
    v = check_answers("02.numbers", {"blocks_65537": 257, "blocks": 3})
    assert "keys not asked for (typo?): blocks" in v.text and v.points == 1


@pytest.mark.parametrize("got, expected, words", [
    (200, 100, "too high by a factor of 2"), (50, 100, "too low by a factor of 2"), (110, 100, "too high by 10%"),
    (100e3, 100, "factor of 1e3: check the units"), (-100, 100, "the sign"), (750, 100, "factor of 7.5"),
])
def test_diagnose(got, expected, words):
    assert words in diagnose(got, expected)


def test_the_solution_notebooks_answers_are_right_and_the_students_empty():
    for src in N.solution_notebooks(LABS):
        sol, stu = N.read_notebook(src), N.read_notebook(src.parent / N.STUDENT_NAME)
        for t in T.for_chapter(N.chapter_of(sol)):
            if isinstance(t, T.NumericTask):
                v = check_answers(t.id, N.extract_answers(sol, t.id, t.answers_var))
                assert v.passed, v.text
                assert check_answers(t.id, N.extract_answers(stu, t.id, t.answers_var)).points == 0

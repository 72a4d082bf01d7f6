"""The verdict text: deterministic, names the shape, the first wrong index, expected and got; speed
figures inside the one pattern the nbval sanitize file replaces."""
from __future__ import annotations

import re

from labkit.grading import grade
from labkit.grading import tasks as T
from labkit.grading.verdict import (SPEED_PATTERN, CaseResult, RunResult, SpeedResult, sanitize, score)
from labkit.paths import LABS

COPY = T.get("01.copy_probe")
ADD = T.get("02.add_any_n")


def run_of(task, statuses, hidden=(), speed=None, speed_case=True):
    cases = task.cases(speed=speed_case) + task.cases(list(hidden), hidden=True)
    res = RunResult(task.id, [CaseResult(c.label, c.hidden, c.role) for c in cases], speed=speed)
    for c, (st, detail) in zip(res.cases, statuses):
        c.status, c.detail = st, detail
    return res


def test_all_right_and_fast():
    sp = SpeedResult("measured", "n=134217728 (speed shape)", kernel_ms=0.2670, copy_ms=0.2598, bytes=8 * 2 ** 27)
    v = score(COPY, run_of(COPY, [("ok", "")] * 6, speed=sp), speed_requested=True)
    assert v.text == """01.copy_probe: A grid-stride copy probe
  n=0                        ok
  n=1                        ok
  n=3                        ok
  n=1000                     ok
  n=1000003                  ok
  n=134217728 (speed shape)  ok
correctness: PASS, 6 of 6 shapes   3/3
speed: PASS [97.3% of copy: 4022 vs 4133 GB/s, 0.2670 ms], needs 85% of copy   2/2
points: 5/5 (public tests; hidden tests add 1 more)"""
    assert v.points == 5 and v.passed and not v.lost
    assert "speed: PASS [SPEED], needs 85%" in sanitize(v.text)


def test_wrong_element_names_shape_index_expected_got():
    mism = "1 of 1000 elements wrong; first at [999]: expected 0.5, got nan"
    v = score(COPY, run_of(COPY, [("ok", "")] * 3 + [("wrong", mism), ("ok", ""), ("ok", "")]), speed_requested=True)
    assert "  n=1000                     FAIL: " + mism in v.text
    assert "correctness: FAIL, 5 of 6 shapes right   0/3" in v.text
    assert "speed: not measured: the kernel must be correct first   0/2" in v.text
    assert v.lost == ["-3 correctness: n=1000: FAIL: " + mism, "-2 speed: not measured (the kernel is not correct)"]
    assert v.points == 0


def test_slow_kernel_loses_the_speed_points_with_the_figure():
    sp = SpeedResult("measured", "x", kernel_ms=0.6105, copy_ms=0.2570, bytes=8 * 2 ** 27)
    v = score(COPY, run_of(COPY, [("ok", "")] * 6, speed=sp), speed_requested=True)
    assert re.search(r"speed: FAIL \[42\.1% of copy: \d+ vs \d+ GB/s, 0\.6105 ms\], needs 85% of copy   0/2", v.text)
    assert v.lost == ["-2 speed: 42.1% of copy bandwidth, needs 85%"] and v.points == 3


def test_crash_and_time_limit_messages():
    crash = "the kernel crashed: cudaErrorIllegalAddress: an illegal memory access was encountered"
    res = run_of(COPY, [("ok", ""), ("fault", crash)] + [("notrun", "after the crash above")] * 4)
    v = score(COPY, res, speed_requested=True)
    assert "  n=1                        CRASH: " + crash in v.text
    assert "  n=3                        not run: after the crash above" in v.text
    assert "your notebook and its GPU state are unaffected" in v.text
    res = run_of(COPY, [("ok", ""), ("timeout", "no result within 10 s; the kernel was stopped")]
                 + [("notrun", "after the time limit above")] * 4)
    v = score(COPY, res, speed_requested=True)
    assert "TIME LIMIT: no result within 10 s; the kernel was stopped" in v.text
    assert "an endless loop" in v.text and v.points == 0


def test_compile_error_without_traceback():
    res = RunResult(COPY.id, [], compile_error='kernel.cu line 4: identifier "j" is undefined\n'
                                                '       4 |     y[i] = x[j];')
    v = score(COPY, res, speed_requested=True)
    assert v.text.splitlines()[1:] == ["compile error:", '  kernel.cu line 4: identifier "j" is undefined',
                                       "         4 |     y[i] = x[j];", "points: 0/2"]
    assert "Traceback" not in v.text


def test_hidden_and_info_speed():
    sp = SpeedResult("measured", "x", kernel_ms=0.7602, copy_ms=0.3824, bytes=6 * 2 ** 28)
    res = run_of(ADD, [("ok", "")] * 7 + [("wrong", "3 of 2147483651 output elements never written; "
                                                    "first: [2147483648]")], hidden=[2 ** 31 + 3], speed=sp)
    v = score(ADD, res, speed_requested=True)
    assert "  hidden: n=2147483651       FAIL: 3 of 2147483651" in v.text
    assert "hidden tests: FAIL, 0 of 1 shapes right   0/2" in v.text
    assert "(for information: this exercise has no speed points)" in v.text
    assert v.points == 3 and v.max_points == 5
    assert v.lost == ["-2 hidden tests: n=2147483651: FAIL: 3 of 2147483651 output elements never written; "
                      "first: [2147483648]"]


def test_hidden_points_without_hidden_cases_go_with_the_public_ones():
    res = run_of(COPY, [("ok", "")] * 5, speed_case=False)
    v = score(COPY, res, speed_requested=False, hidden_without_cases=True)
    assert v.points == v.max_points == 4 and "no hidden tests" in v.text


def test_a_case_not_run_earns_nothing():
    """A shape too large for the GPU is "not graded": reported with what it needs, never as points."""
    res = run_of(ADD, [("ok", "")] * 6 + [("skipped", "n=2147483651 needs about 52 GB of GPU memory, 40 GB are "
                                                      "free on this GPU")], hidden=[2 ** 31 + 3], speed_case=False)
    v = score(ADD, res, speed_requested=False)
    assert v.points == 3 and v.max_points == 5, v.text
    assert "hidden tests: NOT GRADED, 1 of 1 shapes not run (GPU memory)   0/2" in v.text
    assert v.lost == ["-2 hidden tests: n=2147483651: NOT GRADED: n=2147483651 needs about 52 GB of GPU memory, "
                      "40 GB are free on this GPU"]
    assert "not graded, so their points are not given" in v.text
    # a not-graded public case costs the public points too, and the speed points with them
    res = run_of(COPY, [("skipped", "n=0 needs ...")] + [("ok", "")] * 5,
                 speed=SpeedResult("measured", "x", kernel_ms=0.27, copy_ms=0.26, bytes=8 * 2 ** 27))
    assert score(COPY, res, speed_requested=True).points == 0


def test_max_points_is_computed_once():
    from labkit.grading.verdict import max_points
    assert max_points(COPY, public=True, hidden=True, speed=True) == 6
    assert max_points(COPY, public=True, hidden=True, speed=False) == 4
    assert max_points(ADD, public=True, hidden=True, speed=True) == 5       # no speed points in this task
    assert max_points(T.get("01.numbers")) == 8
    for hidden in (False, True):
        for speed in (False, True):
            res = run_of(COPY, [("ok", "")] * 7, hidden=[7] if hidden else [], speed_case=speed)
            assert score(COPY, res, speed_requested=speed).max_points == max_points(
                COPY, public=True, hidden=hidden, speed=speed)


def test_same_result_same_text():
    a = score(COPY, run_of(COPY, [("ok", "")] * 6), speed_requested=False).text
    b = score(COPY, run_of(COPY, [("ok", "")] * 6), speed_requested=False).text
    assert a == b


def test_sanitize_file_matches_the_speed_pattern():
    cfg = (LABS / "nbval-sanitize.cfg").read_text()
    pairs = re.findall("^regex: (.*)$\n^replace: (.*)$", cfg, flags=re.MULTILINE)   # as nbval reads it
    assert pairs == [(SPEED_PATTERN, "[SPEED]")]
    fig = SpeedResult("measured", "x", kernel_ms=1.5, copy_ms=0.75, bytes=10 ** 9).figure()
    assert re.sub(pairs[0][0], pairs[0][1], f"speed: FAIL {fig}, needs") == "speed: FAIL [SPEED], needs"
    fig = SpeedResult("measured", "x", kernel_ms=0.01, copy_ms=0.0101, bytes=10 ** 8).figure()
    assert re.fullmatch(SPEED_PATTERN, fig), fig


COPY_COMPILE_ERROR = '''extern "C" __global__ void copy_probe(const float* x, float* y, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[j];
}
'''


def test_grade_reports_a_compile_error_with_the_learners_line():
    """Runs with or without a GPU (without one, NVRTC compiles it in the notebook's process)."""
    v = grade("01.copy_probe", COPY_COMPILE_ERROR)
    assert "compile error:" in v.text and 'line 4: identifier "j" is undefined' in v.text
    assert "if (i < n) y[i] = x[j];" in v.text and v.points == 0


def test_grade_names_a_missing_kernel():
    v = grade("01.copy_probe", COPY_COMPILE_ERROR.replace("copy_probe", "copy").replace("x[j]", "x[i]"))
    assert "no kernel named 'copy_probe'" in v.text and "found: copy" in v.text

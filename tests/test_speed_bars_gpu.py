"""GPU test of every exercise's speed bar: the reference solution, graded three times in a row on this GPU,
clears its bar each time with a margin that run-to-run noise does not eat.

A bar set from one lucky run of the reference fails honest learners on another day; this test is what keeps
the bars where the instructors' page says they are set (from the measured reference, with a margin). Each
run's figure is printed, so `gpu-check --chapter NN` leaves the spread in its log.
"""
from __future__ import annotations

import re

import pytest

from labkit.grading import grade
from labkit.grading import tasks as T

from exercise_sources import solution_source

RUNS = 3
MARGIN_POINTS = 5.0          # the slowest of the runs at least this many points of % above the bar
FIGURE = re.compile(r"^speed: (PASS|FAIL) \[(?P<pct>[\d.]+)% of ", re.M)


def speed_tasks():
    out = []
    for tid, task in sorted(T.all_tasks().items()):
        if isinstance(task, T.KernelTask) and task.speed_threshold:
            out.append(pytest.param(tid, id=tid, marks=[pytest.mark.gpu, pytest.mark.chapter(task.chapter)]))
    return out


def test_every_speed_bar_is_tested():
    """The list below is not empty and names the tasks the notebooks grade for speed (a CPU check)."""
    ids = [p.values[0] for p in speed_tasks()]
    assert "01.copy_probe" in ids and len(ids) >= 8, ids


@pytest.mark.parametrize("task_id", speed_tasks())
def test_the_reference_clears_its_speed_bar_with_margin(task_id, capsys):
    task = T.get(task_id)
    src = solution_source(task)
    figures = []
    for _ in range(RUNS):
        v = grade(task_id, src, speed=True)
        m = FIGURE.search(v.text)
        assert m, v.text
        figures.append(float(m["pct"]))
    with capsys.disabled():
        print(f"\n{task_id}: reference at {', '.join(f'{x:.1f}' for x in figures)} % of "
              f"{task.baseline_name or 'copy'}, bar {task.speed_threshold:g}%")
    assert min(figures) >= task.speed_threshold + MARGIN_POINTS, (
        f"{task_id}: the reference reached {figures} % against a bar of {task.speed_threshold}%: "
        f"set the bar at least {MARGIN_POINTS} points under the slowest run")

"""Numeric questions: each answer checked against the expected figure with a relative tolerance, and
feedback that says which part is off (too high by a factor of 2, off by 1000: the units) without giving
the expected figure away."""
from __future__ import annotations

import math

from .extract import NotStatic
from .verdict import Verdict


def _g(v: float) -> str:
    return f"{v:.6g}"


def diagnose(got: float, expected: float) -> str:
    """How `got` is off from `expected`, in words that do not reveal `expected`."""
    if expected == 0:
        return "should be 0"
    if got == 0:
        return "0 is not right"
    r = got / expected
    if r < 0:
        return "the sign is wrong"
    direction = "too high" if r > 1 else "too low"
    f = r if r > 1 else 1 / r
    k = round(math.log10(f))
    if k >= 3 and abs(math.log10(f) - k) < 0.01 and k % 3 == 0:
        return f"{direction} by a factor of 1e{k}: check the units (bytes vs KB/MB/GB, s vs ms vs us)"
    if abs(f - round(f)) < 0.01 * f and round(f) >= 2:
        return f"{direction} by a factor of {round(f)}"
    for num, den in ((3, 2), (4, 3), (5, 4), (2, 3), (8, 3)):
        if abs(f - num / den) < 0.005 * f:
            return f"{direction} by a factor of {num}/{den}"
    return f"{direction} by {100 * (f - 1):.0f}%" if f < 2 else f"{direction} by a factor of {f:.1f}"


def check(task, answers: dict) -> Verdict:
    """Score an answers dict for a NumericTask: one point per question within its tolerance."""
    if not isinstance(answers, dict):
        answers = {}
        note = ["the answers must be a dict {question key: number}"]
    else:
        note = []
    lines = [f"{task.id}: {task.title}"]
    width = max(len(q.key) for q in task.questions) + 2
    points, lost = 0, []
    for q in task.questions:
        got = answers.get(q.key, None)
        if isinstance(got, bool):
            got = int(got)
        if got is None or got is Ellipsis:
            status, why = "no answer yet", "no answer"
        elif isinstance(got, NotStatic):
            status = why = str(got)
        elif not isinstance(got, (int, float)) or isinstance(got, float) and not math.isfinite(got):
            status = why = f"not a number: {got!r}"
        elif (abs(got - q.expected) <= q.rtol * abs(q.expected)) if q.rtol else got == q.expected:
            status, why = "ok", None
        else:
            d = diagnose(float(got), float(q.expected))
            status = f"off: got {_g(got)}{(' ' + q.unit) if q.unit else ''}, {d}; recheck: {q.hint}"
            why = f"got {_g(got)}, {d}"
        if why is None:
            points += 1
        else:
            lost.append(f"-1 {q.key}: {why}")
        lines.append(f"  {q.key:<{width}}{status}")
    extra = sorted(set(answers) - {q.key for q in task.questions}, key=str)
    if extra:
        note.append("keys not asked for (typo?): " + ", ".join(map(str, extra)))
    lines += [f"note: {n}" for n in note]
    lines.append(f"points: {points}/{len(task.questions)}")
    return Verdict(task.id, "\n".join(lines), points, len(task.questions), lost, note)

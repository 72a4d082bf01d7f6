"""What a grading run found (plain data, passed from the worker to the parent), and the verdict text.

The verdict is deterministic text: the same kernel gets the same words on every run, so nbval can compare
it. The only figures that vary, the speed measurement, sit inside one bracketed pattern, against a copy of
the same bytes `[97.3% of copy: 4021 vs 4131 GB/s, 0.2670 ms]` or against a library run on the same inputs
`[71.2% of cuBLAS fp32: 36.6 vs 51.4 TFLOP/s, 3.752 ms]`, that labs/nbval-sanitize.cfg (SPEED_PATTERN
below) replaces before comparing.
"""
from __future__ import annotations

import dataclasses
import re

SPEED_PATTERN = r"\[\d+\.\d% of [^:\[\]]+: \d+(?:\.\d+)? vs \d+(?:\.\d+)? (?:GB|TFLOP)/s, \d+\.\d+ ms\]"
SPEED_REPLACEMENT = "[SPEED]"

OK, WRONG, FAULT, TIMEOUT, SKIPPED, NOTRUN, ERROR = "ok", "wrong", "fault", "timeout", "skipped", "notrun", "error"
PASSING = (OK,)          # a case not run (SKIPPED: "not graded", NOTRUN) never earns points


@dataclasses.dataclass
class CaseResult:
    label: str
    hidden: bool = False
    role: str = "check"
    status: str = NOTRUN
    detail: str = ""


@dataclasses.dataclass
class SpeedResult:
    status: str                     # "measured", "skipped", "timeout", "fault", "error"
    label: str = ""
    kernel_ms: float = 0.0
    copy_ms: float = 0.0            # the baseline's median: cupy.copyto on the same bytes, or the library
    bytes: int = 0
    detail: str = ""
    baseline: str = "copy"          # "copy", or the library's name (the task's baseline_name)
    flops: float = 0.0              # FLOPs of the speed shape: a library baseline's rates are TFLOP/s

    @property
    def pct(self) -> float:
        return 100.0 * self.copy_ms / self.kernel_ms if self.kernel_ms > 0 else 0.0

    @property
    def kernel_gbps(self) -> float:
        return self.bytes / (self.kernel_ms * 1e-3) / 1e9 if self.kernel_ms > 0 else 0.0

    @property
    def copy_gbps(self) -> float:
        return self.bytes / (self.copy_ms * 1e-3) / 1e9 if self.copy_ms > 0 else 0.0

    @property
    def kernel_tflops(self) -> float:
        return self.flops / (self.kernel_ms * 1e-3) / 1e12 if self.kernel_ms > 0 else 0.0

    @property
    def baseline_tflops(self) -> float:
        return self.flops / (self.copy_ms * 1e-3) / 1e12 if self.copy_ms > 0 else 0.0

    def figure(self) -> str:
        """The measured figures, in the one pattern the nbval sanitize file replaces: GB/s against the copy
        (or a library without FLOPs), TFLOP/s against a library that does the task's FLOPs."""
        if self.baseline != "copy" and self.flops > 0:
            return (f"[{self.pct:.1f}% of {self.baseline}: {self.kernel_tflops:.1f} vs {self.baseline_tflops:.1f} "
                    f"TFLOP/s, {self.kernel_ms:.3f} ms]")
        return (f"[{self.pct:.1f}% of {self.baseline}: {self.kernel_gbps:.0f} vs {self.copy_gbps:.0f} GB/s, "
                f"{self.kernel_ms:.4f} ms]")


@dataclasses.dataclass
class RunResult:
    task_id: str
    cases: list
    speed: SpeedResult | None = None
    compile_error: str | None = None
    crash: str | None = None        # a failure outside any case: start-up, compile time limit, grader error


@dataclasses.dataclass
class Verdict:
    task_id: str
    text: str
    points: float
    max_points: int
    lost: list                      # "-3 correctness: n=257: ..." one per lost item
    notes: list = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.points == self.max_points

    def __str__(self):
        return self.text

    def _repr_pretty_(self, p, cycle):
        p.text(self.text)


def _status_text(c: CaseResult) -> str:
    word = {OK: "ok", WRONG: "FAIL", FAULT: "CRASH", TIMEOUT: "TIME LIMIT", SKIPPED: "NOT GRADED",
            NOTRUN: "not run", ERROR: "GRADER ERROR"}[c.status]
    return f"{word}: {c.detail}" if c.detail else word


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else s


def has_speed_points(task, speed: bool) -> bool:
    """Whether a run of `task` timed (speed=True) can earn speed points."""
    return bool(getattr(task, "speed_threshold", None)) and getattr(task, "points_speed", 0) > 0 and bool(speed)


def max_points(task, *, public: bool = True, hidden: bool = False, speed: bool = False) -> int:
    """The most a run of `task` can earn, given what is graded: its public shapes, its hidden shapes, its
    speed. The one place this is computed (the verdict and the batch CSV both use it)."""
    if not hasattr(task, "points_correct"):              # a NumericTask
        return task.max_points
    return ((task.points_correct if public else 0) + (task.points_hidden if hidden else 0)
            + (task.points_speed if has_speed_points(task, speed) else 0))


def score(task, run: RunResult, *, speed_requested: bool, hidden_without_cases: bool = False) -> Verdict:
    """Points and verdict text for one task's run.

    speed_requested: the run was asked to time the kernel (the speed points are part of its maximum).
    hidden_without_cases: count the hidden points as part of the maximum even though no hidden case ran
    (then they are awarded with the public correctness).
    """
    cases = run.cases
    public = [c for c in cases if not c.hidden]
    hidden = [c for c in cases if c.hidden]
    speed_points = has_speed_points(task, speed_requested)
    total_max = max_points(task, public=bool(public), hidden=bool(hidden) or hidden_without_cases,
                           speed=speed_requested)
    max_points_ = total_max
    lines = [f"{task.id}: {task.title}"]
    lost, notes = [], []

    if run.compile_error is not None or run.crash is not None:
        if run.compile_error is not None:
            lines.append("compile error:")
            lines += ["  " + ln for ln in run.compile_error.strip().splitlines()]
            why = "compile error: " + _first_line(run.compile_error)
        else:
            lines.append(f"not graded: {run.crash}")
            why = run.crash
        if max_points_:
            lost.append(f"-{max_points_} {why}")
        lines.append(f"points: 0/{max_points_}")
        return Verdict(task.id, "\n".join(lines), 0, max_points_, lost, notes)

    width = max(len(c.label) + (9 if c.hidden else 0) for c in cases) + 2 if cases else 0
    for c in cases:
        label = ("hidden: " + c.label) if c.hidden else c.label
        lines.append(f"  {label:<{width}}{_status_text(c)}")
    if any(c.status == FAULT for c in cases) or (run.speed and run.speed.status == "fault"):
        notes.append("the kernel ran in a separate worker process, which stopped; your notebook and its GPU "
                     "state are unaffected, and the next grade starts a fresh worker")
    elif any(c.status == TIMEOUT for c in cases) or (run.speed and run.speed.status == "timeout"):
        notes.append("the worker running the kernel was stopped at the time limit (an endless loop, or a wait "
                     "on something that never happens?); your notebook is unaffected")
    skipped = [c for c in cases if c.status == SKIPPED]
    if skipped:
        notes.append(f"{len(skipped)} shape(s) not graded, so their points are not given (grade them on a GPU "
                     "with more memory): " + skipped[0].detail)

    points = 0

    def correctness(name, group, pts):
        nonlocal points
        bad = [c for c in group if c.status not in PASSING]
        right = sum(c.status == OK for c in group)
        if not bad:
            points += pts
            lines.append(f"{name}: PASS, {right} of {len(group)} shapes   {pts}/{pts}")
            return True
        if all(c.status == SKIPPED for c in bad):
            lines.append(f"{name}: NOT GRADED, {len(bad)} of {len(group)} shapes not run (GPU memory)   0/{pts}")
        else:
            lines.append(f"{name}: FAIL, {right} of {len(group)} shapes right   0/{pts}")
        wrong = [c for c in bad if c.status != SKIPPED]
        first = (wrong or bad)[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        lost.append(f"-{pts} {name}: {first.label}: {_status_text(first)}{more}")
        return False

    ok_public = correctness("correctness", public, task.points_correct) if public else True
    ok_hidden = correctness("hidden tests", hidden, task.points_hidden) if hidden else True
    if not hidden and hidden_without_cases:
        if ok_public:
            points += task.points_hidden
            notes.append("no hidden tests for this exercise in the solution notebook: its hidden points go "
                         "with the public shapes")
        else:
            lost.append(f"-{task.points_hidden} hidden: awarded only with the public shapes passing")

    sp = _against(task, run.speed)
    if task.speed_threshold is None and sp is not None and sp.status == "measured":
        lines.append(f"speed: {sp.figure()} (for information: this exercise has no speed points)")
    elif speed_points:
        p = task.points_speed
        if not (ok_public and ok_hidden):
            lines.append(f"speed: not measured: the kernel must be correct first   0/{p}")
            lost.append(f"-{p} speed: not measured (the kernel is not correct)")
        elif sp is None or sp.status != "measured":
            why = sp.detail if sp is not None and sp.detail else "not measured"
            lines.append(f"speed: {why}   0/{p}")
            lost.append(f"-{p} speed: {why}")
        else:
            base = getattr(task, "baseline_name", "copy")
            needs = f"needs {task.speed_threshold:.0f}% of {base}"
            if sp.pct >= task.speed_threshold:
                points += p
                lines.append(f"speed: PASS {sp.figure()}, {needs}   {p}/{p}")
            else:
                lines.append(f"speed: FAIL {sp.figure()}, {needs}   0/{p}")
                what = "copy bandwidth" if base == "copy" else base
                lost.append(f"-{p} speed: {sp.pct:.1f}% of {what}, needs {task.speed_threshold:.0f}%")

    tail = f"points: {points}/{max_points_}"
    if public and not hidden and not hidden_without_cases and task.points_hidden:
        tail += f" (public tests; hidden tests add {task.points_hidden} more)"
    lines += [f"note: {n}" for n in notes]
    lines.append(tail)
    return Verdict(task.id, "\n".join(lines), points, max_points_, lost, notes)


def _against(task, sp: SpeedResult | None) -> SpeedResult | None:
    """A measured SpeedResult of a task timed against a library (its `speed_baseline`), with the library's
    name and the speed shape's FLOPs filled in (the figure is then in TFLOP/s); else `sp` as it is."""
    if sp is None or sp.status != "measured" or getattr(task, "speed_baseline", None) is None:
        return sp
    from .tasks import norm_shape
    flops = float(task.flops(norm_shape(task.speed_shape))) if task.speed_shape is not None else 0.0
    return dataclasses.replace(sp, baseline=task.baseline_name, flops=flops)


def sanitize(text: str) -> str:
    """The verdict with the varying speed figures replaced, as nbval's sanitize file does it."""
    return re.sub(SPEED_PATTERN, SPEED_REPLACEMENT, text)

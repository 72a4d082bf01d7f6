"""The instructor's batch grader: a folder of submitted notebooks -> a CSV of points and reasons.

Each submission is read statically (its chapter from metadata.labkit.exercises, each exercise's CUDA
source from the last string literal assigned to the exercise's variable, numeric answers from a dict
literal); nothing in it is executed in this process. Kernels run in worker processes with per-shape time
limits and one overall limit per submission; a crash, a hang or even a grader bug in one submission
becomes a row in the CSV and the batch goes on. Hidden tests come from the solution notebooks: the
`shapes=[...]` of the grade(...) calls inside their hidden-test regions.
"""
from __future__ import annotations

import csv
import dataclasses
import time
import traceback
from pathlib import Path

from . import notebook as N
from . import tasks as T

CSV_FIELDS = ("submission", "chapter", "exercise", "points", "max_points", "lost", "notes")


@dataclasses.dataclass
class Row:
    submission: str
    chapter: str
    exercise: str
    points: float
    max_points: int
    lost: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    text: str = ""          # the full verdict, for the feedback files

    def csv(self) -> dict:
        num = lambda v: int(v) if float(v).is_integer() else v  # noqa: E731
        return {"submission": self.submission, "chapter": self.chapter, "exercise": self.exercise,
                "points": num(self.points), "max_points": self.max_points,
                "lost": " | ".join(self.lost), "notes": " | ".join(self.notes)}


class Solutions:
    """Hidden shapes per chapter, read once from labs/NN-*/exercises.solution.ipynb."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self._cache: dict[str, tuple[dict, str | None]] = {}

    def hidden(self, chapter: str) -> tuple[dict, str | None]:
        """({task id: [shapes]}, a note when the solution notebook is missing or unreadable)."""
        if chapter not in self._cache:
            paths = sorted(self.folder.glob(f"{chapter}-*/{N.SOLUTION_NAME}"))
            if not paths:
                self._cache[chapter] = ({}, f"no solution notebook for chapter {chapter} under {self.folder}: "
                                            "no hidden tests")
            else:
                try:
                    self._cache[chapter] = (N.hidden_shapes(N.read_notebook(paths[0])), None)
                except (N.NotebookFormatError, N.NotStatic) as e:
                    self._cache[chapter] = ({}, f"hidden tests unreadable in {paths[0]}: {e}")
        return self._cache[chapter]


def find_submissions(folder) -> list[Path]:
    folder = Path(folder)
    return sorted(p for p in folder.rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and not p.name.endswith(".solution.ipynb"))


def grade_submission(path: Path, root: Path, solutions: Solutions, *, timeout: float, speed: bool = True,
                     runner=None, chapter: str | None = None) -> list[Row]:
    """One row per exercise of the submission's chapter, then a TOTAL row."""
    from .answers import check
    from .runner import run_task
    from .verdict import score
    runner = runner or run_task
    name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    try:
        nb = N.read_notebook(path)
    except N.NotebookFormatError as e:
        return [Row(name, "", "", 0, 0, [str(e)])]
    ch = N.chapter_of(nb) or chapter
    if not ch:
        return [Row(name, "", "", 0, 0, ["cannot tell which chapter: the notebook has no metadata.labkit.exercises "
                                         "(submit the exercises.ipynb of the course, or pass --chapter)"])]
    tasks = T.for_chapter(ch)
    if not tasks:
        return [Row(name, ch, "", 0, 0, [f"no exercises are defined for chapter {ch}"])]
    hidden, hidden_note = solutions.hidden(ch)
    deadline = time.monotonic() + timeout
    rows = []
    for task in tasks:
        if isinstance(task, T.NumericTask):
            try:
                answers = N.extract_answers(nb, task.id, task.answers_var)
            except N.Missing as e:
                rows.append(Row(name, ch, task.id, 0, task.max_points, [f"-{task.max_points} {e}"]))
                continue
            v = check(task, answers)
            rows.append(Row(name, ch, task.id, v.points, v.max_points, v.lost, v.notes, v.text))
            continue
        task_speed = speed and bool(task.speed_threshold) and task.points_speed > 0
        hshapes = hidden.get(task.id, [])
        max_pts = task.points_correct + task.points_hidden + (task.points_speed if task_speed else 0)
        try:
            source = N.extract_source(nb, task.source_var)
        except N.Missing as e:
            rows.append(Row(name, ch, task.id, 0, max_pts, [f"-{max_pts} {e}"]))
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            rows.append(Row(name, ch, task.id, 0, max_pts,
                            [f"-{max_pts} the submission's time limit ({timeout:.0f} s) ran out before this exercise"]))
            continue
        cases = task.cases(None, speed=task_speed) + task.cases(hshapes, hidden=True)
        run = runner(task, source, cases, speed=task_speed, total_timeout=remaining)
        v = score(task, run, speed_requested=task_speed, hidden_without_cases=not hshapes)
        notes = list(v.notes) + ([hidden_note] if hidden_note and not hshapes else [])
        rows.append(Row(name, ch, task.id, v.points, v.max_points, v.lost, notes, v.text))
    total = Row(name, ch, "TOTAL", sum(r.points for r in rows), sum(r.max_points for r in rows))
    return rows + [total]


def grade_batch(folder, csv_path=None, *, solutions=None, timeout: float = 300.0, speed: bool = True,
                runner=None, progress: bool = True, chapter: str | None = None, feedback=None) -> list[Row]:
    """Grade every notebook under `folder`; write the CSV (and per-submission feedback text files)."""
    from ..paths import LABS
    from tqdm import tqdm
    folder = Path(folder)
    sols = Solutions(solutions if solutions is not None else LABS)
    paths = find_submissions(folder)
    rows: list[Row] = []
    bar = tqdm(paths, desc="grading", unit="submission", disable=not progress, dynamic_ncols=True)
    for path in bar:
        name = str(path.relative_to(folder))
        bar.set_postfix_str(name[-40:])
        try:
            got = grade_submission(path, folder, sols, timeout=timeout, speed=speed, runner=runner,
                                   chapter=chapter)
        except Exception as e:  # a grader bug on one submission must not stop the batch
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            got = [Row(name, "", "", 0, 0, [f"grader error (please report it): {last}"])]
        rows.extend(got)
        if csv_path is not None:       # written after each submission: a stopped batch keeps its rows
            write_csv(rows, csv_path)
        if feedback is not None:
            write_feedback(got, feedback)
    if csv_path is not None:
        write_csv(rows, csv_path)
    return rows


def write_csv(rows, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r.csv())


def write_feedback(rows, folder) -> None:
    """One text file per submission (its path with / replaced by __), all its verdicts."""
    if not rows:
        return
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = rows[0].submission.replace("/", "__").replace("\\", "__")
    parts = []
    for r in rows:
        if r.exercise == "TOTAL":
            parts.append(f"TOTAL: {r.points:g}/{r.max_points}")
        else:
            parts.append(r.text or "\n".join([f"{r.exercise or 'submission'}: {r.points:g}/{r.max_points}"] + r.lost))
    (folder / f"{name}.txt").write_text("\n\n".join(parts) + "\n", encoding="utf-8")

"""What the grader's tests share: a task's reference solution or its student stub, read from its chapter's
notebooks (the one place they live), the one-place edits that make wrong submissions out of a solution, and
the reading of one line of a verdict."""
from __future__ import annotations

from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.paths import LABS


def _source(task, notebook_name: str) -> str:
    task = T.get(task) if isinstance(task, str) else task
    path = next(LABS.glob(f"{task.chapter}-*/{notebook_name}"))
    return N.extract_source(N.read_notebook(path), task.source_var)


def solution_source(task) -> str:
    """The reference solution of `task` (a task or its id) from its chapter's solution notebook."""
    return _source(task, N.SOLUTION_NAME)


def student_source(task) -> str:
    """The stub of `task` that the released student notebook holds."""
    return _source(task, N.STUDENT_NAME)


def edit(src: str, old: str, new: str) -> str:
    """`src` with its one occurrence of `old` replaced: a wrong kernel made from the solution."""
    assert src.count(old) == 1, f"{old!r} is not in the solution exactly once: update this test's edit"
    return src.replace(old, new)


def verdict_line(verdict, start: str) -> str:
    """The verdict's line (stripped) for a shape or summary, e.g. verdict_line(v, "n=257") or (v, "speed:")."""
    for ln in verdict.text.splitlines():
        if ln.strip().startswith(start):
            return ln.strip()
    raise AssertionError(f"no line starting with {start!r} in:\n{verdict.text}")

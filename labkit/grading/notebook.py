"""Exercise notebooks, by concern (this module gathers their names for existing callers):

- `nbio`: reading (bounded, regular files only) and writing notebooks through nbformat;
- `release`: solution regions -> stubs, hidden tests removed, the student view and the student tree;
- `extract`: static reading of a submission (chapter, CUDA sources, answers), nothing executed.
"""
from __future__ import annotations

from .extract import (Missing, NotStatic, chapter_of, code_cells, extract_answers, extract_source,  # noqa: F401
                      graded_tasks, hidden_shapes, is_chapter, parse_cell, safe_eval)
from .nbio import NotebookFormatError, notebook_text, parse_notebook, read_notebook, write_notebook  # noqa: F401
from .release import (BEGIN_HIDDEN, BEGIN_SOLUTION, END_HIDDEN, END_SOLUTION, SOLUTION_NAME,  # noqa: F401
                      STUDENT_NAME, hidden_code, release, release_all, release_text, solution_notebooks,
                      strip_hidden, strip_solutions, stub_line, student_tree)

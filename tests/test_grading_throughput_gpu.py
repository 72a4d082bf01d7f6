"""Submissions per minute on one GPU (the lead runs it: `pytest -m gpu -s tests/test_grading_throughput_gpu.py`):
a class of reference solutions, one per chapter, graded with hidden shapes and speed, on GPU 0 only.
Prints the rate and writes it to $LABKIT_THROUGHPUT_JSON when set."""
from __future__ import annotations

import json
import os
import time

import pytest

from labkit.grading import release as R
from labkit.grading import tasks as T
from labkit.grading.batch import grade_batch, visible_devices
from labkit.grading.extract import extract_answers, extract_source
from labkit.grading.nbio import read_notebook
from labkit.paths import LABS

pytestmark = pytest.mark.gpu

COPIES = int(os.environ.get("LABKIT_THROUGHPUT_COPIES", "2"))


def test_submissions_per_minute_on_one_gpu(tmp_path):
    subs = tmp_path / "subs"
    for sol in R.solution_notebooks(LABS):
        ch = sol.parent.name.split("-")[0]
        nb = read_notebook(sol)
        student = json.loads((sol.parent / R.STUDENT_NAME).read_text())
        for t in T.for_chapter(ch):
            if isinstance(t, T.KernelTask):
                value = extract_source(nb, t.source_var)
                src = f"{t.source_var} = {value!r}\n"
            else:
                src = f"{t.answers_var} = {extract_answers(nb, t.id, t.answers_var)!r}\n"
            student["cells"].append({"cell_type": "code", "execution_count": None, "id": f"t-{t.id}",
                                     "metadata": {}, "outputs": [], "source": src})
        for k in range(COPIES):
            (subs / f"{ch}-{k}").mkdir(parents=True)
            (subs / f"{ch}-{k}" / "exercises.ipynb").write_text(json.dumps(student))
    n = len(list(subs.iterdir()))
    t = time.monotonic()
    rows = grade_batch(subs, tmp_path / "g.csv", seed=1, timeout=900, progress=False, devices=visible_devices()[:1])
    minutes = (time.monotonic() - t) / 60
    rate = n / minutes
    print(f"\n{n} submissions in {minutes * 60:.0f} s on one GPU: {rate:.2f} submissions per minute")
    if os.environ.get("LABKIT_THROUGHPUT_JSON"):
        with open(os.environ["LABKIT_THROUGHPUT_JSON"], "w") as f:
            json.dump({"submissions": n, "seconds": minutes * 60, "per_minute": rate}, f)
    totals = [r for r in rows if r.exercise == "TOTAL"]
    assert len(totals) == n
    lost = [x for r in rows for x in r.lost if "speed" not in x]       # speed depends on the GPU's neighbours
    assert not lost, lost

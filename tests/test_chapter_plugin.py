"""A chapter is a set of files: adding chapter NN's folders and modules, and nothing else, makes every part
of labkit see it (the benchmark suite, the grading registry, provenance, the profiler, the notebook runner
and the book's headline shapes). Shown on a throwaway chapter 99 in a copy of the course."""
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KERNEL = """// Chapter 99, version 1: a throwaway kernel.
extern "C" __global__ void scale99(const float* x, float* y, long long n)
{
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.f * x[i];
}
"""

CHAPTER = '''"""Chapter 99: a throwaway chapter (a test)."""
from ..measure.records import Record

SCALE = "99-throwaway/01_scale.cu"
HEADLINE = {"scale": "1024"}


def benchmarks(ctx):
    yield Record(chapter="99", op="scale", kernel="scale99", shape=[1024], dtype="float32", bytes=8192,
                 flops=1024, median_ms=0.01, spread_ms=0.0, baseline=None, baseline_median_ms=None,
                 ceiling_name="fp32", ceiling_value=60.0)
'''

GRADING = '''"""Chapter 99 exercises (a test)."""
from .tasks import NumericTask, Question

numbers = NumericTask(id="99.numbers", title="throwaway", answers_var="answers_99",
                      questions=[Question("two", "one plus one", 2, "add them", rtol=0)])
TASKS = (numbers,)
'''

PROBE = r'''
import json, sys
from labkit import chapters
from labkit.chapters import headline
from labkit.grading import tasks
from labkit.measure import device
from labkit.runner import gpu_check, profile, provenance, suite

# the suite without a GPU: fake GPU facts, every other chapter's benchmarks silenced
device.gpu_info = suite.gpu_info = lambda: {"name": "Fake GPU", "slug": "fake-gpu", "sm_count": 1}
for ch in chapters.numbers():
    if ch != "99":
        chapters.module(ch).benchmarks = lambda ctx: iter(())
_, _, records = suite.run(ceilings={"fp32_tflops": 60.0}, progress=False)
print(json.dumps({
    "numbers": chapters.numbers(),
    "headline": headline("99"),
    "suite": [(r.chapter, r.kernel) for r in records],
    "tasks": [t.id for t in tasks.for_chapter("99")],
    "sources": sorted(provenance.chapter_sources("99")),
    "notebooks": [str(p.relative_to(gpu_check.ROOT)) for p in gpu_check.notebooks()],
    "profiled": sorted(profile.kernel_names("99")),
}))
'''


def test_a_new_chapter_is_picked_up_from_its_files_alone(tmp_path):
    tree = tmp_path / "course"
    for name in ("labkit", "kernels", "labs", "book"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "logs"))
    for name in ("pyproject.toml", "_toc.yml"):
        shutil.copy(ROOT / name, tree / name)
    (tree / "kernels" / "99-throwaway").mkdir()
    (tree / "kernels" / "99-throwaway" / "01_scale.cu").write_text(KERNEL)
    (tree / "labkit" / "chapters" / "ch99.py").write_text(CHAPTER)
    (tree / "labkit" / "grading" / "ch99.py").write_text(GRADING)
    (tree / "labs" / "99-throwaway").mkdir()
    nb = {"cells": [{"cell_type": "code", "source": "from labkit.chapters import ch99", "metadata": {},
                     "outputs": [], "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tree / "labs" / "99-throwaway" / "lab.ipynb").write_text(json.dumps(nb))
    (tree / "book" / "99-throwaway").mkdir()
    (tree / "book" / "99-throwaway" / "index.md").write_text("# Chapter 99\n")
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["numbers"][-1] == "99" and "04" in got["numbers"]
    assert got["headline"] == {"scale": "1024"}
    assert got["suite"] == [["99", "scale99"]]
    assert got["tasks"] == ["99.numbers"]
    assert "99-throwaway/01_scale.cu" in got["sources"] and "labkit/chapters/ch99.py" in got["sources"]
    assert "labs/99-throwaway/lab.ipynb" in got["notebooks"]
    assert got["profiled"] == ["scale99"]


# a tuple, list or set of two or more chapter numbers written out, or ch01-style module names listed
HAND_KEPT = re.compile(r"""[\[({]\s*["'](?:ch)?\d\d["']\s*[,:][^\n]*["'](?:ch)?\d\d["']""")


def test_labkit_keeps_no_hand_written_list_of_chapters():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in sorted((ROOT / "labkit").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if HAND_KEPT.search(line)]
    assert not found, "hand-kept chapter lists:\n" + "\n".join(found)
    assert HAND_KEPT.search('CHAPTERS = {"01": "labkit.chapters.ch01", "02": "x"}')    # the pattern bites
    assert HAND_KEPT.search('CHAPTER_MODULES = ("ch01", "ch02", "ch03")')

"""Listings shown to the reader open with a kernel's idea and prediction, never with its recorded result.

Every kernel file carries generated `// Result (...)` lines under its prediction (labkit.runner.headers).
The labs' `lab.show` and the book's `kernel-listing` directive (tools/sphinx_ext/kernel_listing.py) both
pass the source through one filter, labkit.measure.lab.without_results, so the reader predicts before the
page quotes the measurement. No GPU is needed for any of this."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.measure.lab import show, without_results
from labkit.paths import KERNELS

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = """// Chapter 99, version 1: a kernel for this test.
//
// Prediction: about two thirds of the copy bandwidth.
// Result (Some GPU, 2026-01-01, labs/results/some-gpu.json, op "copy"):
//   probe at 1024: 0.1000 ms, 1000 GB/s, 66.0% of copy, 0.66x cupy.copyto
//   probe at 2048: 0.2000 ms, 1000 GB/s, 66.0% of copy, 0.66x cupy.copyto
// (The lab sweeps the block size.)
#include <cuda_bf16.h>
extern "C" __global__ void probe(float* y) { y[threadIdx.x] = 0.f; }
"""


def result_lines(text: str) -> list[str]:
    """The generated result block of a kernel source: its `// Result (` line and the indented lines under it."""
    out, inside = [], False
    for line in text.split("\n"):
        inside = line.startswith("// Result (") or (inside and line.startswith("//   "))
        if inside:
            out.append(line)
    return out


WITH_RESULTS = sorted(str(f.relative_to(KERNELS)) for f in KERNELS.rglob("*") if f.suffix in (".cu", ".py")
                      and any(ln.startswith("// Result (") for ln in f.read_text().splitlines()))


def test_the_filter_drops_the_result_block_and_keeps_everything_else():
    out = without_results(SAMPLE)
    assert "// Result (" not in out and "0.1000 ms" not in out and "% of copy" not in out
    assert "// Prediction: about two thirds of the copy bandwidth." in out
    assert "// (The lab sweeps the block size.)" in out          # a comment after the block is not a result
    kept = [ln for ln in SAMPLE.split("\n") if ln not in result_lines(SAMPLE)]
    assert out == "\n".join(kept)
    assert without_results(out) == out                           # a source without results is unchanged


def test_chapters_01_to_04_all_have_result_lines_to_hide():
    for ch in ("01", "02", "03", "04"):
        assert any(k.startswith(ch) for k in WITH_RESULTS), f"no kernel of chapter {ch} has result lines"


@pytest.mark.parametrize("rel", WITH_RESULTS)
def test_lab_show_leaves_out_the_results_and_keeps_the_prediction(rel):
    source = (KERNELS / rel).read_text()
    shown = show(rel).data
    assert "// Result (" not in shown, rel
    for line in result_lines(source):
        assert line not in shown, f"{rel}: result line shown: {line}"
    for line in source.split("\n"):
        if line.startswith("// Prediction"):
            assert line in shown, f"{rel}: prediction line missing: {line}"
    assert "// Result (" in show(rel, results=True).data        # on request, the results are still there


def test_kernel_listing_directive_leaves_out_the_results_and_keeps_the_prediction(tmp_path):
    """A one-page Sphinx project with the book's extension, built with warnings as errors."""
    rel = "01-roofline/01_copy_scalar.cu"
    source = (KERNELS / rel).read_text()
    assert result_lines(source) and "// Prediction" in source
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tools' / 'sphinx_ext')!r})\n"
                                 "extensions = ['kernel_listing']\n")
    (src / "index.rst").write_text(f"Listing\n=======\n\n.. kernel-listing:: {rel}\n")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-b", "text", "-W", "-q", str(src), str(tmp_path / "out")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (tmp_path / "out" / "index.txt").read_text()
    assert f"kernels/{rel}" in page                               # the caption names the file
    assert "// Result (" not in page
    for line in result_lines(source):
        assert line.strip() not in page, f"result line listed: {line}"
    prediction = next(ln for ln in source.split("\n") if ln.startswith("// Prediction"))
    assert prediction in page


def literalincludes_of_kernels():
    """(page, kernel path relative to kernels/, options) of every `literalinclude` of a kernel file in the book."""
    out = []
    for page in sorted((ROOT / "book").rglob("*.md")):
        for m in re.finditer(r"```\{literalinclude\} (\S+)\n((?::[\w-]+:.*\n)*)", page.read_text()):
            target = (page.parent / m[1]).resolve()
            if target.is_relative_to(KERNELS.resolve()) and target.is_file():
                opts = dict(re.findall(r":([\w-]+):\s*(.*)", m[2]))
                out.append((str(page.relative_to(ROOT)), str(target.relative_to(KERNELS.resolve())), opts))
    return out


def test_book_literalincludes_of_kernels_start_below_the_result_lines():
    """A page that quotes part of a kernel with `literalinclude` (not the kernel-listing directive) must
    select a region that begins after the kernel's result lines."""
    checked = 0
    for page, rel, opts in literalincludes_of_kernels():
        text = (KERNELS / rel).read_text()
        lines, block = text.split("\n"), set(result_lines(text))
        results = [i for i, ln in enumerate(lines) if ln in block]
        if not results:
            continue
        checked += 1
        if "pyobject" in opts:
            continue                                            # a Python function or class, not the file's header
        anchor = (opts.get("start-at") or opts.get("start-after") or "").strip().strip('"')
        if anchor:
            first = next(i for i, ln in enumerate(lines) if anchor in ln)
        elif "lines" in opts:
            first = int(re.split(r"[-,]", opts["lines"])[0]) - 1
        else:
            first = 0
        assert first > max(results), f"{page}: literalinclude of {rel} starts inside or above its result lines"
    assert checked, "no literalinclude of a kernel with result lines was found: the test checks nothing"

"""Recorded notebooks and measurements: present, complete, with provenance, and not stale."""
import json
import shutil

import nbformat
import pytest

import labkit.runner.provenance as prov
from labkit import chapters
from labkit.paths import KERNELS, LABS, RESULTS
from labkit.measure.records import Record
from labkit.runner.gpu_check import notebooks

NOTEBOOKS = notebooks()
LABS_NB = [p for p in NOTEBOOKS if p.name == "lab.ipynb"]
RESULT_FIELDS = {"chapter", "op", "kernel", "shape", "dtype", "bytes", "flops", "median_ms", "spread_ms", "baseline",
                 "baseline_median_ms", "ceiling_name", "ceiling_value", "fraction_of_ceiling", "recorded_at"}
CHAPTERS = chapters.numbers()


def ops_of(chapter: str) -> set[str]:
    """The ops a chapter declares headline shapes for: its results must hold records of each."""
    return set(chapters.headline(chapter))


def _id(p):
    return str(p.relative_to(LABS))


def _recorded(path) -> bool:
    """A notebook counts as recorded once it carries provenance or any output."""
    nb = nbformat.read(str(path), as_version=4)
    return bool(nb.metadata.get("labkit", {}).get("provenance")) or any(
        c.get("outputs") for c in nb.cells if c.cell_type == "code")


RECORDED = [p for p in NOTEBOOKS if _recorded(p)]


def test_every_chapter_has_a_lab_and_exercises():
    assert {p.parent.name[:2] for p in LABS_NB} >= set(CHAPTERS)
    assert {p.parent.name[:2] for p in NOTEBOOKS if p.name == "exercises.solution.ipynb"} >= set(CHAPTERS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_notebook_is_recorded_and_current_or_untouched(path):
    """Outputs come only from a GPU runner: a notebook either carries a current recording (provenance whose
    hashes match its code and kernels) or no outputs at all; `python -m labkit stale` lists the latter."""
    nb = nbformat.read(str(path), as_version=4)
    if _recorded(path):
        assert prov.problems(path) == []
    else:
        assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", RECORDED, ids=_id)
def test_recording_ran_clean_on_a_gpu(path):
    nb = nbformat.read(str(path), as_version=4)
    p = nb.metadata["labkit"]["provenance"]
    assert p["gpu"] and p["driver"] and p["cupy"] and p["recorded_at"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "every code cell was executed"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"recorded errors: {[e.ename for e in errors]}"


@pytest.mark.parametrize("path", LABS_NB, ids=_id)
def test_lab_structure(path):
    nb = nbformat.read(str(path), as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "lab.show(" in code, "the lab shows the kernel sources it runs"
    assert "ipywidgets" in code, "the lab has an interactive control"
    assert "roofline(" in code, "the lab draws its kernels on the roofline"
    if _recorded(path):
        pngs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
        assert pngs, "the lab leaves static figures (roofline) in the book"
    timed = [c for c in nb.cells if c.cell_type == "code" and "nbval-ignore-output" in c.metadata.get("tags", [])]
    assert timed, "timing cells are tagged nbval-ignore-output"
    assert "widgets" not in nb.metadata, "no live widget state (it would load JavaScript from a CDN)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_the_book_never_executes_a_lab_notebook(path):
    """The book shows a lab's recorded outputs; executing it at build time (no GPU) would replace them with
    the setup cell's NoGPUError."""
    nb = nbformat.read(str(path), as_version=4)
    assert nb.metadata.get("mystnb", {}).get("execution_mode") == "off", f"{path.name}: metadata mystnb.execution_mode must be 'off'"


def test_results_file_has_every_chapters_ops():
    files = sorted(RESULTS.glob("*.json"))
    assert files, "no recorded results under labs/results"
    data = json.loads((RESULTS / "nvidia-h200.json").read_text())
    assert {"name", "compute_capability", "driver", "cuda_runtime", "cupy"} <= set(data["gpu"])
    assert {"copy_gbps", "fp32_tflops", "bf16_tflops"} <= set(data["ceilings"])
    for r in data["records"]:
        assert RESULT_FIELDS <= set(r), r
        assert r["median_ms"] > 0 and 0 < r["fraction_of_ceiling"] < 1.5
    for ch in CHAPTERS:
        ops = ops_of(ch)
        assert ops, f"chapter {ch} declares no headline shapes (HEADLINE in labkit/chapters/ch{ch}.py)"
        have = {r["op"] for r in data["records"] if r["chapter"] == ch}
        assert ops <= have, f"chapter {ch} lacks records of {ops - have}"


def _recorded_with_kernels():
    return [p for p in RECORDED if prov.kernels_used(nbformat.read(str(p), as_version=4))]


def test_changing_a_kernel_line_makes_its_notebook_stale(tmp_path, monkeypatch):
    candidates = _recorded_with_kernels() or LABS_NB
    nb_path = candidates[0]
    if nb_path not in RECORDED:   # no recorded notebook names a kernel yet: stamp a copy as if recorded
        nb = nbformat.read(str(nb_path), as_version=4)
        prov.stamp(nb, {"name": "test GPU"}, "2026-01-01T00:00:00+00:00")
        nb_path = tmp_path / nb_path.parent.name / "lab.ipynb"
        nb_path.parent.mkdir()
        nbformat.write(nb, str(nb_path))
    nb = nbformat.read(str(nb_path), as_version=4)
    kernel = prov.kernels_used(nb)[0]
    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy)
    src = (copy / kernel).read_text().splitlines()
    i = next(i for i, line in enumerate(src) if line.strip() and not line.strip().startswith("//") and "{" in line)
    src[i] = src[i] + " int changed_line = 0;"
    (copy / kernel).write_text("\n".join(src))
    monkeypatch.setattr(prov, "KERNELS", copy)
    msgs = prov.problems(nb_path)
    assert any(kernel in m and nb_path.name in m and "changed" in m for m in msgs), msgs


def test_changing_a_chapter_module_line_makes_the_notebooks_using_it_stale(tmp_path, monkeypatch):
    """Chapter 03's lab imports ch03, which imports ch02: a code change in ch02 makes it stale, naming ch02."""
    nb = nbformat.read(str(LABS / "03-elementwise" / "lab.ipynb"), as_version=4)
    prov.stamp(nb, {"name": "test GPU"}, "2026-01-01T00:00:00+00:00")
    nb_path = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(nb_path))
    assert prov.modules_used(nb) == ["labkit/chapters/ch02.py", "labkit/chapters/ch03.py"]
    assert "02-first-kernel/01_add_bf16.cu" in prov.kernels_used(nb), "kernels run through ch02 count as used"
    root = tmp_path / "root"
    shutil.copytree(prov.ROOT / "labkit" / "chapters", root / "labkit" / "chapters")
    monkeypatch.setattr(prov, "ROOT", root)
    monkeypatch.setattr(prov, "CHAPTERS", root / "labkit" / "chapters")
    assert prov.problems(nb_path) == []
    module = root / "labkit" / "chapters" / "ch02.py"
    module.write_text(module.read_text() + "\n# a comment alone changes nothing\n")
    assert prov.problems(nb_path) == []
    module.write_text(module.read_text().replace("SENTINEL, SENTINEL_VALUE = 0x4040, 3.0",
                                                 "SENTINEL, SENTINEL_VALUE = 0x4041, 3.0078125"))
    msgs = prov.problems(nb_path)
    assert len(msgs) == 1 and "lab.ipynb" in msgs[0] and "labkit/chapters/ch02.py changed" in msgs[0], msgs


def test_a_comment_change_does_not_make_it_stale(tmp_path, monkeypatch):
    nb = nbformat.read(str(LABS_NB[0]), as_version=4)
    prov.stamp(nb, {"name": "test GPU"}, "2026-01-01T00:00:00+00:00")
    nb_path = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(nb_path))
    kernel = prov.kernels_used(nb)[0]
    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy)
    (copy / kernel).write_text("// Result (H200): recorded figure updated\n" + (copy / kernel).read_text())
    monkeypatch.setattr(prov, "KERNELS", copy)
    assert prov.problems(nb_path) == []


def test_notebook_without_provenance_is_reported(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("x = 1"))
    p = tmp_path / "lab.ipynb"
    nbformat.write(nb, str(p))
    assert "no provenance" in prov.problems(p)[0]


def test_recorded_results_match_the_code_they_measured():
    assert prov.results_problems(RESULTS / "nvidia-h200.json") == []


def test_changing_a_kernel_line_makes_the_results_stale(tmp_path, monkeypatch):
    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy)
    f = copy / "03-elementwise" / "02_add_vec128.cu"
    src = f.read_text().replace("{", "{ int changed_line = 0;", 1)
    f.write_text(src)
    monkeypatch.setattr(prov, "KERNELS", copy)
    msgs = prov.results_problems(RESULTS / "nvidia-h200.json")
    assert msgs and all("chapter 03" in m for m in msgs)
    assert any("03-elementwise/02_add_vec128.cu" in m for m in msgs), msgs


@pytest.mark.parametrize("path", LABS_NB, ids=_id)
def test_lab_code_refers_to_what_exists(path):
    """Every code cell parses, every kernel file it shows exists, and every chapter-module attribute it
    calls is defined (the labs run for the first time on a GPU runner: catch API drift here)."""
    import ast
    import importlib
    import re
    nb = nbformat.read(str(path), as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            ast.parse("\n".join(ln for ln in c.source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for rel in prov.kernels_used(nb):
        assert (KERNELS / rel).exists(), rel
    for mod, attr in set(re.findall(r"\b(ch0\d)\.(\w+)", code)):
        m = importlib.import_module(f"labkit.chapters.{mod}")
        assert hasattr(m, attr), f"{path.parent.name}/lab.ipynb calls {mod}.{attr}, which does not exist"
    from labkit.measure import lab
    for attr in set(re.findall(r"\blab\.(\w+)", code)):
        assert hasattr(lab, attr), f"lab.{attr}"
    for attr in set(re.findall(r"\bL\.(\w+)", code)):
        assert hasattr(lab.Lab, attr) or attr in {"ctx", "gpu", "ceilings", "chapter", "started"}, f"L.{attr}"


def test_show_highlights_cuda_and_python():
    from labkit.measure.lab import show
    assert "```cuda" in show("01-roofline/01_copy_scalar.cu").data
    assert "```python" in show("04-reductions/09_triton_softmax_rmsnorm.py").data


def test_kernel_result_lines_match_the_results_file():
    """The `// Result` lines of every kernel file are what the results file says (labkit.runner.headers)."""
    from labkit.runner import headers
    files = sorted(KERNELS.rglob("*.cu"))
    with_results = [f for f in files if any(headers.HEADER.match(ln) for ln in f.read_text().splitlines())]
    recorded = {r["chapter"] for r in json.loads((RESULTS / "nvidia-h200.json").read_text())["records"]}
    # every kernel of a recorded chapter opens with its result: generated lines, or a pointer to the lab's sweep
    missing = [str(f.relative_to(KERNELS)) for f in files if f.parent.name[:2] in recorded
               and not any(ln.startswith("// Result (") for ln in f.read_text().splitlines())]
    assert not missing, f"kernels of recorded chapters without result lines: {missing}"
    assert with_results
    stale = [str(f.relative_to(KERNELS)) for f in with_results if headers.refreshed(f) != f.read_text()]
    assert not stale, f"result lines differ from labs/results: {stale} (python -m labkit bench --json rewrites them)"


def test_result_lines_are_rewritten_from_the_records(tmp_path, monkeypatch):
    from labkit.runner import headers
    data = json.loads((RESULTS / "nvidia-h200.json").read_text())
    rec = next(r for r in data["records"] if r["chapter"] == "01" and r["kernel"] == "copy_vec128_flat")
    rec["median_ms"] *= 2
    rec["fraction_of_ceiling"] /= 2
    (tmp_path / "r.json").write_text(json.dumps(data))
    monkeypatch.setattr(headers, "ROOT", tmp_path)
    kernel = tmp_path / "01-roofline" / "03_copy_vec128_flat.cu"
    kernel.parent.mkdir()
    kernel.write_text("// idea\n"
                      '// Result (Some GPU, 2020-01-01, r.json, op "copy"):\n'
                      "//   copy_vec128_flat at 134217728: 9 ms\n"
                      "extern \"C\" __global__ void k() {}\n")
    text = headers.refreshed(kernel)
    line = text.splitlines()[2]
    assert line == headers.entry_line(Record.from_json(rec)) and f"{rec['median_ms']:.4f} ms" in line, line
    assert text.splitlines()[1] == f'// Result ({data["gpu"]["name"]}, {rec["recorded_at"][:10]}, r.json, op "copy"):'
    kernel.write_text(kernel.read_text().replace("at 134217728", "at 1000"))
    with pytest.raises(Exception, match="line 3 shows copy_vec128_flat at 1000"):
        headers.refreshed(kernel)

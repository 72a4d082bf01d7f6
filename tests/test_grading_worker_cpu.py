"""The worker's checks on the CPU, with CuPy replaced by a NumPy stand-in in a subprocess (the real worker
needs a GPU: tests/test_grading_adversarial_gpu.py runs the same classes of kernel on one). "Kernels" here
are Python functions with the launch signature: one zeroes its inputs and its output, one does the work
only on buffers it has not seen, one is right. What is checked is the grader's logic: the reference comes
from the inputs before the launch, changed inputs are named, every timed launch is re-poisoned and
checked, and a time below the physical floor is an error."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from labkit.paths import ROOT

FAKE_CUPY = r'''
import numpy as _np
from numpy import *  # noqa
from numpy import float32, float64, uint16, uint32, uint64, int32, int64, dtype, nan, inf  # noqa
import types as _types

class ndarray(_np.ndarray):
    def get(self):
        return _np.asarray(self).copy()

def _wrap(f):
    def g(*a, **k):
        r = f(*a, **k)
        return r.view(ndarray) if isinstance(r, _np.ndarray) else r
    return g

for _n in ("empty", "zeros", "ones", "asarray", "arange", "where", "ascontiguousarray", "empty_like",
           "flatnonzero", "isfinite", "isnan", "abs", "exp", "sqrt", "tanh", "argmax"):
    globals()[_n] = _wrap(getattr(_np, _n))

class _Random:
    def random(self, n, dtype=_np.float32):
        return _np.random.default_rng(0).random(n).astype(dtype).view(ndarray)
random = _Random()

def copyto(dst, src):
    dst[...] = src

class _Pool:
    def free_all_blocks(self): pass
    def total_bytes(self): return 0

def get_default_memory_pool():
    return _Pool()

def get_array_module(*a):
    import sys
    return sys.modules[__name__]

class ElementwiseKernel:
    def __init__(self, inp, out, body, name):
        self.bf16 = "uint16" in out
    def __call__(self, seed, scale, shift, out):
        rng = _np.random.default_rng(int(seed) % (1 << 32))
        v = (rng.standard_normal(out.size) * float(scale) + float(shift)).astype(_np.float32)
        if self.bf16:
            u = v.view(_np.uint32)
            out[...] = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(_np.uint16)
        else:
            out[...] = v

class RawKernel:
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): pass

TIMES = []          # the "elapsed time" of each launch, set by the fake kernels

class _Event:
    def record(self, stream=None): pass
    def synchronize(self): pass

class _Device:
    id = 0
    def __init__(self, *a): pass
    def synchronize(self): pass

class _OOM(MemoryError):
    pass

def _elapsed(a, b):
    return TIMES.pop(0) if TIMES else 1.0

cuda = _types.SimpleNamespace(
    Device=_Device, Event=_Event, get_elapsed_time=_elapsed,
    get_current_stream=lambda: _types.SimpleNamespace(synchronize=lambda: None),
    memory=_types.SimpleNamespace(OutOfMemoryError=_OOM),
    runtime=_types.SimpleNamespace(memGetInfo=lambda: (100 << 30, 141 << 30), getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {"name": b"NVIDIA H200", "multiProcessorCount": 132, "l2CacheSize": 1 << 20}),
    nvtx=_types.SimpleNamespace(RangePush=lambda s: None, RangePop=lambda: None))
'''

SCRIPT = r'''
import json, sys, types
import numpy as np
import cupy
from labkit.grading import tasks as T, worker as W
T.sm_count = lambda: 132
out = {}
ctx = types.SimpleNamespace(sms=132, gpu="NVIDIA H200", module_bytes=0, flusher=None)
task = T.get("01.copy_probe")

def good(grid, block, args):
    x, y, n = args
    y[...] = x
    cupy.TIMES.append(10.0)

def zeroes(grid, block, args):
    x, y, n = args
    x[...] = 0
    y[...] = 0

seen = set()
def once(grid, block, args):
    x, y, n = args
    key = (y.__array_interface__["data"][0], int(n))
    if key in seen:
        cupy.TIMES.append(1e-6)
        return
    seen.add(key)
    y[...] = x
    cupy.TIMES.append(10.0)

def too_fast(grid, block, args):
    x, y, n = args
    y[...] = x
    cupy.TIMES.append(1e-4)

for name, k in (("good", good), ("zeroes", zeroes), ("once", once), ("too_fast", too_fast)):
    res = {}
    for case in task.cases([1000, 4_500_000], speed=False):
        res[case.label] = W.run_case(task, k, case, ctx)[:2]
    speed_case = task.cases([1 << 20])[0]
    speed_case = T.Case(speed_case.label + " (speed shape)", speed_case.shape, role="speed")
    st, detail, kept = W.run_case(task, k, speed_case, ctx)
    sp = W.measure_speed(task, k, speed_case, ctx, kept) if kept else None
    res["speed"] = [sp.status, sp.detail] if sp else [st, detail]
    out[name] = res

# 3. memory is judged before the learner's module is loaded; a case that does not fit is not graded
import dataclasses
msgs = []
class Conn:
    def send(self, m):
        msgs.append([type(m).__name__, dataclasses.asdict(m)])
class Mod:
    def get_function(self, name):
        return good
def fake_load_module(src):
    msgs.append(["LOAD", {}])
    return Mod()
W.load_module = fake_load_module
cupy.cuda.runtime.memGetInfo = lambda: (1 << 30, 141 << 30)
W._run(Conn(), {"task": "01.copy_probe", "source": "int x;", "speed": False,
                "cases": [dataclasses.asdict(c) for c in task.cases([1000, 4_500_000])]})
out["messages"] = msgs
print("RESULT" + json.dumps(out))
'''


def run_sim(tmp_path):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    api = tmp_path / "cupy_backends" / "cuda" / "api"
    api.mkdir(parents=True)
    for d in (tmp_path / "cupy_backends", tmp_path / "cupy_backends" / "cuda", api):
        (d / "__init__.py").write_text("")
    (api / "driver.py").write_text("class CUDADriverError(Exception):\n    pass\n")
    (api / "runtime.py").write_text("class CUDARuntimeError(Exception):\n    pass\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert "RESULT" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.split("RESULT", 1)[1])


def test_worker_checks_with_a_numpy_stand_in(tmp_path):
    out = run_sim(tmp_path)
    good = out["good"]
    assert good["n=1000"] == ["ok", ""] and good["n=4500000"] == ["ok", ""]    # host and "GPU" comparisons
    assert good["speed"][0] == "measured", good["speed"]
    # 1. a kernel that zeroes its input and its output: the reference was computed before the launch
    for label in ("n=1000", "n=4500000"):
        st, detail = out["zeroes"][label]
        assert st == "wrong" and detail.startswith("the kernel wrote to its input x"), detail
    # 2. a kernel that does the work only once per buffer: the timed launches are re-poisoned and checked
    st, detail = out["once"]["speed"]
    assert st == "error" and "timed launch 1 did not do the work" in detail and "never written" in detail, detail
    # 2. a launch faster than bytes / datasheet bandwidth is an error, not a pass
    st, detail = out["too_fast"]["speed"]
    assert st == "error" and "less than the physical floor" in detail and "H200 datasheet" in detail, detail
    # 3. the case too large for the free memory is reported before the module is loaded, and not run
    kinds = [m[0] for m in out["messages"]]
    # startup, the skipped case, compile, the module load, then the case: prepare (the grader's inputs and
    # reference), case (the learner's launch, under the case time limit alone), check
    assert kinds == ["Stage", "CaseDone", "Stage", "LOAD", "Stage", "Stage", "Stage", "CaseDone", "Done"], out["messages"]
    assert [m[1]["kind"] for m in out["messages"][4:7]] == ["prepare", "case", "check"], out["messages"]
    assert out["messages"][5][1]["seconds"] < 30 < out["messages"][4][1]["seconds"], out["messages"]
    skipped = out["messages"][1][1]
    assert skipped["index"] == 1 and skipped["status"] == "skipped" and "needs about" in skipped["detail"]
    assert out["messages"][7][1] == {"index": 0, "status": "ok", "detail": ""}

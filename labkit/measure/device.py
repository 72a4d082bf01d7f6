"""What GPU is here, and a clear error where there is none."""
from __future__ import annotations

import datetime as _dt
import functools
import re

from ..errors import NoGPUError


@functools.lru_cache(maxsize=1)
def has_gpu() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, or no device: all mean "no GPU" here
        return False


def require_gpu(what: str = "this step"):
    """Return the cupy module, or raise NoGPUError naming what needed the GPU."""
    if not has_gpu():
        raise NoGPUError(what)
    import cupy
    return cupy


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    """SMs of the current GPU (cached: getDeviceProperties costs about a millisecond of host time, which
    would otherwise sit inside every timed launch of a wrapper that sizes its grid by it)."""
    cp = require_gpu("sm_count")
    return cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]


def slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (file names of recorded results)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def gpu_info() -> dict:
    """Name, compute capability, SMs, L2, clocks, driver and library versions of device 0."""
    cp = require_gpu("gpu_info")
    rt = cp.cuda.runtime
    props = rt.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    drv = rt.driverGetVersion()
    info = {
        "name": name,
        "slug": slug(name),
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sm_count": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
        "memory_bytes": props["totalGlobalMem"],
        "max_sm_clock_mhz": _clock_mhz(props),
        "driver": _driver_version(),
        "cuda_driver_api": f"{drv // 1000}.{drv % 1000 // 10}",
        "cuda_runtime": _runtime_version(rt),
        "cupy": cp.__version__,
    }
    try:
        import torch
        info["torch"] = torch.__version__
    except Exception:
        pass
    return info


def _nvml(query):
    """query(pynvml, handle of device 0), or None where NVML (nvidia-ml-py) is missing or refuses."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return query(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
    except Exception:
        return None


def _clock_mhz(props) -> float | None:
    khz = props.get("clockRate")
    if khz:
        return khz / 1000
    # CUDA 13 dropped clockRate from the properties; ask NVML
    return _nvml(lambda nv, h: float(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)))


def current_sm_clock_mhz() -> float | None:
    """The SM clock right now, from NVML (None where NVML is missing)."""
    return _nvml(lambda nv, h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))


def _driver_version() -> str | None:
    v = _nvml(lambda nv, h: nv.nvmlSystemGetDriverVersion())
    return v.decode() if isinstance(v, bytes) else v


def _runtime_version(rt) -> str:
    v = rt.runtimeGetVersion()
    return f"{v // 1000}.{v % 1000 // 10}"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()

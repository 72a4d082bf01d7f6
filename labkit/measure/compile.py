"""Kernel sources -> CuPy modules on a GPU, or -> ptxas reports without one.

Two paths, one set of options:
- `load_module` / `load_kernel` compile through CuPy (`RawModule`), which needs a device;
- `compile_check` compiles through NVRTC alone (`cupy.cuda.nvrtc`, from the pip wheels), for any
  architecture, with no GPU and no system CUDA toolkit, and returns what ptxas reports.
A compile error raises KernelCompileError that quotes the learner's own line.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import re
from pathlib import Path

from ..errors import KernelCompileError
from ..paths import KERNELS
from .device import require_gpu

STD_OPTIONS = ("-std=c++17",)
ARCHS = ("sm_80", "sm_90", "sm_90a")


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """Folders holding cuda_bf16.h and friends: the pip wheels' headers, else a system toolkit."""
    found = []
    try:
        import nvidia
        for base in nvidia.__path__:
            for sub in ("cu13/include", "cuda_runtime/include", "cu12/include"):
                d = Path(base) / sub
                if (d / "cuda_bf16.h").exists():
                    found.append(str(d))
    except ImportError:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            found.append(os.path.join(os.environ[env], "include"))
    found.append("/usr/local/cuda/include")
    return tuple(d for d in dict.fromkeys(found) if Path(d, "cuda_bf16.h").exists())


def course_include_options(source: str | None = None) -> tuple[str, ...]:
    """-I options for a kernel: the course's own headers (`#include "common/reductions.cuh"`, from
    kernels/common/) and the CUDA headers (cuda_bf16.h and friends). Given the kernel's `source`, also a
    -D option naming the content of the course headers it includes: CuPy caches compiled modules by
    source text and options, so an edited header would otherwise be served stale."""
    return (f"-I{KERNELS}",) + tuple(f"-I{d}" for d in include_dirs()) + (_headers_key(source) if source else ())


def read_source(path_or_source: str | os.PathLike) -> tuple[str, str]:
    """(source text, display name). Accepts a path under kernels/ (absolute or relative) or CUDA source."""
    text = str(path_or_source)
    if "\n" not in text and text.endswith((".cu", ".cuh", ".py")):
        p = Path(text)
        if not p.is_absolute() and not p.exists():
            p = KERNELS / p
        if not p.exists():
            raise FileNotFoundError(f"kernel source not found: {text}")
        return _read_file(str(p), p.stat().st_mtime_ns), p.name
    return text, "kernel.cu"


@functools.lru_cache(maxsize=256)
def _read_file(path: str, mtime_ns: int) -> str:
    return Path(path).read_text()


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def course_headers(source: str) -> list[str]:
    """The course headers (paths under kernels/, e.g. "common/reductions.cuh") that `source` includes,
    directly or through other course headers, in the order first met."""
    out: list[str] = []
    todo = _INCLUDE.findall(source)
    while todo:
        rel = todo.pop(0)
        p = KERNELS / rel
        if rel in out or not p.is_file():
            continue
        out.append(rel)
        todo += _INCLUDE.findall(p.read_text())
    return out


def _headers_key(source: str) -> tuple[str, ...]:
    """A -D option naming the content of the course headers a source includes: CuPy caches compiled
    modules by source text and options, so without it an edited header would be served stale."""
    rels = course_headers(source)
    if not rels:
        return ()
    import hashlib
    h = hashlib.sha256("".join((KERNELS / r).read_text() for r in rels).encode()).hexdigest()[:16]
    return (f"-DLABKIT_COURSE_HEADERS_{h}",)


# ---------------------------------------------------------------------------------------------- errors

_DIAG = re.compile(r"^(?P<file>[^\s()]*)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)[^:]*: (?P<msg>.*)$")


def format_compile_error(log: str, source: str, name: str) -> str:
    """Quote each error with the learner's line and a caret-free pointer, compiler style."""
    lines = source.splitlines()
    out = []
    for raw in log.splitlines():
        m = _DIAG.match(raw.strip())
        if not m or m["kind"] == "warning":
            continue
        n = int(m["line"])
        code = lines[n - 1] if 0 < n <= len(lines) else ""
        out.append(f"{name} line {n}: {m['msg']}\n    {n:4d} | {code}")
    if not out:  # a message we could not parse: show the compiler's own words
        out = [ln for ln in log.splitlines() if ln.strip()][:20]
    return "\n".join(out)


# -------------------------------------------------------------------------------------- GPU path (CuPy)

def load_module(path_or_source, options=(), name_expressions=None):
    """Compile CUDA source (a file under kernels/ or a string) into a `cupy.RawModule`.

    Modules are cached by source text and options: a wrapper may call this on every launch without
    paying for a module load (which would otherwise land inside a timed region)."""
    source, name = read_source(path_or_source)
    return _load_module(source, name, tuple(options), tuple(name_expressions) if name_expressions else None)


@functools.lru_cache(maxsize=None)
def launch_config(path: str, options: tuple = ()) -> tuple[int, ...]:
    """The 16 ints a build's own `launch_config(int* out)` kernel writes: its geometry as the source computes
    it, so the host never repeats the macro arithmetic. Read once per build (on the GPU)."""
    import cupy as cp
    out = cp.zeros(16, dtype=cp.int32)
    load_module(path, tuple(options)).get_function("launch_config")((1,), (1,), (out,))
    return tuple(int(x) for x in out.get())


@functools.lru_cache(maxsize=256)
def _load_module(source: str, name: str, options: tuple, name_expressions):
    cp = require_gpu("compiling and running a kernel")
    opts = tuple(STD_OPTIONS) + course_include_options(source) + arch_options(source) + options
    try:
        mod = cp.RawModule(code=source, options=opts, name_expressions=name_expressions)
        mod.compile()
    except cp.cuda.compiler.CompileException as e:
        raise KernelCompileError(format_compile_error(str(e), source, name)) from None
    return mod


def load_kernel(path_or_source, name: str, options=()):
    """One `__global__` function (declared extern "C") from a source, ready to launch (cached)."""
    source, src_name = read_source(path_or_source)
    return _load_kernel(source, src_name, name, tuple(options))


@functools.lru_cache(maxsize=None)
def kernel(path: str, name: str, options: tuple = ()):
    """`load_kernel` for a course file, cached by path: the chapter wrappers are called in timing loops, and
    this skips even the file read that `load_kernel` does to notice an edited source."""
    return load_kernel(path, name, options)


def max_dynamic_smem() -> int:
    """The most dynamic shared memory one block of this GPU may opt in to, in bytes."""
    import cupy as cp
    return int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["sharedMemPerBlockOptin"])


def opt_in_shared_memory(k, smem: int, what: str):
    """`k` allowed `smem` bytes of dynamic shared memory (above 48 KB a kernel must opt in), or a clear
    error naming `what` when this GPU has less than that per block."""
    from ..errors import KernelInputError
    most = max_dynamic_smem()
    if smem > most:
        raise KernelInputError(f"{what} needs {smem:,} bytes of shared memory per block; this GPU allows "
                               f"{most:,} (227 KB on H100/H200, 163 KB on A100, 99 KB on sm_86/sm_89)")
    if smem > 48 * 1024:
        k.max_dynamic_shared_size_bytes = smem
    return k


# `__global__ void [__launch_bounds__(T, (BN == 128 ? 2 : 1))] [CLUSTER_ATTR] name(`: the name is the word before
# the parameter list, past launch bounds with nested parentheses and attribute macros
KERNEL_NAME = re.compile(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?"
                         r"(?:void\s+)?(?:[A-Z_][A-Z0-9_]*\s+)*(\w+)\s*\(")


def kernel_names(source: str) -> list[str]:
    """The names of the `__global__` functions a CUDA source defines, in order."""
    return KERNEL_NAME.findall(source)


def no_such_kernel(name: str, source: str) -> str:
    """The message for a kernel name the source does not define, naming those it does."""
    return (f"no kernel named '{name}' in the source (found: {', '.join(kernel_names(source)) or 'none'}); "
            'declare it as extern "C" __global__ void ...')


@functools.lru_cache(maxsize=512)
def _load_kernel(source: str, src_name: str, name: str, options: tuple):
    mod = _load_module(source, src_name, options, None)
    from cupy_backends.cuda.api.driver import CUDADriverError
    try:
        return mod.get_function(name)
    except CUDADriverError as e:
        if "NOT_FOUND" not in str(e):     # the driver could not load the module at all: say so, not "no kernel"
            raise KernelCompileError(f"the compiled module could not be loaded by the driver: {e}") from None
        raise KernelCompileError(no_such_kernel(name, source)) from None


# ---------------------------------------------------------------------------- CPU path (NVRTC alone)

@dataclasses.dataclass
class FunctionReport:
    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclasses.dataclass
class PtxasReport:
    arch: str
    functions: dict[str, FunctionReport]
    log: str

    @property
    def wgmma_serialized(self) -> list[str]:
        """ptxas' "Potential Performance Loss: wgmma.mma_async instructions are serialized" lines: such a
        build runs its tensor cores one instruction at a time (2-3x slower) and still computes the right
        answer, so nothing but this line gives it away."""
        return [ln.split(":", 1)[-1].strip() for ln in self.log.splitlines()
                if "Performance Loss" in ln and "serialized" in ln]

    def __str__(self):
        rows = [f"{'kernel':32s} {'regs':>5s} {'smem B':>7s} {'stack B':>7s} {'spill st/ld':>12s}  [{self.arch}]"]
        for f in self.functions.values():
            rows.append(f"{f.name:32s} {f.registers:5d} {f.shared_bytes:7d} {f.stack_bytes:7d} "
                        f"{f.spill_stores:5d}/{f.spill_loads:<6d}")
        return "\n".join(rows)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def parse_ptxas(log: str, arch: str) -> PtxasReport:
    funcs: dict[str, FunctionReport] = {}
    cur = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            cur = funcs.setdefault(m[1], FunctionReport(m[1]))
        elif m := re.search(r"Function properties for (\w+)", line):
            cur = funcs.setdefault(m[1], FunctionReport(m[1]))
        elif cur is not None and (m := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            cur.stack_bytes, cur.spill_stores, cur.spill_loads = map(int, m.groups())
        elif cur is not None and (m := re.search(r"Used (\d+) registers", line)):
            cur.registers = int(m[1])
            if s := re.search(r"(\d+) bytes smem", line):
                cur.shared_bytes = int(s[1])
            if b := re.search(r"used (\d+) barriers", line):
                cur.barriers = int(b[1])
    return PtxasReport(arch, funcs, log)


def compile_check(path_or_source, arch: str = "sm_90", options=()) -> PtxasReport:
    """Compile for `arch` with NVRTC (no GPU needed) and return ptxas' resource report."""
    source, name = read_source(path_or_source)
    ok, log = _nvrtc_compile(source, name, ["-Xptxas=-v", *_nvrtc_options(arch, options)])
    if not ok:
        raise KernelCompileError(format_compile_error(log, source, name))
    report = parse_ptxas(log, arch)
    if report.wgmma_serialized:
        raise KernelCompileError(f"{name} [{arch}]: ptxas serialised wgmma, which quietly costs 2-3x: "
                                 + "; ".join(report.wgmma_serialized))
    return report


def _nvrtc_options(arch: str, options=()) -> list[str]:
    """NVRTC's options for a no-GPU compile for `arch`: the course's standard ones, a real compile (not one
    served from NVRTC's disk cache), the course's and CUDA's headers, then the caller's."""
    return [f"-arch={arch}", *STD_OPTIONS, *nvrtc_no_cache(), *course_include_options(), *options]


@functools.lru_cache(maxsize=1)
def nvrtc_no_cache() -> tuple[str, ...]:
    """NVRTC 12.9 and later keep compiled programs in a cache on disk once a driver is loaded, and a program
    served from it was never seen by ptxas, so its log holds no report (on the H200 the second compile of a
    file came back with an empty log). compile_check asks for a real compile."""
    from cupy.cuda import nvrtc
    return ("--no-cache",) if tuple(nvrtc.getVersion()) >= (12, 9) else ()


def _nvrtc_compile(source: str, name: str, opts: list[str]) -> tuple[bool, str]:
    """(compiled?, NVRTC's program log, which holds ptxas' report when -Xptxas=-v is given)."""
    from cupy.cuda import nvrtc
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        nvrtc.compileProgram(prog, opts)
        ok = True
    except nvrtc.NVRTCError:
        ok = False
    log = nvrtc.getProgramLog(prog).rstrip("\x00")
    nvrtc.destroyProgram(prog)
    return ok, log


def hopper_only(source: str) -> bool:
    """Whether a source is marked Hopper-only in its header: `// requires: sm_90a`."""
    return re.search(r"//\s*requires:\s*sm_90a", source) is not None


def arch_options(source: str) -> tuple[str, ...]:
    """-arch for CuPy's compile of `source` on this GPU: sm_90a for a Hopper-only file (wgmma, setmaxnreg
    and TMA multicast exist only in the "a" target, which CuPy never picks by itself), else CuPy's own."""
    return ("-arch=sm_90a",) if hopper_only(source) else ()


def _fix_cubin(b: bytes) -> bytes:
    """Some CuPy versions return NVRTC's CUBIN cut at its first NUL run (as a C string): pad the ELF image
    back to the end of its header tables so cuobjdump can read it."""
    import struct
    b = bytearray(b)
    if len(b) >= 64 and b[:4] == b"\x7fELF":
        phoff, shoff = struct.unpack_from("<QQ", b, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", b, 0x36)
        need = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
        b += b"\0" * max(0, need - len(b))
    return bytes(b)


def cuda_tool(name: str) -> str:
    """A CUDA binary (cuobjdump, nvdisasm): on PATH, in the CUDA toolkit, or from its nvidia-cuda-* wheel."""
    found = shutil.which(name)
    if found:
        return found
    if Path("/usr/local/cuda/bin", name).exists():
        return str(Path("/usr/local/cuda/bin", name))
    try:
        import nvidia
        for base in nvidia.__path__:
            for p in Path(base).glob(f"*/bin/{name}"):
                return str(p)
    except ImportError:
        pass
    raise FileNotFoundError(f"{name} not found (install the CUDA toolkit or `pip install nvidia-cuda-{name}`)")


def sass(path_or_source, arch: str = "sm_90a", options=()) -> str:
    """The SASS of a kernel source, compiled by NVRTC for `arch` (no GPU needed) and disassembled by cuobjdump
    (which runs nvdisasm): what instructions the compiler really chose."""
    import subprocess
    import tempfile

    from cupy.cuda import nvrtc
    source, name = read_source(path_or_source)
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, _nvrtc_options(arch, options))
        except nvrtc.NVRTCError:
            raise KernelCompileError(format_compile_error(nvrtc.getProgramLog(prog).rstrip("\x00"), source,
                                                          name)) from None
        cubin = _fix_cubin(nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d, "k.cubin")
        p.write_bytes(cubin)
        env = dict(os.environ, NVDISASM_PATH=str(Path(cuda_tool("nvdisasm")).parent))   # cuobjdump runs it
        run = subprocess.run([cuda_tool("cuobjdump"), "-sass", str(p)], capture_output=True, text=True,
                             timeout=120, env=env)
        if run.returncode or "Function" not in run.stdout:
            raise RuntimeError(f"cuobjdump -sass failed on {name}: {run.stderr.strip()[:300]}")
        return run.stdout


@functools.lru_cache(maxsize=None)
def python_kernels(rel: str):
    """A Python kernel file under kernels/ (the Triton kernels of chapters 03 and 04) as a module, imported
    by path: kernels/ is not a package. Raises ImportError where what the file imports (Triton, PyTorch) is
    missing; a failed import is not cached, so a later call tries again."""
    import importlib.util
    path = KERNELS / rel
    if not path.is_file():
        raise FileNotFoundError(f"kernel source not found: {rel}")
    spec = importlib.util.spec_from_file_location("labkit_kernels_" + re.sub(r"\W", "_", rel[:-3]), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def target_archs(source: str) -> tuple[str, ...]:
    """Architectures a kernel file must compile for: sm_90a only for Hopper-only files, otherwise sm_80
    and sm_90."""
    return ("sm_90a",) if hopper_only(source) else ("sm_80", "sm_90")

"""CuPy in plain sight: every lab compiles its headline kernels with cupy.RawModule / cupy.RawKernel and launches
them in a visible cell, with an explicit grid and block, and has one "edit this kernel" cell whose CUDA source
is inline in the notebook. CPU only: the launches are read with `ast`, the inline sources compiled with NVRTC."""
import ast
import re

import nbformat
import pytest

from labkit.paths import KERNELS, LABS
from labkit.runner.provenance import strip_comments

LAB_NBS = sorted(LABS.glob("*/lab.ipynb"))
RAW = {"RawModule", "RawKernel"}
# C scalar types of kernel parameters -> the NumPy scalar a launch must pass (CuPy would pass a Python int as
# a long long and a float as a double, whatever the kernel declares)
SCALARS = {"long long": "int64", "int": "int32", "unsigned int": "uint32", "float": "float32", "double": "float64"}


def _id(p):
    return p.parent.name


def _code_cells(path):
    nb = nbformat.read(str(path), as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"]


def _parse(source: str) -> ast.Module:
    """A code cell without its IPython magics and shell escapes."""
    return ast.parse("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _calls(tree):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _is_launch(call: ast.Call) -> bool:
    """kernel((blocks,), (threads,), (args...)): the first two arguments are tuples."""
    return len(call.args) >= 3 and all(isinstance(a, ast.Tuple) for a in call.args[:2])


def _kernels_path(node):
    """The literal path of `KERNELS / "NN-chapter/NN_name.cu"`, else None."""
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Name)
            and node.left.id == "KERNELS" and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)):
        return node.right.value
    return None


def _bindings(path):
    """Names bound to kernels in the notebook, in cell order: {name: (CUDA source, function name, where)},
    where is "file" (read from kernels/ and compiled with RawModule) or "inline" (a string compiled with
    RawKernel). Follows `src = (KERNELS / "...").read_text()`, `module = cp.RawModule(code=src, ...)`,
    `k = module.get_function("name")` and `k = cp.RawKernel(src, "name", ...)`."""
    strings, modules, kernels = {}, {}, {}
    for cell in _code_cells(path):
        for node in ast.walk(_parse(cell.source)):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            name, v = node.targets[0].id, node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, str) and "__global__" in v.value:
                strings[name] = (v.value, "inline")
            elif isinstance(v, ast.Call) and _callee(v) == "read_text" and isinstance(v.func, ast.Attribute):
                rel = _kernels_path(v.func.value)
                if rel:
                    strings[name] = ((KERNELS / rel).read_text(), "file")
            elif isinstance(v, ast.Call) and _callee(v) == "RawModule":
                code = next((k.value for k in v.keywords if k.arg == "code"), v.args[0] if v.args else None)
                if isinstance(code, ast.Name) and code.id in strings:
                    modules[name] = strings[code.id]
            elif isinstance(v, ast.Call) and _callee(v) == "get_function" and isinstance(v.func.value, ast.Name):
                mod = modules.get(v.func.value.id)
                if mod and v.args and isinstance(v.args[0], ast.Constant):
                    kernels[name] = (mod[0], v.args[0].value, mod[1])
            elif isinstance(v, ast.Call) and _callee(v) == "RawKernel" and len(v.args) >= 2:
                src, fn = v.args[0], v.args[1]
                if isinstance(src, ast.Name) and src.id in strings and isinstance(fn, ast.Constant):
                    kernels[name] = (strings[src.id][0], fn.value, strings[src.id][1])
    return kernels


def _signature(source: str, name: str) -> list[str]:
    """The parameter declarations of `extern "C" __global__ void [__launch_bounds__(...)] name(...)`."""
    m = re.search(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?' + re.escape(name)
                  + r"\s*\(([^)]*)\)", source)
    assert m, f"no extern \"C\" __global__ void {name}(...) in the source"
    return [p.strip() for p in m[1].split(",") if p.strip()]


def _c_type(param: str) -> str:
    """'const __nv_bfloat16* __restrict__ x' -> 'pointer'; 'long long n' -> 'long long'."""
    if "*" in param:
        return "pointer"
    words = [w for w in param.replace("const", " ").split() if w != "__restrict__"]
    return " ".join(words[:-1])


@pytest.mark.parametrize("path", LAB_NBS, ids=_id)
def test_lab_compiles_a_kernel_file_with_cupy_and_launches_it_in_view(path):
    kernels = _bindings(path)
    found = []
    for cell in _code_cells(path):
        tree = _parse(cell.source)
        if not any(_callee(c) in RAW for c in _calls(tree)):
            continue
        found += [c for c in _calls(tree) if _is_launch(c) and isinstance(c.func, ast.Name)
                  and kernels.get(c.func.id, ("", "", ""))[2] == "file"]
    assert found, ("no cell compiles a kernel file with cupy.RawModule/RawKernel and launches it as "
                   "kernel((blocks,), (threads,), (args...))")


@pytest.mark.parametrize("path", LAB_NBS, ids=_id)
def test_lab_has_an_inline_kernel_compiled_with_rawkernel_that_nvrtc_accepts(path):
    try:
        from cupy.cuda import nvrtc  # noqa: F401  (a compiled module: importorskip cannot import it by path)
    except ImportError:
        pytest.skip("no NVRTC here (cupy.cuda.nvrtc)")
    from labkit.measure.compile import compile_check, target_archs
    inline = {n: k for n, k in _bindings(path).items() if k[2] == "inline"}
    assert inline, "no 'edit this kernel' cell: CUDA source in a string, compiled with cupy.RawKernel"
    files = {strip_comments(f.read_text()) for f in KERNELS.rglob("*.cu")}
    for var, (source, name, _) in inline.items():
        assert strip_comments(source) not in files, f"{var}: the inline kernel is a copy of a kernel file"
        for arch in target_archs(source):               # sm_80 and sm_90, or sm_90a for a Hopper-only kernel
            report = compile_check(source, arch)        # raises KernelCompileError, quoting the line
            assert name in report.functions, f"{name} not compiled for {arch}: {list(report.functions)}"
            assert report.functions[name].spills == 0, f"{name} spills registers on {arch}"


@pytest.mark.parametrize("path", LAB_NBS, ids=_id)
def test_raw_launches_pass_what_the_kernel_declares(path):
    """Every visible launch of a kernel bound in the notebook passes as many arguments as the kernel has
    parameters, each scalar as the NumPy scalar of its C type, and grid and block tuples of one dimension."""
    kernels = _bindings(path)
    launches = 0
    for cell in _code_cells(path):
        for call in _calls(_parse(cell.source)):
            if not (_is_launch(call) and isinstance(call.func, ast.Name) and call.func.id in kernels):
                continue
            source, name, _ = kernels[call.func.id]
            params = _signature(source, name)
            args = call.args[2]
            where = f"{path.parent.name}: {ast.unparse(call)[:120]}"
            assert isinstance(args, ast.Tuple), f"{where}: the arguments are not a tuple in view"
            assert len(args.elts) == len(params), f"{where}: {len(args.elts)} arguments for {len(params)} parameters"
            for p, a in zip(params, args.elts):
                t = _c_type(p)
                np_call = (isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute)
                           and isinstance(a.func.value, ast.Name) and a.func.value.id in ("np", "numpy", "cp", "cupy"))
                if t == "pointer":
                    assert not np_call, f"{where}: {p} is a pointer, given {ast.unparse(a)}"
                elif "TmaDesc" in t:                # a tensor map by value: the 128 bytes tensor_map() returns
                    assert not np_call, f"{where}: {p} is a tensor map, given {ast.unparse(a)}"
                else:
                    assert t in SCALARS, f"{where}: unexpected parameter type {p!r}"
                    assert np_call and a.func.attr == SCALARS[t], \
                        f"{where}: {p} must be given as np.{SCALARS[t]}(...), got {ast.unparse(a)}"
            assert all(1 <= len(t.elts) <= 3 for t in call.args[:2]), f"{where}: a grid and a block of 1-3 dimensions"
            launches += 1
    assert launches >= 3, f"only {launches} visible launches"


@pytest.mark.parametrize("path", LAB_NBS, ids=_id)
def test_timing_cells_are_tagged_and_checking_cells_are_not(path):
    for cell in _code_cells(path):
        calls = {_callee(c) for c in _calls(_parse(cell.source))}
        tagged = "nbval-ignore-output" in cell.metadata.get("tags", [])
        if calls & {"bench", "time_copy"}:
            assert tagged, f"a timing cell is not tagged nbval-ignore-output:\n{cell.source[:200]}"
        elif calls & RAW:
            assert not tagged, f"a checking cell (deterministic output) is tagged:\n{cell.source[:200]}"


def test_setup_cell_is_one_idiom_in_every_lab():
    setups = {p.parent.name: _code_cells(p)[0].source for p in LAB_NBS}
    assert len(set(setups.values())) == 1, f"the setup cells differ: {sorted(setups)}"
    setup = next(iter(setups.values()))
    assert '%pip install -q "labkit @ git+https://github.com/gpu-kernel-engineering/course"' in setup
    assert "import labkit" in setup and "print(" not in setup

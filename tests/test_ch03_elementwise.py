"""Chapter 03 without a GPU: the strided kernel's grid and its SASS, the 2-D fused GELU's SASS, the Triton
bias + GELU file (parsed, and its launcher run against stand-ins for torch and triton), and the compilers'
records degrading to a log line where torch.compile or Triton cannot run."""
import ast
import importlib.util
import re
import sys
import types
from collections import Counter

import numpy as np
import pytest

from labkit.chapters import ch03
from labkit.measure.compile import sass
from labkit.paths import KERNELS


def _opcodes(source: str, function: str, arch: str = "sm_90") -> Counter:
    """Opcode counts (first word, predicates dropped, e.g. 'MUFU.EX2', 'LDG.E.128.CONSTANT') of one
    function in the SASS of a kernel source."""
    text = sass(source, arch)
    parts = re.split(r"\n\s*Function : ", text)
    body = next(p for p in parts[1:] if p.split("\n", 1)[0].strip() == function)
    ops = []
    for ins in re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", body):
        words = ins.split()
        ops.append(words[1] if words[0].startswith("@") else words[0])
    return Counter(ops)


@pytest.mark.parametrize("n,stride", [(1, 1), (1000, 1), (2 ** 26, 1), (2 ** 26, 512), (1_000_003, 7), (5, 1024)])
def test_the_strided_grid_covers_every_row_and_column_once(n, stride):
    gx, gy = ch03.strided_grid(n, stride)
    rows = -(-n // stride)
    assert gy == stride and gx * 256 >= rows > (gx - 1) * 256
    if stride == 1:                                   # chapter 02's naive grid: ceil(n / 256) blocks
        assert (gx, gy) == (-(-n // 256), 1)


def test_the_strided_kernel_maps_threads_without_a_division():
    ops = _opcodes(ch03.ADD_STRIDED, "add_bf16_strided")
    naive = _opcodes("02-first-kernel/01_add_bf16.cu", "add_bf16")
    assert not any(op.startswith(("CALL", "MUFU", "I2F", "F2I")) for op in ops), ops   # no division, fast or slow
    loads = {op: c for op, c in ops.items() if op.startswith(("LDG", "STG"))}
    assert loads == {op: c for op, c in naive.items() if op.startswith(("LDG", "STG"))}
    assert sum(ops.values()) <= sum(naive.values()) + 8, (ops, naive)


def test_the_2d_fused_gelu_uses_bare_ex2_and_rcp_and_16_byte_accesses():
    ops = _opcodes(ch03.BIAS_GELU_FUSED_2D, "bias_gelu_fused_2d")
    per_pass = 8 * ch03.FUSED_2D_ROWS                 # elements one trip through the row loop computes
    assert ops["MUFU.EX2"] == ops["MUFU.RCP"] == per_pass, ops
    assert not any(op.startswith("CALL") for op in ops)
    assert ops["STG.E.128"] == ch03.FUSED_2D_ROWS
    assert ops["LDG.E.128.CONSTANT"] == ch03.FUSED_2D_ROWS + 1          # x of each row, and the biases once
    scalar = _opcodes(ch03.BIAS_GELU_FUSED_2D, "bias_gelu_fused_2d_scalar")
    assert scalar["MUFU.EX2"] == scalar["MUFU.RCP"] == ch03.FUSED_2D_ROWS


# ------------------------------------------------------------------------------------ the Triton file

TRITON_FILE = KERNELS / ch03.TRITON_BIAS_GELU


def test_the_triton_file_parses_and_defines_its_kernel_and_launcher():
    tree = ast.parse(TRITON_FILE.read_text())
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert {"_bias_gelu_kernel", "bias_gelu_triton", "tile", "_check"} <= set(funcs)
    deco = funcs["_bias_gelu_kernel"].decorator_list
    assert any(ast.unparse(d) == "triton.jit" for d in deco)
    assert ast.get_docstring(tree).startswith("Chapter 03")


class FakeTensor:
    """What the launcher reads of a torch tensor: shape, dtype, device, layout, strides."""

    def __init__(self, shape, dtype="bf16", cuda=True, contiguous=True):
        self.shape = tuple(shape)
        self.dtype, self.is_cuda, self._contiguous = dtype, cuda, contiguous

    def dim(self):
        return len(self.shape)

    def is_contiguous(self):
        return self._contiguous

    def stride(self, d):
        return int(np.prod(self.shape[d + 1:], dtype=np.int64))


@pytest.fixture
def triton_file(monkeypatch):
    """06_triton_bias_gelu.py imported against stand-ins for torch and triton: `triton.jit` returns an object
    that records each launch (grid, arguments) instead of compiling."""
    launches = []

    class Jitted:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kw: launches.append((grid, args, kw))

    triton = types.ModuleType("triton")
    triton.jit = Jitted
    triton.cdiv = lambda a, b: -(-a // b)
    triton.next_power_of_2 = lambda n: 1 << max(0, (int(n) - 1).bit_length())
    tl = types.ModuleType("triton.language")
    tl.constexpr = type("constexpr", (), {})
    triton.language = tl
    torch = types.ModuleType("torch")
    torch.Tensor = FakeTensor
    torch.empty_like = lambda x: FakeTensor(x.shape, x.dtype)
    for name, mod in (("torch", torch), ("triton", triton), ("triton.language", tl)):
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("triton_bias_gelu_under_test", TRITON_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.launches = launches
    return mod


def test_the_triton_launcher_rejects_bad_inputs_before_launching(triton_file):
    t = triton_file
    x, b = FakeTensor((4, 1000)), FakeTensor((1000,))
    bad = [((FakeTensor((4, 1000), cuda=False), b), "CUDA"), ((FakeTensor((4000,)), b), "2-D"),
           ((FakeTensor((4, 1000), contiguous=False), b), "contiguous"), ((x, FakeTensor((999,))), r"\(1000,\)"),
           ((x, FakeTensor((1000,), dtype="fp32")), "dtype"), ((x, FakeTensor((1000,), cuda=False)), "CUDA")]
    for args, msg in bad:
        with pytest.raises(ValueError, match=msg):
            t.bias_gelu_triton(*args)
    for out in (FakeTensor((4, 999)), FakeTensor((4, 1000), dtype="fp32"), FakeTensor((4, 1000), cuda=False)):
        with pytest.raises(ValueError, match="out must be"):
            t.bias_gelu_triton(x, b, out=out)
    assert t.launches == []
    assert t.bias_gelu_triton(FakeTensor((0, 1000)), b).shape == (0, 1000) and t.launches == []


@pytest.mark.parametrize("M,N", [(1, 1), (3, 5), (129, 1000), (257, 4104), (16384, 8192)])
def test_the_triton_launch_covers_the_matrix_in_tiles(triton_file, M, N):
    t = triton_file
    y = t.bias_gelu_triton(FakeTensor((M, N)), FakeTensor((N,)))
    assert y.shape == (M, N)
    (grid,), args, kw = t.launches[-1][0], t.launches[-1][1], t.launches[-1][2]
    bm, bn = kw["BLOCK_M"], kw["BLOCK_N"]
    assert bm * bn == t.ELEMENTS and bn & (bn - 1) == 0 and bm & (bm - 1) == 0
    assert bn >= min(N, t.BLOCK_N_MAX) and bn <= max(16, 2 * N)
    assert grid == -(-M // bm) * -(-N // bn)
    assert args[3:7] == (M, N, N, N)                  # M, N and the row strides of x and y


# ------------------------------------------------------------------------------- degrading cleanly

class Log:
    def __init__(self):
        self.log = []


def test_the_compilers_records_degrade_to_log_lines(monkeypatch):
    """torch.compile raising (no compiler backend) and Triton missing: no record, a line for each."""
    fake = types.ModuleType("torch")
    fake.nn = types.SimpleNamespace(functional=types.SimpleNamespace(gelu=lambda *a, **k: None))
    fake.bfloat16 = "bf16"
    fake.from_dlpack = lambda a: FakeTensor(a.shape)
    monkeypatch.setattr(FakeTensor, "view", lambda self, dtype: self, raising=False)
    monkeypatch.setitem(sys.modules, "torch", fake)          # ch02.torch_bf16 imports it

    def no_backend(fn, **kw):
        raise RuntimeError("no working C compiler")
    fake.compile = no_backend

    def no_triton():
        raise ImportError("No module named 'triton'")
    monkeypatch.setattr(ch03, "triton_kernels", no_triton)
    ctx = Log()
    x, b = np.zeros((4, 8), np.uint16), np.zeros(8, np.uint16)
    assert ch03.compiled_bias_gelu(ctx, fake, x, b) == {}
    assert any("torch.compile of bias + GELU failed" in line and "no torch_compile record" in line for line in ctx.log)
    assert any("Triton bias + GELU skipped" in line for line in ctx.log)


def test_a_triton_that_cannot_build_degrades_to_a_log_line(monkeypatch):
    """Triton imports but its first launch fails (no working compiler for this GPU): no record, one line."""
    fake = types.ModuleType("torch")
    fake.nn = types.SimpleNamespace(functional=types.SimpleNamespace(gelu=lambda *a, **k: None))
    fake.bfloat16 = "bf16"
    fake.from_dlpack = lambda a: FakeTensor(a.shape)
    fake.compile = lambda fn, **kw: (_ for _ in ()).throw(RuntimeError("no backend"))
    monkeypatch.setattr(FakeTensor, "view", lambda self, dtype: self, raising=False)
    monkeypatch.setattr(FakeTensor, "__getitem__", lambda self, k: self, raising=False)
    monkeypatch.setitem(sys.modules, "torch", fake)

    def cannot_build(*a, **k):
        raise RuntimeError("PTX compilation failed")
    monkeypatch.setattr(ch03, "triton_kernels", lambda: types.SimpleNamespace(bias_gelu_triton=cannot_build))
    ctx = Log()
    assert ch03.compiled_bias_gelu(ctx, fake, np.zeros((4, 8), np.uint16), np.zeros(8, np.uint16)) == {}
    assert any("Triton bias + GELU could not run" in line and "no triton record" in line for line in ctx.log)

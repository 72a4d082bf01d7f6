"""Chapter 04 without a GPU: the launch plans of the register kernels, and the SASS of the register
LayerNorm (the row read from memory once, two barriers, no local memory)."""
import ast
import re
from collections import Counter

import pytest

from labkit.chapters import ch04
from labkit.measure.compile import sass
from labkit.paths import KERNELS


@pytest.mark.parametrize("N,plan", [(4096, (7, 256)), (1000, (5, 256)), (8192, (8, 256)), (16384, (9, 512)),
                                    (16392, None), (32768, None), (4095, None)])
def test_the_register_layernorm_plan(N, plan):
    """4 vectors per thread: 128 threads for a row of 4096 (two rows per 256-thread block), up to 512 threads
    (N = 16384); longer rows and N % 8 != 0 go to Welford's chunked kernel."""
    assert ch04._regs_plan(N, ch04.LN_REGS_VPT, ch04.LN_REGS_MAX_BLOCK) == plan


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_register_layernorm_reads_the_row_once(arch):
    text = sass(ch04.LAYERNORM_REGS, arch)
    ops = Counter()
    for ins in re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", text):
        words = ins.split()
        ops[(words[1] if words[0].startswith("@") else words[0]).split(".")[0]] += 1
    vpt = ch04.LN_REGS_VPT
    assert ops["LDG"] == 3 * vpt            # x, w and b: one 16-byte load each per vector, no re-read of x
    assert ops["BAR"] == 2                  # the mean, then the variance
    assert ops["LDL"] == ops["STL"] == 0


def test_the_triton_file_of_chapter_04_parses():
    tree = ast.parse((KERNELS / ch04.TRITON_SOURCE).read_text())
    names = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert {"_softmax_kernel", "_rmsnorm_kernel", "softmax_triton", "rmsnorm_triton"} <= names

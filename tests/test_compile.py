"""Every kernel compiles without a GPU (NVRTC from the pip wheels) for its targets, with no register spills."""
from pathlib import Path

import pytest

from labkit.measure.compile import compile_check, format_compile_error, read_source, target_archs
from labkit.errors import KernelCompileError
from labkit.paths import KERNELS

KERNEL_FILES = sorted(KERNELS.rglob("*.cu"))


def test_every_chapter_has_its_kernels_and_every_named_kernel_exists():
    """Each chapter module's kernel folder holds kernels, and every kernel file a chapter module names is there."""
    from labkit import chapters
    from labkit.paths import chapter_dir
    from labkit.runner.provenance import KERNEL_REF, _module_text
    for ch in chapters.numbers():
        assert list(chapter_dir(KERNELS, ch).glob("*.cu")), f"chapter {ch} has no kernel files"
        for rel in KERNEL_REF.findall(_module_text(f"labkit/chapters/ch{ch}.py")):
            assert (KERNELS / rel).is_file(), f"labkit/chapters/ch{ch}.py names {rel}, which does not exist"


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: str(p.relative_to(KERNELS)))
def test_kernel_compiles_without_spills(path: Path):
    source, _ = read_source(str(path))
    assert source.lstrip().startswith("//"), f"{path.name} must open with a comment: idea, prediction, result"
    for arch in target_archs(source):
        report = compile_check(str(path), arch)
        assert report.functions, f"{path.name}: no kernel reported for {arch}"
        for fn in report.functions.values():
            assert fn.spills == 0, f"{path.name} [{arch}] {fn.name} spills {fn.spill_stores}/{fn.spill_loads} bytes"
            assert fn.registers > 0


def test_sm90a_target_is_honoured():
    assert target_archs("// requires: sm_90a\n__global__ void k(){}") == ("sm_90a",)
    assert target_archs("__global__ void k(){}") == ("sm_80", "sm_90")


def test_compile_error_quotes_the_learners_line():
    src = 'extern "C" __global__ void k(float* y) {\n    int i = threadIdx.x;\n    y[i] = undefined_name;\n}\n'
    with pytest.raises(KernelCompileError) as e:
        compile_check(src, "sm_90")
    msg = str(e.value)
    assert "line 3" in msg and "undefined_name" in msg and "y[i] = undefined_name;" in msg
    # the rendered traceback in IPython is the message alone
    assert all("labkit" not in line for line in e.value._render_traceback_())


def test_bf16_header_is_found_without_a_toolkit():
    rep = compile_check('#include <cuda_bf16.h>\nextern "C" __global__ void k(__nv_bfloat16* y)'
                        '{ y[threadIdx.x] = __float2bfloat16(1.f); }', "sm_80")
    assert rep.functions["k"].registers > 0


def test_report_parses_shared_memory_and_barriers():
    rep = compile_check('extern "C" __global__ void k(float* y){ __shared__ float s[256]; '
                        's[threadIdx.x] = y[threadIdx.x]; __syncthreads(); y[threadIdx.x] = s[255 - threadIdx.x]; }',
                        "sm_90")
    assert rep.functions["k"].shared_bytes == 1024
    assert rep.functions["k"].barriers == 1
    assert "k" in str(rep)


def test_unparsed_compiler_output_is_shown_verbatim():
    assert "something odd" in format_compile_error("something odd happened", "", "x.cu")


def test_compile_check_bypasses_nvrtcs_cache(monkeypatch):
    # NVRTC 12.9+ serves repeated compiles from a disk cache once a driver is loaded, and then its log has
    # no ptxas report (seen on the H200: an empty compile-check table in lab 01 under nbval).
    import labkit.measure.compile as comp
    from cupy.cuda import nvrtc
    seen = []
    real = comp._nvrtc_compile

    def spy(source, name, opts):
        seen.append(list(opts))
        return real(source, name, opts)
    monkeypatch.setattr(comp, "_nvrtc_compile", spy)
    report = compile_check("01-roofline/03_copy_vec128_flat.cu", "sm_90")
    assert report.functions["copy_vec128_flat"].registers > 0
    assert ("--no-cache" in seen[0]) == (tuple(nvrtc.getVersion()) >= (12, 9)), seen[0]

"""labkit's logic without a GPU: timing arithmetic, records, roofline geometry, bf16, checks, errors."""
import json
import math

import numpy as np
import pytest

from labkit.measure import bf16
from labkit.measure.ceilings import DATASHEET, datasheet_for, fp32_peak_tflops, ridge_point, table
from labkit.errors import NoGPUError
from labkit.measure.checks import compare
from labkit.measure.records import Record
from labkit.measure.roofline import figure, plot, roof
from labkit.measure.timing import summarize
from labkit.runner.results import load_results, put_records


def test_summarize_median_and_iqr():
    t = summarize([5.0, 1.0, 2.0, 3.0, 4.0])
    assert t.median_ms == 3.0 and t.min_ms == 1.0 and t.max_ms == 5.0 and t.reps == 5
    assert t.spread_ms == pytest.approx(2.0)           # quartiles 2 and 4
    assert summarize([2.0, 1.0]).spread_ms == 1.0
    with pytest.raises(ValueError):
        summarize([])


def _rec(**kw):
    base = dict(chapter="03", op="add_bf16", kernel="vec128", shape=[1 << 28], dtype="bfloat16",
                bytes=6 << 28, flops=1 << 28, median_ms=0.4, spread_ms=0.01, baseline="torch.add",
                baseline_median_ms=0.8, ceiling_name="copy", ceiling_value=4000.0, recorded_at="2026-11-30T00:00:00+00:00")
    base.update(kw)
    return Record(**base)


def test_record_rates_fraction_and_speedup():
    r = _rec()
    assert r.gbps == pytest.approx((6 << 28) / 0.4e-3 / 1e9)
    assert r.fraction_of_ceiling == pytest.approx(r.gbps / 4000.0)
    same = _rec(copy_ms=0.5, ceiling_value=(6 << 28) / 0.5e-3 / 1e9)     # a same-size copy took 0.5 ms
    assert same.copy_gbps == pytest.approx(same.ceiling_value) and same.fraction_of_ceiling == pytest.approx(0.5 / 0.4)
    assert r.speedup == pytest.approx(2.0)
    assert r.intensity == pytest.approx(1 / 6)
    f = _rec(op="fma", bytes=0, flops=10 ** 12, median_ms=20.0, ceiling_name="fp32_peak", ceiling_value=60.0)
    assert f.tflops == pytest.approx(50.0) and f.fraction_of_ceiling == pytest.approx(50 / 60)


def test_results_round_trip_and_chapter_replacement(tmp_path):
    p = tmp_path / "gpu.json"
    gpu = {"name": "Fake GPU", "slug": "fake-gpu"}
    put_records(p, gpu, {"copy_gbps": 1.0}, [_rec(chapter="01"), _rec(chapter="03")])
    put_records(p, gpu, {"copy_gbps": 2.0}, [_rec(chapter="03", kernel="new")])
    data = load_results(p)
    assert [(r.chapter, r.kernel) for r in data["records"]] == [("01", "vec128"), ("03", "new")]
    raw = json.loads(p.read_text())
    needed = {"chapter", "op", "kernel", "shape", "dtype", "bytes", "flops", "median_ms", "spread_ms", "baseline",
              "baseline_median_ms", "ceiling_name", "ceiling_value", "fraction_of_ceiling", "recorded_at"}
    assert needed <= set(raw["records"][0])
    assert data["ceilings"]["copy_gbps"] == 2.0
    assert data["chapter_ceilings"] == {"01": {"copy_gbps": 1.0}, "03": {"copy_gbps": 2.0}}


def test_a_chapter_page_quotes_the_ceilings_of_its_own_run(tmp_path, monkeypatch):
    import labkit.runner.report as report
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    gpu = {"name": "Fake GPU", "slug": "fake-gpu", "compute_capability": "9.0", "sm_count": 132}
    full = {"copy_gbps": 4000.0, "fp32_tflops": 60.0, "bf16_tflops": 800.0, "measured_at": "2026-11-30T10:00:00"}
    put_records(tmp_path / "fake-gpu.json", gpu, full, [_rec(chapter="01", ceiling_value=4000.0)])
    later = dict(full, copy_gbps=4100.0, measured_at="2026-11-30T11:00:00")
    put_records(tmp_path / "fake-gpu.json", gpu, later, [_rec(chapter="03", ceiling_value=4100.0)])
    assert report.Recorded("01", "fake-gpu").values()["ceiling.copy_gbps"] == 4000.0    # not the later run's
    assert report.Recorded("03", "fake-gpu").values()["ceiling.copy_gbps"] == 4100.0
    # a file written before ceilings were kept per chapter: the copy ceiling comes from the chapter's records
    raw = json.loads((tmp_path / "fake-gpu.json").read_text())
    del raw["chapter_ceilings"]
    (tmp_path / "fake-gpu.json").write_text(json.dumps(raw))
    old = report.Recorded("01", "fake-gpu")
    assert old.values()["ceiling.copy_gbps"] == 4000.0 and old.same_run == {"copy_gbps"}


def test_roofline_geometry():
    assert ridge_point(312, 2000) == pytest.approx(156)            # A100: 312 TFLOP/s over 2.0 TB/s
    assert roof(1.0, 2000, 312) == pytest.approx(2.0)              # memory-bound: 1 FLOP/B x 2 TB/s
    assert roof(1000, 2000, 312) == 312                            # compute-bound
    assert roof(ridge_point(312, 2000), 2000, 312) == pytest.approx(312)
    assert fp32_peak_tflops(132, "9.0", 1980) == pytest.approx(66.9, rel=1e-3)
    assert fp32_peak_tflops(108, "8.0", 1410) == pytest.approx(19.5, rel=1e-2)   # A100: 64 lanes per SM


def test_datasheet_lookup_and_table():
    assert datasheet_for("NVIDIA H200")[0] == "H200"
    assert datasheet_for("NVIDIA H100 80GB HBM3")[0] == "H100 SXM"
    assert datasheet_for("NVIDIA A100-SXM4-80GB")[0] == "A100 SXM"
    assert datasheet_for("Tesla T4")[0] == "T4" and datasheet_for("NVIDIA L4")[0] == "L4"
    assert datasheet_for("NVIDIA GeForce RTX 4090")[0] == "RTX 4090"
    assert datasheet_for("Some Other GPU") is None
    t = table({"copy_gbps": 4000, "fp32_tflops": 60, "bf16_tflops": 800, "gpu": "NVIDIA H200"})
    assert all(name in t for name in DATASHEET) and "(measured)" in t


def _texts(fig):
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_roofline_draws_measured_points_numbered_and_bounds_hollow(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    ceil = {"copy_gbps": 4100, "fp32_tflops": 65, "mma_tflops": 630, "bf16_tflops": 790}
    gemm = _rec(op="sgemm", kernel="warptile", flops=2 * 4096 ** 3, bytes=3 * 4 * 4096 ** 2, median_ms=3.0,
                ceiling_name="fp32", ceiling_value=65.0)
    bound = {"label": "GEMM 4096^3 at the fp32 roof", "intensity": 683.0, "tflops": 65.0, "kind": "bound"}
    fig = figure([_rec(), gemm], ceil, DATASHEET["H200"], extra=[bound], title="t")
    text = _texts(fig)
    assert "1  add_bf16: vec128" in text and "2  sgemm: warptile" in text
    assert "3  GEMM 4096^3 at the fp32 roof (bound, not measured)" in text
    roof_ax = fig.axes[0]
    labels = [l.get_label() for l in roof_ax.get_lines()]
    assert any(l.startswith("measured fp32 FMA: 65") for l in labels)
    assert any(l.startswith("measured bf16 mma.sync: 630") for l in labels)
    assert any(l.startswith("datasheet") for l in labels)
    hollow = [l for l in roof_ax.get_lines() if l.get_marker() == "o" and l.get_markerfacecolor() == "none"]
    assert len(hollow) == 1 and hollow[0].get_xdata()[0] == 683.0
    assert roof_ax.get_xscale() == "log" and roof_ax.get_yscale() == "log"
    fig.savefig(tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 10_000


def test_kernels_without_flops_are_on_the_bandwidth_chart():
    import matplotlib
    matplotlib.use("Agg")
    copy = _rec(op="copy", kernel="copy_vec128", flops=0, copy_ms=0.41, ceiling_value=(6 << 28) / 0.41e-3 / 1e9)
    transpose = _rec(op="smem_transpose", kernel="padded", flops=0, median_ms=0.5, copy_ms=0.45,
                     ceiling_value=(6 << 28) / 0.45e-3 / 1e9)
    fig = figure([copy, transpose], {"copy_gbps": 4100, "fp32_tflops": 65})
    bars = fig.axes[-1]
    assert {t.get_text() for t in bars.get_yticklabels()} == {"copy: copy_vec128", "smem_transpose: padded"}
    widths = sorted(round(p.get_width(), 1) for p in bars.patches)
    assert widths == [90.0, 102.5]                      # 0.45/0.5 and 0.41/0.4 of a same-size copy


def test_bf16_round_trip_rounds_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, np.nan, 3.0e38], dtype=np.float32)
    bits = bf16.to_bits(x)
    assert bits.dtype == np.uint16
    back = bf16.from_bits(bits)
    assert back[0] == 1.0 and back[1] == 1.0            # tie -> even
    assert back[2] == pytest.approx(1.015625)           # tie -> even (up)
    assert back[3] == -2.5 and np.isinf(back[4]) and np.isnan(back[5])
    assert np.all(bf16.round_trip(back[:4]) == back[:4])


def test_compare_names_the_first_wrong_element():
    ref = np.arange(12, dtype=np.float64)
    got = ref.copy()
    got[7] = 100.0
    got[9] = np.nan
    m = compare(got, ref, dtype="float32")
    assert m.count == 2 and m.first == "[7]" and m.expected == 7.0 and m.got == 100.0
    assert str(m) == "2 of 12 elements wrong; first at [7]: expected 7, got 100"
    m2 = compare(got, ref, dtype="float32", shape=(3, 4))
    assert m2.first == "[1, 3]"
    assert compare(ref, ref, dtype="float32") is None


def test_compare_nan_and_inf_must_match():
    ref = np.array([np.nan, np.inf, 1.0])
    assert compare(np.array([np.nan, np.inf, 1.0]), ref) is None
    assert compare(np.array([0.0, np.inf, 1.0]), ref).first == "[0]"
    assert compare(np.array([np.nan, -np.inf, 1.0]), ref).first == "[1]"


def test_bf16_tolerance_is_looser_than_fp32():
    ref = np.linspace(1, 2, 100)
    got = ref * (1 + 4e-3)
    assert compare(got, ref, dtype="bfloat16") is None
    assert compare(got, ref, dtype="float32") is not None


def test_no_gpu_error_says_what_still_works():
    msg = str(NoGPUError("timing a kernel"))
    assert "timing a kernel needs a CUDA GPU" in msg and "compile" in msg and "recorded" in msg


def test_cli_lists_the_verbs(capsys):
    from labkit.__main__ import main
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for verb in ("info", "compile-check", "ceilings", "bench", "gpu-check", "stale", "release", "grade"):
        assert verb in out, verb


def test_info_without_gpu(capsys):
    from labkit.__main__ import main
    from labkit.measure.device import has_gpu
    if has_gpu():
        pytest.skip("this test describes the no-GPU path")
    assert main(["info"]) == 0
    assert "No CUDA GPU visible" in capsys.readouterr().out


def test_roofline_labels_a_kernel_measured_at_two_shapes_apart_and_stays_readable_with_many_points():
    import matplotlib
    matplotlib.use("Agg")
    recs = [_rec(op="softmax", kernel="regs", shape=[65536, 4096]), _rec(op="softmax", kernel="regs", shape=[16384, 32768])]
    recs += [_rec(kernel=f"k{i}", flops=(1 << 28) * (i + 1)) for i in range(18)]
    fig = figure(recs, {"copy_gbps": 4100, "fp32_tflops": 65, "bf16_tflops": 790})
    text = _texts(fig)
    assert "softmax: regs @ 65536x4096" in text and "softmax: regs @ 16384x32768" in text
    numbers = [t.get_text() for t in fig.axes[0].texts if t.get_text().isdigit()]
    assert numbers == [str(i) for i in range(1, 21)], "each of 20 points carries its number"


def test_roofline_axis_widens_to_show_every_point():
    import matplotlib
    matplotlib.use("Agg")
    ax = plot([{"label": "huge GEMM", "intensity": 40000.0, "tflops": 780.0}],
              {"copy_gbps": 4100, "fp32_tflops": 65, "bf16_tflops": 790})
    assert ax.get_xlim()[1] >= 40000


def test_gpu_verbs_without_gpu_say_so_and_exit_2(capsys, monkeypatch):
    import labkit.measure.device as device
    from labkit.__main__ import main
    monkeypatch.setattr(device, "has_gpu", lambda: False)     # the same path on a machine with a GPU
    assert main(["gpu-check", "--only", "execute"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("NoGPUError: gpu-check needs a CUDA GPU") and "Traceback" not in err


def test_pooled_timing_holds_every_run_and_falls_back_without_runs():
    from labkit.measure.timing import Timing, pooled, summarize
    a, b = summarize([1.0, 2.0, 3.0]), summarize([4.0, 5.0])
    p = pooled([a, b])
    assert p.reps == 5 and p.median_ms == 3.0 and p.samples == (1.0, 2.0, 3.0, 4.0, 5.0)
    profiled = Timing(1.0, 0.0, 1.0, 1.0, 1, profile_id=7)
    assert pooled([profiled, profiled]) is profiled       # under the profiler a Timing holds no runs

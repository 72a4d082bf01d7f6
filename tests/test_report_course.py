"""report.Course without a GPU: picks of the committed H200 results, their table, glued values and figure."""
import pytest

from labkit.runner import report

PICKS = [
    ("02", "add_bf16", "naive", None, "add_naive"),                                   # memory-bound, one shape
    ("05", "sgemm", "cublas_fp32", None, "cublas_fp32"),                              # a library, no baseline
    ("07", "gemm_bf16", "pingpong", "4096x4096x4096", "pingpong_4096"),               # compute-bound, a named shape
    ("09", "decode_attention", "paged_mma", None, "decode_b64"),                      # the headline shape
    ("09", "decode_attention", "paged_mma", "1x32x4x32768x128x16", "decode_b1"),      # the same kernel, batch 1
]


@pytest.fixture(scope="module")
def course():
    return report.Course(PICKS)


def _record(chapter, op, kernel, shape):
    return next(r for r in report.Recorded(chapter).rows(op) if r.kernel == kernel and r.shape_key == shape)


def test_each_pick_is_the_record_it_names(course):
    got = [(label, chapter, r.op, r.kernel, r.shape_key) for label, chapter, r in course.picks]
    assert got == [("add_naive", "02", "add_bf16", "naive", "268435456"),
                   ("cublas_fp32", "05", "sgemm", "cublas_fp32", "4096x4096x4096"),
                   ("pingpong_4096", "07", "gemm_bf16", "pingpong", "4096x4096x4096"),
                   ("decode_b64", "09", "decode_attention", "paged_mma", "64x32x4x32768x128x16"),
                   ("decode_b1", "09", "decode_attention", "paged_mma", "1x32x4x32768x128x16")]
    assert set(course.chapters) == {"02", "05", "07", "09"}          # each chapter's records loaded once


def test_table_has_one_row_per_pick_with_its_rate_ceiling_and_baseline(course):
    lines = course.table().data.strip().splitlines()
    assert lines[0].startswith("| ch | pick | record | shape | median ms |") and len(lines) == 2 + len(PICKS)
    rows = {cells[1]: cells for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])}
    naive = _record("02", "add_bf16", "naive", "268435456")
    assert rows["add_naive"][0] == "02" and rows["add_naive"][2] == "add_bf16: naive"
    assert rows["add_naive"][4] == f"{naive.median_ms:.4f}" and rows["add_naive"][5] == f"{naive.gbps:.0f} GB/s"
    assert rows["add_naive"][6] == f"{100 * naive.fraction_of_ceiling:.1f}% of a {naive.ceiling_value:.0f} GB/s copy"
    assert rows["add_naive"][7] == f"{naive.speedup:.2f}× torch.add"
    ping = _record("07", "gemm_bf16", "pingpong", "4096x4096x4096")
    assert rows["pingpong_4096"][5] == f"{ping.tflops:.3g} TFLOP/s"                   # compute-bound: TFLOP/s
    assert rows["pingpong_4096"][6] == f"{100 * ping.fraction_of_ceiling:.1f}% of the wgmma bf16 probe"
    assert rows["pingpong_4096"][7].endswith("× cuBLAS bf16")
    assert rows["cublas_fp32"][7] == ""                                                 # the library itself
    assert rows["decode_b1"][3].startswith("1x32x4x32768x128x16")


def test_values_are_the_records_own_figures(course):
    v = course.values()
    b1 = _record("09", "decode_attention", "paged_mma", "1x32x4x32768x128x16")
    assert v["course.decode_b1.pct"] == pytest.approx(100 * b1.fraction_of_ceiling)
    assert v["course.decode_b1.xbase"] == pytest.approx(b1.speedup)
    assert v["course.decode_b1.gbps"] == pytest.approx(b1.gbps) and "course.decode_b1.tflops" not in v
    ch09 = report.Recorded("09").values()                       # the chapter page's keys say the same
    assert v["course.decode_b64.pct"] == pytest.approx(ch09["decode_attention.paged_mma.pct"])
    assert v["course.pingpong_4096.tflops"] == pytest.approx(
        report.Recorded("07").values()["gemm_bf16.pingpong@4096x4096x4096.tflops"])
    assert "course.pingpong_4096.gbps" not in v and "course.cublas_fp32.xbase" not in v
    assert v["course.add_naive.ms"] == pytest.approx(_record("02", "add_bf16", "naive", "268435456").median_ms)


@pytest.mark.parametrize("pick, words", [
    (("09", "decode_attention", "paged_mma", "2x32x4x32768x128x16", "x"), ["09", "'decode_attention'", "'paged_mma'",
                                                                          "2x32x4x32768x128x16"]),
    (("05", "sgemm", "no_such_rung", None, "x"), ["05", "'sgemm'", "'no_such_rung'", "headline shape"]),
    (("04", "no_such_op", "regs", "65536x4096", "x"), ["04", "'no_such_op'", "'regs'", "65536x4096"]),
    (("99", "copy", "copy_vec128", None, "x"), ["99", "'copy'", "'copy_vec128'"]),
])
def test_a_pick_without_a_record_names_what_it_asked_for(pick, words):
    with pytest.raises(LookupError) as e:
        report.Course([pick])
    assert all(w in str(e.value) for w in words), str(e.value)


def test_labels_must_be_new_glue_names():
    with pytest.raises(ValueError):
        report.Course([PICKS[0], ("03", "add_bf16", "naive", None, "add_naive")])
    with pytest.raises(ValueError):
        report.Course([("02", "add_bf16", "naive", None, "add naive")])


def test_roofs_are_the_latest_runs_with_a_wgmma_roof(course):
    import json
    raw = json.loads((report.RESULTS / f"{report.DEFAULT_GPU}.json").read_text())
    assert course.ceilings["copy_gbps"] == raw["ceilings"]["copy_gbps"]
    assert course.ceilings["wgmma_tflops"] in {c.get("wgmma_tflops") for c in
                                               [raw["ceilings"], *raw["chapter_ceilings"].values()]}


def test_the_figure_draws_every_pick(course, tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    fig = course.figure()
    text = "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)
    for label in ("02: add_naive", "05: cublas_fp32", "07: pingpong_4096", "09: decode_b64", "09: decode_b1"):
        assert label in text, label
    lines = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert any(ln.startswith("measured bf16 wgmma") for ln in lines)
    assert any(ln.startswith("measured bf16 mma.sync") for ln in lines)
    bars = {t.get_text() for t in fig.axes[-1].get_yticklabels()}
    assert bars == {"02: add_naive", "09: decode_b64", "09: decode_b1"}                 # the memory-bound picks
    fig.savefig(tmp_path / "course.png")
    assert (tmp_path / "course.png").stat().st_size > 10_000


def test_a_chapter_table_reads_as_a_ladder():
    # chapter 10: the headline shape (4096 x 128256) first, then 16384 x 32000; each slowest to fastest
    rows = report.Recorded("10").ladder("cross_entropy")
    shapes = [r.shape_key for r in rows]
    assert shapes == sorted(shapes, key=lambda k: k != "4096x128256") and shapes[0] == "4096x128256"
    for shape in set(shapes):
        ms = [r.median_ms for r in rows if r.shape_key == shape]
        assert ms == sorted(ms, reverse=True) and len(ms) >= 4
    assert [r.kernel for r in rows if r.shape_key == "4096x128256"][-1] == "fused"
    table = report.Recorded("10").table("cross_entropy").data
    assert table.index("torch_eager") < table.index("| fused")

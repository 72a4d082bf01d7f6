"""Chapter 02 on the CPU: the names of the launch sweep's records and the per-block cost the book reads
from them."""
from __future__ import annotations

import pytest

from labkit.chapters import ch02
from labkit.measure.records import Record


def sweep_record(threads: int, ept: int, ms: float, n: int = 2**26, op: str = "add_bf16_launch") -> Record:
    return Record(chapter="02", op=op, kernel=ch02.launch_kernel_name(threads, ept), shape=[n],
                  dtype="bfloat16", bytes=6 * n, flops=n, median_ms=ms, spread_ms=0.0, baseline=None,
                  baseline_median_ms=None, ceiling_name="copy", ceiling_value=4000.0,
                  recorded_at="2026-12-01T00:00:00+00:00")


def test_launch_records_are_named_by_threads_and_elements_per_thread():
    assert ch02.launch_kernel_name(32, 1) == "t0032_ept1"
    assert ch02.launch_kernel_name(1024, 8) == "t1024_ept8"
    assert ch02.launch_of("t0032_ept1") == (32, 1) and ch02.launch_of(ch02.launch_kernel_name(1024, 8)) == (1024, 8)
    assert sorted(ch02.launch_kernel_name(t, e) for t in ch02.SWEEP_THREADS for e in ch02.SWEEP_EPT) == \
        sorted({ch02.launch_kernel_name(t, e) for t in ch02.SWEEP_THREADS for e in ch02.SWEEP_EPT})


def test_block_cost_is_the_time_over_the_blocks_each_sm_runs():
    n, sms = 2**26, 132
    # 80 ns a block: the time of each small-block run is blocks / SMs x 80 ns
    recs = [sweep_record(t, 1, (n / t / sms) * 80e-6) for t in (32, 64, 128)]
    recs += [sweep_record(256, 1, 0.2), sweep_record(32, 2, 9.9), sweep_record(32, 1, 9.9, op="add_bf16")]
    got = ch02.block_cost_ns(recs, sms)
    assert list(got) == [32, 64, 128]
    assert got == pytest.approx({32: 80.0, 64: 80.0, 128: 80.0})

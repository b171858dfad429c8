"""Ceilings that are not circular: a datasheet figure AND a measured peak (best of several GEMM shapes,
SM clock recorded), both in the results file; old files (one torch.mm median) still load."""

import json

import pytest
import torch

from tilerosetta.bench import ceilings, results, timing
from tilerosetta.bench.ceilings import Ceilings


def test_datasheet_table_knows_hopper_and_says_when_it_does_not():
    sheet, source = ceilings.datasheet_for("NVIDIA H200")
    assert sheet["bf16"] == pytest.approx(989.4) and sheet["fp16"] == pytest.approx(989.4)
    assert sheet["fp32"] == pytest.approx(494.7) and "H200" in source
    assert ceilings.datasheet_for("NVIDIA H100 80GB HBM3")[0]["bf16"] == pytest.approx(989.4)
    for unknown in ("NVIDIA H200 NVL", "Tesla T4", None):  # NVL: a lower-power part, not the SXM figure
        sheet, why = ceilings.datasheet_for(unknown)
        assert sheet == {} and "no datasheet figure" in why


def _fake_gemm_timer(rate_by_shape):
    """time_gpu stand-in: the median of a GEMM is what `rate_by_shape` (TFLOP/s) says for its shape."""
    def time_gpu(fn, **kw):
        fn()
        c = fn()
        m, n = c.shape
        k = next(k for (mm, nn, k) in rate_by_shape if (mm, nn) == (m, n))
        ms = 2 * m * n * k / (rate_by_shape[(m, n, k)] * 1e12) * 1e3
        return timing.summarize([ms] * 3, timing.GRAPH)
    return time_gpu


def test_measured_peak_is_the_best_shape_and_clocks_are_recorded(monkeypatch):
    shapes = ((64, 32, 16), (128, 32, 16), (64, 48, 32))  # distinct (M, N): the fake finds K by them
    rates = {shapes[0]: 600.0, shapes[1]: 700.0, shapes[2]: 650.0}
    monkeypatch.setattr(ceilings.timing, "time_gpu", _fake_gemm_timer(rates))
    reads = iter([{"sm_mhz": 1980, "max_mhz": 1980, "source": "fake"}, {"sm_mhz": 1755, "source": "fake"},
                  {"sm_mhz": 1830, "source": "fake"}])
    monkeypatch.setattr(ceilings, "sm_clock", lambda: next(reads))
    monkeypatch.setattr(ceilings, "LOAD_MS", 2.0)
    gen = torch.Generator().manual_seed(0)
    peak, details, clocks = ceilings.measure_gemm_peak({"bf16": torch.bfloat16}, shapes, gen, 1, 1, device="cpu")
    assert peak["bf16"] == pytest.approx(700.0)  # the best shape, not the first (600) nor a median
    assert details["mm_bf16_best"] == [128, 32, 16]
    assert {f"mm_bf16_{m}x{n}x{k}" for m, n, k in shapes} <= set(details)
    assert clocks == {"before": 1980, "under_load": 1755, "after": 1830, "max": 1980, "source": "fake"}


def test_new_record_round_trips_both_figures(tmp_path):
    sheet, source = ceilings.datasheet_for("NVIDIA H200")
    c = Ceilings(4250.0, {"bf16": 760.0, "fp32": 380.0}, {"mm_shapes": [[8192, 8192, 8192]]}, sheet, source,
                 {"before": 1980, "under_load": 1755, "after": 1980})
    back = Ceilings.from_json(json.loads(json.dumps(c.to_json())), gpu_name="something else")
    assert back.mm_tflops == c.mm_tflops and back.datasheet_tflops == sheet and not back.legacy
    assert back.clocks["under_load"] == 1755
    m = results.metrics(2 * 8192**3, 1, 2.0, "compute", "bf16", back)
    assert m["pct_of_ceiling"] == pytest.approx(100 * m["tflops"] / 760.0)  # % of the measured peak
    assert m["pct_of_datasheet"] == pytest.approx(100 * m["tflops"] / 989.4)  # and of the datasheet
    assert "pct_of_datasheet" not in results.metrics(1, 4e9, 1.0, "memory", "bf16", back)
    text = back.describe_compute()
    assert "measured peak bf16 760" in text and "datasheet bf16 989" in text and "1755" in text


def test_unknown_gpu_has_no_datasheet_percentage():
    c = Ceilings(3000.0, {"bf16": 300.0}, {}, *ceilings.datasheet_for("Tesla T4"))
    m = results.metrics(2 * 4096**3, 1, 1.0, "compute", "bf16", c)
    assert "pct_of_datasheet" not in m and m["pct_of_ceiling"] > 0
    assert "no datasheet figure for GPU 'Tesla T4'" in c.describe_compute()


def test_old_results_file_still_loads_flagged_legacy():
    res = results.load(results.FIXTURE)  # written before the datasheet/measured-peak split
    c = res.ceilings
    assert c.legacy and c.mm_tflops["bf16"] == pytest.approx(712.0)
    assert c.datasheet("bf16") == pytest.approx(989.4)  # looked up from the meta's GPU name
    assert "old results file" in c.describe_compute()
    mm = next(r for r in res.results if r["op"] == "matmul" and r["status"] == "ok" and r["dtype"] == "bf16")
    assert res.pct_of_datasheet(mm) == pytest.approx(100 * mm["tflops"] / 989.4)
    soft = next(r for r in res.results if r["op"] == "softmax" and r["status"] == "ok")
    assert res.pct_of_datasheet(soft) is None  # memory-bound: % of copy only

"""Results files: schema, crash safety, derived metrics, and the committed fixture's consistency."""

import json
import math

import pytest

from tilerosetta.bench import results
from tilerosetta.bench.ceilings import Ceilings
from tilerosetta.specs import get_spec, parse_dtype
from tilerosetta.specs.base import Case

CEIL = Ceilings(4000.0, {"bf16": 800.0, "fp32": 400.0})


def test_metrics_memory_and_compute():
    m = results.metrics(flops=1000, nbytes=4_000_000_000, median_ms=1.0, bound="memory", dtype="bf16",
                        ceilings=CEIL)
    assert m["gbps"] == pytest.approx(4000.0) and m["pct_of_ceiling"] == pytest.approx(100.0)
    assert m["ceiling_kind"] == "copy_gbps"
    m = results.metrics(flops=2 * 4096**3, nbytes=3 * 4096**2 * 2, median_ms=0.5, bound="compute", dtype="fp32",
                        ceilings=CEIL)
    assert m["tflops"] == pytest.approx(2 * 4096**3 / 5e-4 / 1e12)
    assert m["ceiling_kind"] == "mm_tflops:fp32"
    assert m["pct_of_ceiling"] == pytest.approx(100 * m["tflops"] / 400.0)
    # a dtype without its own matrix rate falls back to bf16's
    assert CEIL.for_result("compute", "fp16") == ("mm_tflops:bf16", 800.0)
    assert "pct_of_ceiling" not in results.metrics(1, 1, 1.0, "memory", "bf16", None)


def test_writer_never_overwrites_and_survives_a_torn_line(tmp_path):
    p = results.new_results_path(tmp_path, "NVIDIA H200")
    assert p.name.endswith("-nvidia-h200.jsonl")
    with results.ResultsWriter(p) as w:
        w.write({"type": "meta", "schema": results.SCHEMA, "gpu": {"name": "x"}})
        w.write({"type": "start", "backend": "b", "op": "vector_add", "dtype": "fp32", "case": "N1"})
    with pytest.raises(FileExistsError):
        results.ResultsWriter(p)
    p2 = results.new_results_path(tmp_path, "NVIDIA H200")
    p2.touch()
    assert results.new_results_path(tmp_path, "NVIDIA H200") != p2
    with open(p, "a") as f:
        f.write('{"type": "result", "backend": "b", "op": "vec')  # the process died mid-line
    r = results.load(p)
    assert r.bad_lines == 1 and r.results == []
    assert r.started == [("b", "vector_add", "fp32", "N1")]
    with results.ResultsWriter(p, append=True) as w:  # --resume: the torn line is ended first
        w.write({"type": "result", "backend": "b", "op": "vector_add", "dtype": "fp32", "case": "N1",
                 "status": "crashed"})
    r = results.load(p)
    assert r.bad_lines == 1 and [x["status"] for x in r.results] == ["crashed"] and r.started == []


def test_nan_is_stored_as_null(tmp_path):
    p = tmp_path / "r.jsonl"
    with results.ResultsWriter(p) as w:
        w.write(results.clean_floats({"type": "launch", "x": float("nan"), "y": [1.0, math.inf]}))
        with pytest.raises(ValueError):
            w.write({"type": "launch", "x": float("nan")})  # raw NaN is refused, never written as NaN
    assert json.loads(p.read_text().splitlines()[0]) == {"type": "launch", "x": None, "y": [1.0, None]}


def test_resolve_latest_and_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="h200_sample"):
        results.resolve_results_path(tmp_path / "latest")

    def meta(**kw):
        return json.dumps({"type": "meta", **kw}) + "\n"

    (tmp_path / "20260101T000000Z-gpu.jsonl").write_text(meta())
    (tmp_path / "20260102T000000Z-gpu.jsonl").write_text(meta())
    (tmp_path / "sweep-20260103T000000Z-gpu.jsonl").write_text(meta())
    # Newer, but never "latest": a CPU-only run, a fixture, and a file that is not a results file.
    (tmp_path / "20260104T000000Z-cpu.jsonl").write_text(meta(cpu_only=True))
    (tmp_path / "20260105T000000Z-gpu.jsonl").write_text(meta(fixture=True))
    (tmp_path / "20260106T000000Z-gpu.jsonl").write_text("")
    assert results.resolve_results_path(tmp_path / "latest").name == "20260102T000000Z-gpu.jsonl"
    assert results.resolve_results_path(tmp_path).name == "20260102T000000Z-gpu.jsonl"
    with pytest.raises(FileNotFoundError):
        results.resolve_results_path(tmp_path / "nope.jsonl")


def test_cpu_runs_and_reports_go_under_build():
    assert results.default_out_dir(cpu=True) == results.CPU_RESULTS_DIR
    assert results.default_out_dir(cpu=False) == results.RESULTS_DIR
    for d in (results.CPU_RESULTS_DIR, results.REPORTS_DIR):
        assert d.relative_to(results.REPO_ROOT).parts[0] == "build"  # ignored by .gitignore


def test_fixture_is_marked_and_self_consistent():
    r = results.load(results.FIXTURE)
    assert r.is_fixture and "NOT a measurement" in r.meta["note"]
    assert r.ceilings is not None and r.launch
    statuses = {x["status"] for x in r.results}
    assert statuses <= set(results.STATUSES) and {"ok", "wrong", "error"} <= statuses
    for x in r.results:
        if x["status"] != "ok":
            assert "timing" not in x and x.get("message")
            continue
        spec, dt = get_spec(x["op"]), parse_dtype(x["dtype"])
        defaults = spec.full_params({})  # spec.params holds Param declarations; their defaults
        case = Case(x["dims"], {k: v for k, v in x["params"].items() if v != defaults.get(k)})
        assert case.name == x["case"]
        assert x["flops"] == spec.flops(case) and x["bytes"] == spec.bytes_moved(case, dt)
        t = x["timing"]
        assert t["min_ms"] <= t["p20_ms"] <= t["median_ms"] <= t["p80_ms"] <= t["max_ms"]
        m = results.metrics(x["flops"], x["bytes"], t["median_ms"], x["bound"], x["dtype"], r.ceilings)
        for k in ("tflops", "gbps", "pct_of_ceiling"):
            assert x[k] == pytest.approx(m[k])
    mm = [x for x in r.results if x["op"] == "matmul" and x["dtype"] == "bf16" and x["case"] == "M4096_N4096_K4096"]
    by = {x["backend"]: x for x in mm}
    assert r.speedup(by["triton"]) == pytest.approx(by["torch"]["timing"]["median_ms"] /
                                                    by["triton"]["timing"]["median_ms"])
    assert r.speedup(by["torch"]) == pytest.approx(1.0)

"""bench --scaling: the plan comes from the specs' `scaling` data, the run keeps to its time budget,
eager per-call time is recorded beside the graph time, and the report draws one figure per op."""

import json

import pytest
import torch

from bench_fakes import CountingBackend, fixed_timer
from tilerosetta import cli
from tilerosetta.bench import report, results, runner, scaling
from tilerosetta.specs import SPECS, get_spec
from tilerosetta.specs.base import Scaling


def test_every_op_has_scaling_data_and_the_asked_ranges():
    for name, spec in SPECS.items():
        assert spec.scaling, f"{name}: no spec.scaling"
    n_sweep, m_sweep = get_spec("softmax").scaling
    assert (n_sweep.values[0], n_sweep.values[-1]) == (128, 262144) and "M" in n_sweep.fixed
    assert (m_sweep.values[0], m_sweep.values[-1]) == (1, 65536) and "N" in m_sweep.fixed
    mm = get_spec("matmul").scaling[0]
    assert (mm.values[0], mm.values[-1]) == (1, 16384) and mm.fixed == {"N": 4096, "K": 4096}
    att = get_spec("attention").scaling[0]
    assert (att.values[0], att.values[-1]) == (128, 32768)
    totals = {att.dims_at(s)["B"] * att.dims_at(s)["H"] * s for s in att.values}
    assert totals == {att.product}  # a fixed B*H*S budget, B derived


def test_plan_from_the_specs_covers_every_point_once_coarse_to_fine():
    plan = scaling.build_plan(["softmax", "matmul", "attention"])
    want = {(op, s.dims_at(v)[d], ) for op in ("softmax", "matmul", "attention") for s in get_spec(op).scaling
            for v in s.values for d in s.vary[:1]}
    assert len(plan) == sum(len(s.values) for op in ("softmax", "matmul", "attention")
                            for s in get_spec(op).scaling)  # no point shared here: none merged
    assert {(p.spec.name, p.case.dims[s]) for p in plan for s in ("N", "M", "S") if s in p.case.dims
            and (p.spec.name, p.case.dims[s]) in want} >= want
    assert {p.dtype for p in plan} == {torch.bfloat16}  # one dtype per op: bf16
    first = [p for p in plan if p.level == 0]
    assert plan[:len(first)] == first  # the ends of every sweep come first
    ends = {(p.spec.name, p.case.name) for p in first}
    assert ("matmul", "M1_N4096_K4096") in ends and ("matmul", "M16384_N4096_K4096") in ends
    assert ("attention", "B256_H2_S128_D128") in ends and ("attention", "B1_H2_S32768_D128") in ends
    levels = [p.level for p in plan]
    assert levels == sorted(levels)
    assert [i for i, _ in scaling.coarse_to_fine(7)] == [0, 6, 3, 1, 4, 2, 5]


def test_a_point_shared_by_two_sweeps_runs_once(monkeypatch):
    spec = get_spec("softmax")
    sweeps = (Scaling(("N",), (128, 4096), {"M": 64}), Scaling(("M",), (1, 64), {"N": 4096}))
    monkeypatch.setattr(type(spec), "scaling", sweeps)
    plan = scaling.build_plan(["softmax"])
    names = [p.case.name for p in plan]
    assert sorted(names) == sorted({"M64_N128", "M64_N4096", "M1_N4096"}) and len(names) == 3
    shared = next(p for p in plan if p.case.name == "M64_N4096")
    assert len(shared.sweeps) == 2
    small = scaling.build_plan(["softmax"], max_elems=64 * 128 * 2)
    assert sorted(p.case.name for p in small) == ["M1_N4096", "M64_N128"]  # 16384 and 8192 elements


def test_budget_share_and_total():
    now = [0.0]
    b = scaling.Budget(100.0, {"a": 30, "b": 10, "c": 10, "peer": 0}, clock=lambda: now[0])
    assert b.share_s("a") == 60.0 and b.share_s("b") == 20.0  # in proportion to the points each runs
    assert b.skip("a") is None
    b.charge("b", 21.0)
    assert "share" in b.skip("b") and b.skip("a") is None
    now[0] = 100.0
    assert "budget (100 s) was spent" in b.skip("a")


def test_weights_count_the_points_a_backend_runs():
    plan = scaling.build_plan(["softmax", "matmul"])
    ours, peer = CountingBackend("ours"), CountingBackend("peer")
    w = scaling.weights(plan, [ours, peer], lambda b, p: b.name == "ours" or p.spec.name == "matmul")
    assert w == {"ours": len(plan), "peer": len(get_spec("matmul").scaling[0].values)}


def test_runner_skips_past_the_budget_and_records_eager_time(tmp_path):
    sm = get_spec("softmax")
    plan = [(sm, torch.float32, c) for c in sm.cases[2:5]]
    fast, slow = CountingBackend("fast"), CountingBackend("slow")
    budget = scaling.Budget(1000.0, {"fast": 3, "slow": 3})
    budget.charge("slow", 600.0)  # already past its 500 s share
    path = tmp_path / "s.jsonl"
    with results.ResultsWriter(path) as w:
        recs = runner.Runner([fast, slow], w, runner.Settings(cpu=True, warmup_ms=1, rep_ms=2), budget=budget,
                             timer=fixed_timer(1.0)).run(plan)
    by = {(r["backend"], r["case"]): r for r in recs}
    assert all(by[("slow", c.name)]["status"] == "skipped" for _, _, c in plan)
    assert "share of the scaling time budget" in by[("slow", plan[0][2].name)]["message"]
    assert "softmax" not in slow.calls  # never called (vector_add: the launch-overhead probe)
    ok = [by[("fast", c.name)] for _, _, c in plan]
    assert all(r["status"] == "ok" for r in ok)
    for r in ok:
        e = r["eager"]
        assert e["calls"] >= 3 and 0 < e["host_us"] <= e["wall_us"]
    assert budget.spent["fast"] > 0
    res = results.load(path)
    assert {r["status"] for r in res.results} == {"ok", "skipped"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch runs on cuda here; test_bench_gpu.py::"
                    "test_scaling_run_on_the_gpu covers bench --scaling on a GPU")
def test_scaling_cli_on_cpu(tmp_path, capsys):
    out = tmp_path / "res"
    assert cli.main(["bench", "--scaling", "--allow-cpu", "--op", "vector_add", "--backend", "torch",
                     "--out-dir", str(out)]) == 0
    files = list(out.glob("scaling-*.jsonl"))
    assert len(files) == 1
    res = results.load(files[0])
    meta = res.meta["scaling"]
    assert meta["budget_s"] == 200.0 and meta["ops"] == ["vector_add"] and "CPU run" in meta["cpu_note"]
    assert meta["shares_s"] == {"torch": 200.0}
    assert res.meta["settings"]["min_reps"] == scaling.MIN_REPS
    ns = sorted(r["dims"]["N"] for r in res.results)
    assert ns == [n for n in get_spec("vector_add").scaling[0].values if 3 * n <= scaling.CPU_MAX_ELEMS]
    assert all(r["status"] == "ok" and r["eager"]["calls"] >= 3 for r in res.results)
    assert "--scaling" in capsys.readouterr().out
    # a resume of a scaling file (as after a fatal CUDA error) goes on with the scaling plan, not the bench's
    assert cli.main(["bench", "--resume", str(files[0]), "--allow-cpu", "--op", "vector_add",
                     "--backend", "torch"]) == 0
    again = results.load(files[0])
    assert sorted(r["case"] for r in again.results) == sorted(r["case"] for r in res.results)
    with pytest.raises(FileNotFoundError):  # `latest` never picks a scaling file as the main results
        results.resolve_results_path(out / "latest")
    assert cli.main(["bench", "--scaling", "--allow-cpu", "--size", "0", "--out-dir", str(out)]) == 2


# ---- the report ------------------------------------------------------------------------------------
ROLES = {"tri": {"available": True}, "torch": {"available": True}, "quack": {"available": True, "role": "peer"}}
SPEED = {"tri": 0.9, "torch": 0.6, "quack": 1.0}  # fraction of 4000 GB/s reached at large sizes
LAUNCH_US = {"tri": 20.0, "torch": 6.0, "quack": 12.0}  # eager host cost per call


def write_scaling_file(path, ops=("softmax", "matmul")):
    lines = [{"type": "meta", "schema": 1, "gpu": {"name": "NVIDIA H200"}, "backends": ROLES,
              "scaling": {"points": 0, "budget_s": 200.0, "settings": {"rep_ms": 12.0}}},
             {"type": "ceilings", "copy_gbps": 4000.0, "mm_tflops": {"bf16": 750.0}, "details": {},
              "datasheet_tflops": {"bf16": 989.4}, "datasheet_source": "test", "clocks": {}}]
    for p in scaling.build_plan(list(ops)):
        spec, case = p.spec, p.case
        nbytes, flops = spec.bytes_moved(case, p.dtype), spec.flops(case)
        for b, f in SPEED.items():
            gpu_us = 3.0 + (flops / (f * 700e12) if spec.bound == "compute" else nbytes / (f * 4000e9)) * 1e6
            ms = gpu_us / 1e3
            rec = {"type": "result", "backend": b, "op": spec.name, "dtype": "bf16", "case": case.name,
                   "dims": dict(case.dims), "params": spec.full_params(case.params), "bound": spec.bound,
                   "status": "ok", "timing": {"median_ms": ms, "p20_ms": ms * 0.99, "p80_ms": ms * 1.01},
                   "eager": {"host_us": LAUNCH_US[b], "wall_us": max(LAUNCH_US[b], gpu_us), "calls": 50},
                   **results.metrics(flops, nbytes, ms, spec.bound, "bf16",
                                     results.Ceilings(4000.0, {"bf16": 750.0}))}
            lines.append(rec)
    lines.append({"type": "result", "backend": "quack", "op": "matmul", "dtype": "bf16", "case": "M1_N4096_K4096x",
                  "status": "skipped", "message": "not run: quack used its share"})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_report_draws_one_scaling_figure_per_op(tmp_path):
    scal = write_scaling_file(tmp_path / "scaling-20260101T000000Z-nvidia-h200.jsonl")
    paths = report.write(results.FIXTURE, tmp_path / "out", scaling=tmp_path)  # a folder: its newest scaling-*
    md, page = paths["markdown"].read_text(), paths["html"].read_text()
    assert "## How cost grows with size" in md
    for op in ("softmax", "matmul"):
        assert f"(plots/scaling_{op}.png)" in md
        assert (paths["plots"] / f"scaling_{op}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "scaling_vector_add.png" not in md  # no data for it in this scaling file
    n_main = len(results.load(results.FIXTURE).ops()) + 2
    assert page.count("data:image/png;base64,") == n_main + 2
    # launch cost at the smallest size, graph beside eager, for every backend and peer
    res = results.load(scal)
    from tilerosetta.bench import scaling_report as sr
    h, rows = sr.launch_rows(res)
    soft = [r for r in rows if r[0] == "softmax"]
    assert {r[1] for r in soft} == {"M2048_N128"} and len(soft) == 3
    quack = next(r for r in soft if r[2].startswith("quack"))
    assert quack[2] == "quack (peer)" and quack[5] == "12.0"
    assert "quack 1" in sr.coverage_text(res)  # the skipped point is counted


def test_report_refuses_a_non_scaling_file_as_scaling(tmp_path, capsys):
    with pytest.raises(ValueError, match="not a `bench --scaling`"):
        report.load_scaling(results.FIXTURE)
    assert cli.main(["report", str(results.FIXTURE), "--out", str(tmp_path / "o"), "--scaling",
                     str(results.FIXTURE)]) == 2


def test_a_resumed_scaling_run_does_not_start_its_budget_over(tmp_path):
    p = tmp_path / "scaling-x.jsonl"
    recs = [{"type": "meta", "schema": 1, "scaling": {"budget_s": 200}},
            {"type": "result", "backend": "a", "op": "vector_add", "dtype": "bf16", "case": "N1", "status": "ok",
             "t": "2026-11-30T10:00:00+00:00"},
            {"type": "result", "backend": "a", "op": "vector_add", "dtype": "bf16", "case": "N2", "status": "ok",
             "t": "2026-11-30T10:01:40+00:00"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert scaling.seconds_used(results.load(p)) == pytest.approx(100.0)

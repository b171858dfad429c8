"""The runner's bookkeeping on CPU: check-before-time, wrong/error handling, resume, case selection."""

import pytest
import torch

from bench_fakes import CountingBackend, RaisingBackend, WrongBackend, fixed_timer
from tilerosetta import cli
from tilerosetta.bench import results, runner
from tilerosetta.specs import get_spec

FP32 = torch.float32


def small_plan():
    va, sm = get_spec("vector_add"), get_spec("softmax")
    return [(va, FP32, va.cases[3]), (sm, FP32, sm.cases[2])]


def run_fakes(tmp_path, backends, timed):
    path = tmp_path / "r.jsonl"
    inner = fixed_timer(1.0)

    def timer(fn, device_type, verify):
        timed.append(fn)
        return inner(fn, device_type, verify)
    with results.ResultsWriter(path) as w:
        r = runner.Runner(backends, w, runner.Settings(cpu=True, warmup_ms=1, rep_ms=2), timer=timer)
        recs = r.run(small_plan())
    return path, recs


def test_wrong_is_never_timed_and_errors_do_not_stop_the_run(tmp_path):
    good, wrong, boom = CountingBackend("torch"), WrongBackend("wrong"), RaisingBackend("boom")
    timed = []
    path, recs = run_fakes(tmp_path, [good, wrong, boom], timed)
    # timed: torch vector_add, then softmax of all three; never the wrong or the raising vector_add
    assert len(timed) == 4
    by = {(r["backend"], r["op"]): r for r in recs}
    assert len(recs) == 6
    ok = by[("torch", "vector_add")]
    assert ok["status"] == "ok" and ok["timing"]["median_ms"] == pytest.approx(1.0)
    assert ok["config"] == {"BLOCK": 128} and ok["first_call_ms"] > 0 and ok["warm_call_ms"] > 0
    assert ok["flops"] == get_spec("vector_add").flops(get_spec("vector_add").cases[3])
    bad = by[("wrong", "vector_add")]
    assert bad["status"] == "wrong" and "timing" not in bad and "rel_err" in bad["message"]
    err = by[("boom", "vector_add")]
    assert err["status"] == "error" and "boom.vector_add" in err["message"] and "kernel exploded" in err["message"]
    # the run went on after the wrong and the failing case
    assert all(by[(b, "softmax")]["status"] == "ok" for b in ("torch", "wrong", "boom"))
    loaded = results.load(path)
    assert len(loaded.results) == 6 and loaded.started == []
    assert {r["backend"] for r in loaded.launch} == {"torch", "wrong", "boom"}
    assert [r["status"] for r in loaded.launch if r["backend"] == "boom"] == ["error"]


def test_speedup_against_torch(tmp_path):
    ms = {"torch": 2.0, "fast": 1.0}
    b1, b2 = CountingBackend("torch"), CountingBackend("fast")
    path = tmp_path / "r.jsonl"
    with results.ResultsWriter(path) as w:
        for b in (b1, b2):
            runner.Runner([b], w, runner.Settings(cpu=True), timer=fixed_timer(ms[b.name])).run(small_plan())
    res = results.load(path)
    fast = [r for r in res.results if r["backend"] == "fast"]
    assert [res.speedup(r) for r in fast] == [pytest.approx(2.0)] * 2
    header, rows = runner.summary_rows(res)
    assert header[3:] == ["torch", "fast"] and "2.00x" in rows[0][4]


def test_resume_skips_done_and_marks_the_crashed_case(tmp_path):
    good = CountingBackend("torch")
    path = tmp_path / "r.jsonl"
    va, sm = small_plan()[0][0], small_plan()[1][0]
    with results.ResultsWriter(path) as w:  # a run that died inside softmax
        r = runner.Runner([good], w, runner.Settings(cpu=True), timer=fixed_timer(1.0))
        r.run(small_plan()[:1])
        w.write({"type": "start", "backend": "torch", "op": "softmax", "dtype": "fp32", "case": sm.cases[2].name})
    old = results.load(path)
    assert len(old.results) == 1 and old.started == [("torch", "softmax", "fp32", sm.cases[2].name)]
    crashed = runner.crashed_records(old.started)
    assert crashed[0]["status"] == "crashed"
    before = dict(good.calls)
    with results.ResultsWriter(path, append=True) as w:
        for c in crashed:
            w.write(c)
        done = {results.key_of(x) for x in old.results} | set(old.started)
        recs = runner.Runner([good], w, runner.Settings(cpu=True), timer=fixed_timer(1.0), done=done,
                             launch_done={"torch"}).run(small_plan())
    assert recs == [] and good.calls == before  # nothing re-run
    final = results.load(path)
    assert sorted(x["status"] for x in final.results) == ["crashed", "ok"]


def test_missing_and_unsupported_are_recorded_with_reason(tmp_path):
    b = CountingBackend("torch")
    rms = get_spec("rms_norm")
    with results.ResultsWriter(tmp_path / "r.jsonl") as w:
        recs = runner.Runner([b], w, runner.Settings(cpu=True), timer=fixed_timer(1.0)).run(
            [(rms, FP32, rms.cases[0])])
    assert recs[0]["status"] == "missing" and recs[0]["message"]
    gpu_only = CountingBackend("gpu")
    gpu_only.device_type = "cuda"
    rec = runner.CaseRunner(runner.Settings(cpu=True), None).run(gpu_only, *small_plan()[0])
    assert rec["status"] == "unsupported" and "cuda" in rec["message"]


def test_a_case_outside_a_peers_binding_is_unsupported_not_an_error():
    # e.g. TileGym's attention is bound for self-attention only: a GQA case is "unsupported" with the reason
    b = CountingBackend("torch")
    b.unsupported_case = lambda op, dims, params: "no GQA here" if dims.get("N", 0) > 16 else None
    va, _, case = small_plan()[0]
    rec = runner.CaseRunner(runner.Settings(cpu=True), None, timer=fixed_timer(1.0)).run(b, va, FP32, case)
    assert va.case_dims(case)["N"] > 16 and rec["status"] == "unsupported" and rec["message"] == "no GQA here"
    assert not b.calls  # never called, never timed
    b.unsupported_case = lambda op, dims, params: None
    assert runner.CaseRunner(runner.Settings(cpu=True), None, timer=fixed_timer(1.0)).run(b, va, FP32, case)["status"] == "ok"


def test_decode_matmul_is_judged_against_bandwidth():
    # A decode-sized matmul (M <= 64) streams its weight: its record's bound (hence its % of ceiling) is
    # memory; the GEMM cases stay compute.
    mm = get_spec("matmul")
    backend = CountingBackend("b")
    bounds = {c.name: runner.base_record(backend, mm, torch.bfloat16, c)["bound"] for c in mm.bench_cases}
    assert bounds["M4096_N4096_K4096"] == "compute" and bounds["M1_N4096_K4096"] == "memory"
    assert bounds["M16_N14336_K4096"] == "memory"
    assert get_spec("bmm").case_bound(get_spec("bmm").bench_cases[0]) == "compute"


def test_decode_attention_is_judged_against_bandwidth():
    # One query per head against a 4096-key cache streams the cache (~G flops per byte): memory; the
    # prefill cases, GQA or not, stay compute.
    att = get_spec("attention")
    bounds = {c.name: att.case_bound(c) for c in att.bench_cases}
    assert bounds["B1_H32_Hkv8_S1_Sk4096_D128_causal"] == "memory"
    assert bounds["B64_H32_Hkv8_S1_Sk4096_D128_causal"] == "memory"
    assert bounds["B4_H32_S4096_D128"] == "compute" and bounds["B1_H32_Hkv8_S2048_D128_causal"] == "compute"


def test_select_cases():
    mm = get_spec("matmul")
    assert runner.select_cases(mm) == list(mm.bench_cases)
    assert runner.select_cases(mm, quick=True) == [mm.bench_cases[0]]
    assert runner.select_cases(mm, "1") == [mm.bench_cases[1]]
    with pytest.raises(ValueError, match=f"matmul has {len(mm.bench_cases)} bench case"):
        runner.select_cases(mm, str(len(mm.bench_cases)))
    assert runner.select_cases(mm, "M=8192") == [mm.bench_cases[1]]
    new = runner.select_cases(mm, "M=100,N=200,K=300")
    assert [c.name for c in new] == ["M100_N200_K300"]
    att = get_spec("attention")
    causal = runner.select_cases(att, "S=4096,D=128,causal=true")  # GQA prefill and decode are causal too
    assert [c.name for c in causal] == ["B4_H32_S4096_D128_causal", "B1_H32_Hkv8_S4096_D128_causal"]
    decode = runner.select_cases(att, "S=1")
    assert [c.dims["B"] for c in decode] == [1, 16, 64] and all(c.dims["Sk"] == 4096 for c in decode)
    assert runner.select_cases(get_spec("vector_add"), "M=4096") == []  # another op's dims: no match
    with pytest.raises(ValueError, match="NAME=VALUE"):
        runner.select_cases(mm, "big")
    plan = runner.build_plan(["matmul", "attention"], None, None, quick=True, cpu=False)
    assert [(s.name, str(d)) for s, d, _ in plan] == [("matmul", "torch.bfloat16"), ("attention", "torch.bfloat16")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal; this machine has a GPU")
def test_bench_without_gpu_refuses_clearly(capsys, tmp_path):
    assert cli.main(["bench", "--out-dir", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "no CUDA GPU" in out and "--allow-cpu" in out
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of the CLI; on a GPU bench times the GPU")
def test_bench_cli_on_cpu_then_resume(tmp_path, capsys):
    argv = ["bench", "--allow-cpu", "--backend", "torch", "--op", "vector_add,softmax", "--dtype", "fp32",
            "--warmup-ms", "1", "--rep-ms", "2", "--out-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    (path,) = list(tmp_path.glob("*.jsonl"))
    res = results.load(path)
    assert res.cpu_only and res.meta["fixture"] is False and res.meta["git"]["commit"]
    assert "torch" in res.meta["backends"] and res.meta["toolchain"]
    # softmax is timed on its two bench distributions (randn headline, then randn_x30)
    assert [(r["case"], r["status"]) for r in res.results][1:] == [("M5_N16384", "ok"), ("M5_N16384_randn_x30", "ok")]
    assert all(r["method"] == "cpu_wall" and "pct_of_ceiling" not in r for r in res.results)
    assert "NOT comparable" in capsys.readouterr().out
    # simulate a crash in the softmax case: drop its result, leave its start record and a torn line
    lines = path.read_text().splitlines()
    keep = [ln for ln in lines if not ('"type": "result"' in ln and '"softmax"' in ln)]
    path.write_text("\n".join(keep) + '\n{"type": "result", "backe')
    assert cli.main(argv + ["--resume", str(path)]) == 0
    res = results.load(path)
    assert sorted(r["status"] for r in res.results) == ["crashed", "crashed", "ok"] and res.bad_lines == 1
    assert len(list(tmp_path.glob("*.jsonl"))) == 1  # resumed in place, no new file

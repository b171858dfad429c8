"""tuned_configs.json (format + lookup) and the sweep's bookkeeping with a fake tunable backend."""

import json

import pytest
import torch

from bench_fakes import TunableBackend, fixed_timer
from tilerosetta import tuning
from tilerosetta.bench import results, runner, sweep
from tilerosetta.specs import get_spec


def test_class_structural_dims_reads_back_what_size_class_writes():
    # every conformance and bench case of every op: the structure read back from its class is its own
    from tilerosetta.specs import SPECS

    for op, spec in SPECS.items():
        for case in (*spec.cases, *spec.bench_cases):
            cls = tuning.size_class(case.dims, op)
            assert tuning.class_structural_dims(cls, op) == tuning.structural_dims(case.dims, op), (op, case.name)
    assert tuning.structural_dims({"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}, "attention") == {"D": 128}
    assert tuning.class_structural_dims("le4096_D128_S1_B16", "attention") == {"D": 128}  # S1_B16: the suffix
    assert tuning.class_structural_dims("le4096_D64", "attention") != {"D": 128}
    assert tuning.class_structural_dims("le16384_M1_deepK", "matmul") == {}
    assert tuning.class_structural_dims("le4096_D128", "rope") == {"D": 128}


def test_size_class():
    assert tuning.size_class({"M": 4096, "N": 4096, "K": 4096}) == "le4096"
    assert tuning.size_class({"M": 4096, "H": 14336}) == "le16384"
    assert tuning.size_class({"N": 4097}) == "le8192"
    assert tuning.size_class({"N": 1}) == "le1"
    att = {"B": 4, "H": 32, "S": 4096, "D": 128}
    assert tuning.size_class(att, "attention") == "le4096_D128"
    assert tuning.size_class({**att, "D": 64}, "attention") == "le4096_D64"
    # decode (S <= 16) is not the prefill of the same largest dim (Sk): classes by query count and batch
    dec = {"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}
    assert tuning.size_class(dec, "attention") == "le4096_D128_S1_B1"
    assert tuning.size_class({**dec, "B": 16}, "attention") == "le4096_D128_S1_B16"
    assert tuning.size_class({**dec, "B": 33, "S": 5}, "attention") == "le4096_D128_S8_B64"
    assert tuning.size_class({**dec, "S": 17}, "attention") == "le4096_D128"
    assert tuning.size_class({"M": 4096, "N": 4096, "K": 4096}, "matmul") == "le4096"
    # decode-sized matmuls (M <= 64) are classes of their own: their best tiles are not the GEMM's
    assert tuning.size_class({"M": 1, "N": 4096, "K": 4096}, "matmul") == "le4096_M1"
    assert tuning.size_class({"M": 3, "N": 14336, "K": 4096}, "matmul") == "le16384_M4"
    assert tuning.size_class({"Bt": 2, "M": 64, "N": 4096, "K": 4096}, "bmm") == "le4096_M64"
    assert tuning.size_class({"M": 65, "N": 4096, "K": 4096}, "matmul") == "le4096"
    # ... and a down-projection (K > N: needs a K split) is not the up-projection of the same largest dim
    assert tuning.size_class({"M": 1, "N": 4096, "K": 14336}, "matmul") == "le16384_M1_deepK"
    assert tuning.size_class({"M": 1, "N": 4096}, "softmax") == "le4096"  # other ops' M is rows, not tokens
    with pytest.raises(ValueError):
        tuning.size_class({})


def test_record_and_lookup(tmp_path):
    table = tmp_path / "tuned.json"
    assert tuning.lookup("triton", "matmul", "bf16", "sm_90", {"M": 4096}, path=table) is None
    key = tuning.record("triton", "matmul", torch.bfloat16, "sm_90", {"M": 4096, "N": 4096, "K": 4096},
                        {"BLOCK_M": 128, "BLOCK_N": 256}, {"median_ms": 0.2}, path=table)
    assert key == "triton/matmul/bf16/sm_90/le4096"
    got = tuning.lookup("triton", "matmul", torch.bfloat16, "sm_90", {"M": 3000, "N": 4096, "K": 64}, path=table)
    assert got == {"BLOCK_M": 128, "BLOCK_N": 256}
    got["BLOCK_M"] = 1  # callers get a copy
    assert tuning.lookup("triton", "matmul", "bf16", "sm_90", {"M": 4096}, path=table)["BLOCK_M"] == 128
    assert tuning.lookup("triton", "matmul", "bf16", "sm_90", {"M": 8192}, path=table) is None  # other class
    assert tuning.lookup("triton", "matmul", "fp16", "sm_90", {"M": 4096}, path=table) is None
    assert tuning.lookup("triton", "matmul", "bf16", "sm_100", {"M": 4096}, path=table) is None
    assert tuning.lookup("triton", "matmul", "bf16", None, {"M": 4096}, path=table) is None
    data = json.loads(table.read_text())
    assert data["schema"] == tuning.SCHEMA
    assert data["entries"]["triton"]["matmul"]["bf16"]["sm_90"]["le4096"]["median_ms"] == 0.2
    assert table.read_text() == json.dumps(data, indent=2, sort_keys=True) + "\n"  # stable, reviewable


def test_committed_table_is_well_formed():
    data = json.loads(tuning.TABLE.read_text())
    assert data["schema"] == tuning.SCHEMA and isinstance(data["entries"], dict)
    for backend, ops in data["entries"].items():
        for op, dts in ops.items():
            get_spec(op)
            for dt, archs in dts.items():
                assert dt in ("fp32", "fp16", "bf16")
                for arch, classes in archs.items():
                    assert arch.startswith("sm_")
                    for cls, entry in classes.items():
                        assert cls.startswith("le") and isinstance(entry["config"], dict)


def test_sweep_checks_every_config_and_picks_the_fastest_correct(tmp_path):
    b = TunableBackend("tunable")
    spec = get_spec("vector_add")
    case = spec.cases[3]
    ms = {64: 3.0, 128: 2.0, 3: 0.5, 256: 2.5}  # the broken config would be "fastest"

    def by_config(fn):
        return ms[b.forced["BLOCK"]] if b.forced else 2.2

    path = tmp_path / "sweep.jsonl"
    with results.ResultsWriter(path) as w:
        recs = sweep.sweep_case(b, spec, torch.float32, case, w, runner.Settings(cpu=True), timer=fixed_timer(by_config))
    assert b.forced is None  # the default is restored
    status = {json.dumps(r["config"], sort_keys=True): r["status"] for r in recs}
    assert status['{"BLOCK": 3}'] == "wrong" and list(status.values()).count("ok") == 4
    assert recs[0]["sweep_default"] and recs[0]["config"]["<default>"] is True
    best = sweep.best(recs)
    assert best["config"] == {"BLOCK": 128} and best["timing"]["median_ms"] == pytest.approx(2.0)
    assert len(results.load(path).results) == 5  # default + 4 configs, distinct keys
    png = sweep.plot(recs, tmp_path / "sweep.png", "t")
    assert png.read_bytes()[:4] == b"\x89PNG"
    table = tmp_path / "tuned.json"
    key = sweep.write_best(recs, "sm_90", "sweep.jsonl", table=table)
    assert key == f"tunable/vector_add/fp32/sm_90/{tuning.size_class(case.dims)}"
    entry = json.loads(table.read_text())["entries"]["tunable"]["vector_add"]["fp32"]["sm_90"]
    (e,) = entry.values()
    assert e["config"] == {"BLOCK": 128} and e["default_median_ms"] == pytest.approx(2.2)
    assert tuning.lookup("tunable", "vector_add", "fp32", "sm_90", case.dims, path=table) == {"BLOCK": 128}


def test_sweep_leaves_out_configs_the_backend_refuses_for_the_case(tmp_path):
    b = TunableBackend("tunable")
    spec = get_spec("vector_add")
    case = spec.cases[3]
    b.config_refusal = lambda op, dtype, dims, cfg: "too wide" if cfg["BLOCK"] == 256 else None
    with results.ResultsWriter(tmp_path / "sweep.jsonl") as w:
        recs = sweep.sweep_case(b, spec, torch.float32, case, w, runner.Settings(cpu=True),
                                timer=fixed_timer(lambda fn: 1.0))
    tried = [r["config"] for r in recs if not r["sweep_default"]]
    assert {"BLOCK": 128} in tried and {"BLOCK": 256} not in tried and len(tried) == 3
    b.config_refusal = lambda op, dtype, dims, cfg: "too wide"
    with pytest.raises(ValueError, match=r"every config of the space is refused .*: too wide"):
        sweep.sweep_case(b, spec, torch.float32, case, None, runner.Settings(cpu=True))


def test_sweep_refuses_an_untunable_op():
    b = TunableBackend()
    spec = get_spec("softmax")
    with pytest.raises(ValueError, match="no config space"):
        sweep.sweep_case(b, spec, torch.float32, spec.cases[0], None, runner.Settings(cpu=True))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal; this machine has a GPU")
def test_sweep_cli_without_gpu(capsys):
    from tilerosetta import cli

    assert cli.main(["sweep", "--op", "matmul", "--backend", "torch"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out
    assert cli.main(["sweep", "--op", "matmul", "--backend", "torch", "--allow-cpu", "--write-best"]) == 2


def test_sweep_plan_lists_what_a_sweep_would_time_without_a_gpu(capsys):
    """`sweep --plan` (no GPU): per bench case the configurations after --where (groups repeated or joined by '/',
    as gpu-session's SWEEPS write them), the backend's refusals and --max-configs, and the refused ones with the
    reason; a filter that selects nothing or names an unknown key fails before any device time is spent."""
    from tilerosetta import cli

    assert cli.main(["sweep", "--plan", "--backend", "triton", "--op", "rope", "--size", "0",
                     "--where", "BLOCK_R=16,num_warps=4,WIDE=0/BLOCK_R=8,num_warps=2,EVICT=1,WIDE=1"]) == 0
    out = capsys.readouterr().out
    lines = [ln.strip() for ln in out.splitlines() if ln.startswith("  ")]
    assert "B4_H32_S4096_D128: the default, then 4 configuration(s); 0 refused" in out, out
    assert lines == ["BLOCK_R=8,num_warps=2,EVICT=1,WIDE=1", "BLOCK_R=16,num_warps=4,EVICT=0,WIDE=0",
                     "BLOCK_R=16,num_warps=4,EVICT=1,WIDE=0", "BLOCK_R=16,num_warps=4,EVICT=2,WIDE=0"], lines  # space order
    assert cli.main(["sweep", "--plan", "--backend", "triton", "--op", "rope", "--where", "BLOCK_R=3"]) == 2
    assert "no configuration of the bf16 space matches --where BLOCK_R=3" in capsys.readouterr().out
    assert cli.main(["sweep", "--plan", "--backend", "triton", "--op", "rope", "--where", "BOGUS=1"]) == 2
    assert "unknown config key(s) ['BOGUS']" in capsys.readouterr().out


def test_sweep_plan_shows_refusals():
    b = TunableBackend("tunable")
    spec = get_spec("vector_add")
    b.config_refusal = lambda op, dtype, dims, cfg: "too wide" if cfg["BLOCK"] == 256 else None
    space, refused = sweep.plan(b, spec, torch.float32, spec.cases[3], max_configs=2)
    assert len(space) == 2 and {"BLOCK": 256} not in space and refused == [({"BLOCK": 256}, "too wide")]


def test_spread_keeps_ends_and_count():
    from tilerosetta.bench.sweep import spread

    space = [{"i": i} for i in range(122)]
    picked = spread(space, 8)
    assert len(picked) == 8 and picked[0] == space[0] and picked[-1] == space[-1]
    assert len({p["i"] for p in picked}) == 8
    assert spread(space[:5], 8) == space[:5]
    assert spread(space, None) == space


def test_where_selects_groups_and_refuses_unknown_keys():
    from tilerosetta.bench.sweep import parse_where, select

    space = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w} for m in (64, 128) for n in (64, 128) for w in (4, 8)]
    assert parse_where("BLOCK_N=128, num_warps=4") == {"BLOCK_N": 128, "num_warps": 4}
    picked = select(space, [parse_where("BLOCK_N=128,num_warps=4"), parse_where("BLOCK_M=64,BLOCK_N=64")])
    assert picked == [{"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4}, {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8},
                      {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4}, {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4}]
    assert select(space, []) == space
    with pytest.raises(ValueError, match="BLOCK_Q"):
        select(space, [parse_where("BLOCK_Q=1")])
    for bad in ("BLOCK_N", "BLOCK_N=x", "=3"):
        with pytest.raises(ValueError):
            parse_where(bad)


def test_write_best_keeps_the_table_when_the_default_is_faster(tmp_path):
    rec = {"type": "result", "backend": "tunable", "op": "vector_add", "dtype": "fp32", "case": "N1000",
           "dims": {"N": 1000}, "status": "ok", "method": "cuda_graph"}
    recs = [{**rec, "config": {"<default>": True}, "sweep_default": True, "timing": {"median_ms": 1.0}},
            {**rec, "config": {"BLOCK": 64}, "sweep_default": False, "timing": {"median_ms": 1.2}}]
    table = tmp_path / "tuned.json"
    assert sweep.write_best(recs, "sm_90", "s.jsonl", table=table) is None
    assert not table.exists()
    recs[1]["timing"]["median_ms"] = 0.99  # faster, but within noise (MIN_GAIN)
    assert sweep.write_best(recs, "sm_90", "s.jsonl", table=table) is None
    recs[1]["timing"]["median_ms"] = 0.8
    assert sweep.write_best(recs, "sm_90", "s.jsonl", table=table)
    assert tuning.lookup("tunable", "vector_add", "fp32", "sm_90", {"N": 1000}, path=table) == {"BLOCK": 64}

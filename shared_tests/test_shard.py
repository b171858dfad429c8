"""`--gpus`: the split of the work list, the workers (fake GPUs: CPU processes pinned to a fake UUID), the
merge, a worker that dies, resume per share, the pytest --shard option, and the Ray engine (local cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tilerosetta import cli, shard
from tilerosetta.bench import results
from tilerosetta.toolchain import REPO_ROOT

HERE = Path(__file__).parent
FAKE_WORKER = [sys.executable, str(HERE / "shard_fake_worker.py")]
FAST = ["--allow-cpu", "--warmup-ms", "1", "--rep-ms", "2"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(),
                            reason="fake-GPU runs time CPU backends (--allow-cpu); a GPU machine's bench times GPUs")


@pytest.fixture
def fake_gpus(monkeypatch):
    monkeypatch.setenv(shard.FAKE_ENV, "2")
    # the workers are child processes: they must import this checkout's package
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT / "python"), os.environ.get("PYTHONPATH", "")]))


def parse(argv):
    return cli.build_parser().parse_args(argv)


# ---- the split ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_assign_is_a_stable_balanced_partition(n):
    units = [f"u{i}" for i in range(23)]
    shares = [shard.my_share(units, f"{i}/{n}") for i in range(n)]
    flat = [u for s in shares for u in s]
    assert sorted(flat) == sorted(units)  # every unit exactly once
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # equal weights: round-robin
    assert shares == [shard.my_share(list(units), f"{i}/{n}") for i in range(n)]  # same list, same split
    assert shard.my_share(units, "") == units  # no --shard: everything


def test_assign_balances_by_weight_and_keeps_units_together():
    items = [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 1), ("c", 1), ("d", 1), ("e", 1)]
    sizes = {"a": 4, "b": 1, "c": 1, "d": 1, "e": 1}
    s0 = shard.my_share(items, "0/2", unit=lambda x: x[0], weight=lambda u: sizes[u])
    s1 = shard.my_share(items, "1/2", unit=lambda x: x[0], weight=lambda u: sizes[u])
    assert s0 == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]  # the heavy group alone, whole
    assert s1 == [("b", 1), ("c", 1), ("d", 1), ("e", 1)]


def test_bad_shard_and_gpu_counts_are_refused_clearly():
    with pytest.raises(ValueError, match="expected i/n"):
        shard.parse_shard("1of2")
    with pytest.raises(ValueError, match="0 <= i < n"):
        shard.parse_shard("2/2")
    devs = [shard.Device(i, "H200", f"GPU-{i}", "node") for i in range(2)]
    assert shard.pick_devices("all", devs) == devs and shard.pick_devices("1", devs) == devs[:1]
    with pytest.raises(ValueError, match="2 GPU.s. visible"):
        shard.pick_devices("3", devs)
    with pytest.raises(ValueError, match="no GPU visible"):
        shard.pick_devices("all", [])


def test_cuda_visible_devices_narrows_the_list():
    devs = [shard.Device(i, "H200", f"GPU-{i}aaaa", "node") for i in range(4)]
    assert [d.index for d in shard._filter_visible(devs, "2,0")] == [2, 0]
    assert [d.index for d in shard._filter_visible(devs, "GPU-3")] == [3]  # a UUID prefix
    assert [d.index for d in shard._filter_visible(devs, "1,7,2")] == [1]  # CUDA stops at an invalid entry
    assert devs[1].visible() == "GPU-1aaaa"  # workers are pinned by UUID, whatever the device order


def test_forward_argv_keeps_the_command_options_but_not_the_orchestrator():
    args = parse(["sweep", "--op", "matmul", "--backend", "triton", "--where", "BLOCK_M=64", "--where",
                  "BLOCK_N=32", "--quick", "--write-best", "--gpus", "all", "--out-dir", "/x"])
    assert shard.forward_argv(args) == ["--op", "matmul", "--backend", "triton", "--quick", "--where",
                                        "BLOCK_M=64", "--where", "BLOCK_N=32"]
    args = parse(["test", "--backend", "torch", "--gpus", "2", "--", "-k", "fp32"])
    assert shard.forward_argv(args) == ["--backend", "torch", "--", "-k", "fp32"]


def test_junit_totals(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text('<testsuites><testsuite tests="7" failures="1" errors="1" skipped="2"/></testsuites>')
    assert shard.junit_totals(xml) == {"passed": 3, "failed": 1, "errors": 1, "skipped": 2}


# ---- bench over fake GPUs -------------------------------------------------------------------------
def _result_lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines() if '"type": "result"' in x]


@no_gpu
def test_bench_shards_merge_every_result_with_its_gpu(tmp_path, fake_gpus, capsys):
    argv = ["bench", *FAST, "--gpus", "2", "--backend", "torch", "--op", "vector_add,softmax",
            "--out-dir", str(tmp_path), "--shard-dir", str(tmp_path / "shards")]
    assert cli.main(argv) == 0
    (merged,) = tmp_path.glob("*-cpu.jsonl")
    res = results.load(merged)
    keys = sorted(results.key_of(r) for r in res.results)
    # softmax is timed on its headline input and on the x30 logits beside it (spec.bench_distributions)
    assert keys == sorted(("torch", op, dt, case) for op, case in (("vector_add", "N65537"), ("softmax", "M5_N16384"),
                                                                   ("softmax", "M5_N16384_randn_x30"))
                          for dt in ("fp32", "fp16", "bf16"))
    assert all(r["status"] == "ok" for r in res.results)
    share_files = {s["shard"]: s for s in res.meta["shards"]}
    for r in res.results:  # every result names the (fake) GPU of the share that timed it, and came from there
        assert r["gpu"] == share_files[r["shard"]]["gpu"] and r["gpu"]["uuid"] == f"GPU-fake-{r['shard']}"
        assert results.key_of(r) in {results.key_of(x) for x in _result_lines(share_files[r["shard"]]["file"])}
    assert {r["shard"] for r in res.results} == {0, 1}
    assert res.meta["sharding"]["shares"] == 2 and res.cpu_only
    # each worker saw only its fake GPU (by UUID: no real GPU is visible to it)
    assert "CUDA_VISIBLE_DEVICES=GPU-fake-1" in (tmp_path / "shards" / "gpu1" / "worker.log").read_text()


@no_gpu
def test_a_dying_worker_loses_only_its_current_case_then_resume_per_share(tmp_path, fake_gpus, monkeypatch):
    monkeypatch.setenv("SHARD_TEST_KILL", "softmax:fp16")
    shards = tmp_path / "shards"
    args = parse(["bench", *FAST, "--gpus", "2", "--backend", "torch,killer", "--op", "vector_add,softmax",
                  "--out-dir", str(tmp_path), "--shard-dir", str(shards)])
    assert shard.run_bench(args, prefix=FAKE_WORKER) == 0  # the worker was restarted and finished its share
    (merged,) = tmp_path.glob("*-cpu.jsonl")
    res = results.load(merged)
    assert len(res.results) == 18  # 2 backends x 3 cases (vector_add; softmax randn and x30) x 3 dtypes, each once
    bad = [(r["backend"], r["op"], r["dtype"], r["status"]) for r in res.results if r["status"] != "ok"]
    assert bad == [("killer", "softmax", "fp16", "crashed")]
    dead = next(r for r in res.results if r["status"] == "crashed")["shard"]
    restarts = {s["shard"]: s["restarts"] for s in res.meta["shards"]}
    assert restarts == {dead: 1, 1 - dead: 0}

    # resume per share: the other share lost its last case (start and result gone, as if interrupted)
    other = next(shards.glob(f"gpu{1 - dead}/*.jsonl"))
    lines = other.read_text().splitlines()
    last = json.loads([x for x in lines if '"type": "result"' in x][-1])
    lost = results.key_of(last)
    other.write_text("\n".join(x for x in lines if not (x.startswith('{"type": "start"') or
                                                        x.startswith('{"type": "result"'))
                               or results.key_of(json.loads(x)) != lost) + "\n")
    before = {p: len(_result_lines(p)) for p in shards.glob("gpu*/*.jsonl")}
    monkeypatch.delenv("SHARD_TEST_KILL")
    args = parse(["bench", *FAST, "--gpus", "2", "--backend", "torch,killer", "--op", "vector_add,softmax",
                  "--out-dir", str(tmp_path / "again"), "--resume", str(shards)])
    assert shard.run_bench(args, prefix=FAKE_WORKER) == 0
    after = {p: len(_result_lines(p)) for p in shards.glob("gpu*/*.jsonl")}
    assert after[other] == before[other] + 1  # only the lost case ran again
    assert all(after[p] == before[p] for p in after if p != other)
    (merged2,) = (tmp_path / "again").glob("*-cpu.jsonl")
    res2 = results.load(merged2)
    assert len(res2.results) == 18 and results.key_of(res2.by_key()[lost]) == lost
    assert res2.by_key()[lost]["status"] == "ok"


# ---- pytest --shard ---------------------------------------------------------------------------------
def _collected(*extra):
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          str(HERE / "test_conformance.py"), str(HERE / "test_specs.py"), "--backend", "torch,triton",
                          *extra], capture_output=True, text=True, cwd=REPO_ROOT,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "python")})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [x for x in out.stdout.splitlines() if "::" in x]


def test_pytest_shards_partition_the_items_keeping_backend_op_together():
    everything = _collected()
    shares = [_collected("--shard", f"{i}/2") for i in range(2)]
    assert sorted(shares[0] + shares[1]) == sorted(everything) and not set(shares[0]) & set(shares[1])
    assert abs(len(shares[0]) - len(shares[1])) < len(everything) // 4  # split by item count

    def groups(ids):  # backend-op of conformance items: test_conformance.py::test_x[torch-softmax-...]
        return {x.split("[")[1].split("-")[0] + "-" + x.split("[")[1].split("-")[1] for x in ids
                if "test_conformance" in x and "[" in x}
    assert groups(shares[0]) and not groups(shares[0]) & groups(shares[1])


@no_gpu
def test_test_command_sharded_sums_the_shares(tmp_path, fake_gpus, capsys):
    argv = ["test", "--backend", "torch", "--op", "vector_add,softmax", "--suite",
            str(HERE / "test_conformance.py"), "--gpus", "2", "--shard-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    n = len(_collected_conformance_torch())
    assert f"{n} passed, 0 failed, 0 skipped" in out
    for i in range(2):
        assert (tmp_path / f"gpu{i}" / "junit.xml").exists()


def _collected_conformance_torch():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          str(HERE / "test_conformance.py"), "--backend", "torch", "--op", "vector_add,softmax"],
                         capture_output=True, text=True, cwd=REPO_ROOT,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "python")})
    return [x for x in out.stdout.splitlines() if "::" in x]


# ---- Ray -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="ray not installed (optional extra: pip install ray==2.60.0)")
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, object_store_memory=80 * 2**20,
             runtime_env={"env_vars": {"PYTHONPATH": shard.python_path()}})
    try:  # workers that cannot start would make ray.get wait forever: fail fast and say so
        ray.get(ray.remote(shard.this_device).remote(), timeout=120)
    except Exception as exc:
        ray.shutdown()
        pytest.fail(f"a local Ray cluster's workers did not start or cannot import tilerosetta: {exc}")
    yield ray
    ray.shutdown()


@no_gpu
def test_ray_engine_runs_the_shares_as_tasks_and_merges(tmp_path, local_ray, monkeypatch):
    monkeypatch.setattr(shard, "RAY_GET_TIMEOUT_S", 300)  # a stuck cluster fails the test, never hangs CI
    argv = ["bench", *FAST, "--engine", "ray", "--gpus", "2", "--backend", "torch", "--op", "vector_add",
            "--out-dir", str(tmp_path), "--shard-dir", str(tmp_path / "shards")]
    assert cli.main(argv) == 0
    (merged,) = tmp_path.glob("*-cpu.jsonl")
    res = results.load(merged)
    assert sorted(r["dtype"] for r in res.results) == ["bf16", "fp16", "fp32"]
    assert all(r["status"] == "ok" for r in res.results)
    assert res.meta["sharding"]["engine"] == "ray"
    assert {r["shard"] for r in res.results} == {0, 1}
    assert all(r["gpu"]["index"] == -1 and r["gpu"]["host"] for r in res.results)  # a CPU task: no GPU
    for i in range(2):  # the files came back from the tasks
        assert list((tmp_path / "shards" / f"gpu{i}").glob("*.jsonl"))


# ---- sweep over fake GPUs -------------------------------------------------------------------------
@no_gpu
def test_sweep_shares_split_the_configs_and_each_times_the_default(tmp_path, fake_gpus):
    args = parse(["sweep", *FAST, "--gpus", "2", "--backend", "tunable", "--op", "vector_add", "--dtype", "fp32",
                  "--out-dir", str(tmp_path), "--shard-dir", str(tmp_path / "shards")])
    assert shard.run_sweep(args, prefix=FAKE_WORKER) == 0
    (merged,) = tmp_path.glob("sweep-tunable-vector_add-fp32-*.jsonl")
    recs = _result_lines(merged)
    explicit = sorted(r["config"]["BLOCK"] for r in recs if not r.get("sweep_default"))
    assert explicit == [3, 64, 128, 256]  # every configuration of the space exactly once
    assert sorted(r["shard"] for r in recs if r.get("sweep_default")) == [0, 1]  # a baseline per GPU
    assert {r["shard"] for r in recs if not r.get("sweep_default")} == {0, 1}
    assert next(r for r in recs if r["config"].get("BLOCK") == 3)["status"] == "wrong"
    assert all(r["gpu"]["uuid"] == f"GPU-fake-{r['shard']}" for r in recs)


# ---- GPU kinds side by side -----------------------------------------------------------------------
def _as_other_gpu(src: Path, dst: Path, name: str, slower: float) -> Path:
    """A copy of a results file as if measured on another GPU kind, every median `slower` times longer."""
    out = []
    for line in src.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "meta":
            rec["gpu"] = {**rec["gpu"], "name": name}
        if rec.get("type") == "result" and rec.get("timing"):
            rec["timing"] = {**rec["timing"], "median_ms": rec["timing"]["median_ms"] * slower}
            rec["pct_of_ceiling"] = (rec.get("pct_of_ceiling") or 0) / slower or None
        out.append(json.dumps(rec))
    dst.write_text("\n".join(out) + "\n")
    return dst


def test_compare_gpus_puts_kinds_side_by_side(tmp_path, capsys):
    from tilerosetta.bench import gpu_compare

    h200 = results.FIXTURE
    h100 = _as_other_gpu(h200, tmp_path / "h100.jsonl", "NVIDIA H100 80GB HBM3", slower=2.0)
    kinds, table, _ = gpu_compare.compare_files([str(h200), str(h100)])
    assert kinds == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    row = next(r for r in table if (r.op, r.dtype, r.backend) == ("matmul", "bf16", "torch"))
    assert row.cases >= 1 and row.ms["NVIDIA H100 80GB HBM3"] == pytest.approx(2 * row.ms["NVIDIA H200"])
    md = gpu_compare.markdown(kinds, table)
    assert "| NVIDIA H100 80GB HBM3 vs NVIDIA H200 |" in md.splitlines()[0]
    assert "| matmul | bf16 | torch |" in md and "0.50x" in md
    # the CLI, with the slower kind as the baseline: the H200 is then 2x faster
    out_md = tmp_path / "gpus.md"
    assert cli.main(["compare-gpus", str(h200), str(h100), "--baseline", "NVIDIA H100 80GB HBM3",
                     "--markdown", str(out_md)]) == 0
    assert "2.00x" in out_md.read_text()
    assert cli.main(["compare-gpus", str(h200), "--baseline", "B200"]) == 2  # unknown kind: refused clearly
    assert "B200" in capsys.readouterr().out


def test_compare_gpus_uses_each_records_own_gpu_stamp(tmp_path):
    """A record of a --gpus run names its GPU; that wins over the file's meta (a Ray cluster may mix kinds)."""
    from tilerosetta.bench import gpu_compare

    def write(path, meta_gpu, stamp, ms):
        rec = {"type": "result", "backend": "triton", "op": "softmax", "dtype": "bf16", "case": "M4096_N4096",
               "status": "ok", "timing": {"median_ms": ms}}
        if stamp:
            rec["gpu"] = {"name": stamp, "index": 1, "uuid": "GPU-x", "host": "n2"}
        path.write_text(json.dumps({"type": "meta", "schema": 1, "gpu": {"name": meta_gpu}}) + "\n" +
                        json.dumps(rec) + "\n")
        return str(path)
    a = write(tmp_path / "a.jsonl", "A100", None, 0.3)
    b = write(tmp_path / "b.jsonl", "A100", "H200", 0.1)  # merged file whose meta is another node's
    kinds, table, _ = gpu_compare.compare_files([a, b])
    assert kinds == ["A100", "H200"]
    assert table[0].ms == {"A100": pytest.approx(0.3), "H200": pytest.approx(0.1)} and table[0].cases == 1
    assert "3.00x" in gpu_compare.markdown(kinds, table)


def test_a_bench_worker_restarting_itself_keeps_its_share(tmp_path):
    """After a fatal CUDA error bench re-executes itself with --resume: the new process must keep --shard."""
    from tilerosetta.commands.bench import _restart_argv

    args = parse(["bench", "--op", "softmax", "--shard", "1/2", "--out-dir", str(tmp_path)])
    argv = _restart_argv(args, tmp_path / "r.jsonl")
    assert argv[argv.index("--shard") + 1] == "1/2" and "--resume" in argv


def test_junit_failures_names_the_failed_cases(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text('<testsuites><testsuite tests="2" failures="1"><testcase classname="test_conformance" '
                   'name="test_op[triton-softmax-fp16-c0]"><failure message="rel err 0.5 &gt; 0.01&#10;more"/>'
                   '</testcase><testcase classname="t" name="ok"/></testsuite></testsuites>')
    assert shard.junit_failures(xml) == ["test_conformance::test_op[triton-softmax-fp16-c0]: rel err 0.5 > 0.01"]


@no_gpu
def test_ray_engine_runs_test_shares(tmp_path, local_ray, monkeypatch, capsys):
    monkeypatch.setattr(shard, "RAY_GET_TIMEOUT_S", 300)
    argv = ["test", "--engine", "ray", "--gpus", "2", "--backend", "torch", "--op", "vector_add,softmax",
            "--suite", str(HERE / "test_conformance.py"), "--shard-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    n = len(_collected_conformance_torch())
    assert f"{n} passed, 0 failed, 0 skipped" in capsys.readouterr().out
    assert all((tmp_path / f"gpu{i}" / "junit.xml").exists() for i in range(2))  # returned by the tasks


def test_assign_spreads_each_kind_over_the_shares():
    """Two heavy groups of one slow backend go to different shares even when counts alone would pair them."""
    units = [("triton", "matmul"), ("torch", "matmul"), ("triton", "attention"), ("torch", "attention")]
    shares = shard.assign(units, 2, weight=lambda u: 10, kind=lambda u: u[0])
    assert shares[0] != shares[2] and shares[1] != shares[3]
    assert shard.assign(units, 2, weight=lambda u: 10) == [0, 1, 0, 1]  # without kinds: round-robin


def test_gpu_differences_flag_models_and_clocks():
    def out(i, name, clocks):
        return shard.Outcome(i, shard.Device(i, name, f"GPU-{i}", "n"), 0, 0, 1.0, "/x",
                             {"clocks.max.sm": clocks, "pci.bus_id": f"0000:0{i}:00.0"} if clocks else {})
    assert shard.gpu_differences([out(0, "H200", "1980 MHz"), out(1, "H200", "1980 MHz")]) == []
    diff = shard.gpu_differences([out(0, "H200", "1980 MHz"), out(1, "H200", "1500 MHz")])
    assert diff == ["clocks.max.sm differs: 1500 MHz, 1980 MHz"]
    assert shard.gpu_differences([out(0, "H100", None), out(1, "H200", None)]) == ["GPU models differ: H100, H200"]

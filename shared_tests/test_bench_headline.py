"""The headline: each of our backends against the BEST PEER of each case (torch and any number of
peers, never one of ours), and differences inside the p20-p80 noise shown as ties, never as wins."""

import json

import pytest

from tilerosetta import cli
from tilerosetta.bench import report, results, runner

# Roles as a results file records them: explicit "role", the TileGym-style "peer" label, torch by name.
BACKENDS = {"tri": {"available": True}, "cut": {"available": True},
            "torch": {"available": True},
            "quack": {"available": True, "role": "peer"},
            "fa4": {"available": True, "role": "peer"},
            "tilegym": {"available": True, "peer": "NVIDIA TileGym 1.5.1"}}


def _t(median, spread=0.02):
    return {"median_ms": median, "p20_ms": median * (1 - spread), "p80_ms": median * (1 + spread),
            "min_ms": median * 0.95, "max_ms": median * 1.1, "mean_ms": median, "n": 20, "method": "cuda_graph"}


def _rec(backend, case, median, spread=0.02, op="softmax", dtype="bf16", status="ok"):
    r = {"type": "result", "backend": backend, "op": op, "dtype": dtype, "case": case, "bound": "memory",
         "status": status}
    if status == "ok":
        r.update(timing=_t(median, spread), gbps=1000.0 / median, pct_of_ceiling=25.0 / median)
    else:
        r["message"] = "x"
    return r


def write(tmp_path, recs, backends=BACKENDS):
    p = tmp_path / "r.jsonl"
    meta = {"type": "meta", "schema": 1, "gpu": {"name": "NVIDIA H200"}, "backends": backends}
    p.write_text("".join(json.dumps(x) + "\n" for x in [meta, *recs]))
    return results.load(p)


def test_overlapping_spreads_are_a_tie_never_a_win(tmp_path):
    res = write(tmp_path, [
        _rec("quack", "A", 1.00), _rec("torch", "A", 1.50),
        _rec("tri", "A", 0.985),  # 1.5% faster, inside both 2% spreads: a tie
        _rec("cut", "A", 0.80),  # 25% faster, spreads far apart: a win
        _rec("quack", "B", 1.00, spread=0.001), _rec("tri", "B", 0.99, spread=0.001)])  # 1%, tight: a win
    tri_a = res.by_key()[("tri", "softmax", "bf16", "A")]
    ratio, tie, peer = res.vs_best_peer(tri_a)
    assert peer == "quack" and ratio > 1 and tie  # faster median, but inside the noise
    assert results.ratio_text(ratio, tie).startswith("tie")
    header, rows = report.main_rows(res)
    a = {h: c for h, c in zip(header, next(r for r in rows if r[2] == "A"))}
    assert a["tri"].startswith("tie (1.02x)"), a["tri"]  # never "1.02x" alone
    assert a["cut"].startswith("1.25x") and a["best of ours"] == "cut 1.25x"
    b = {h: c for h, c in zip(header, next(r for r in rows if r[2] == "B"))}
    assert b["tri"].startswith("1.01x")  # a small difference outside the noise is still a result
    # the per-op overview: not every case a tie -> a ratio with the tie count
    over = dict(zip(*[report.headline(res)[0], report.headline(res)[1][0]]))
    assert "(1/2 tie)" in over["tri"]
    # the console summary of `tilerosetta bench` says tie too
    h, srows = runner.summary_rows(res)
    assert "tie (1.02x)" in dict(zip(h, next(r for r in srows if r[2] == "A")))["tri"]


def test_best_peer_is_the_fastest_peer_never_one_of_ours(tmp_path):
    res = write(tmp_path, [
        _rec("tri", "A", 0.10),  # ours, fastest of all: must not become the "best peer"
        _rec("torch", "A", 2.0), _rec("quack", "A", 1.2), _rec("fa4", "A", 1.0), _rec("tilegym", "A", 1.1),
        _rec("cut", "A", 0.0, status="wrong")])
    assert [res.role(b) for b in BACKENDS] == ["ours", "ours", "baseline", "peer", "peer", "peer"]
    best = res.best_peer("softmax", "bf16", "A")
    assert best["backend"] == "fa4"
    header, rows = report.main_rows(res)
    row = dict(zip(header, rows[0]))
    assert row["best peer"].startswith("fa4") and row["best of ours"] == "tri 10.00x"
    assert row["fa4 (peer)"].startswith("best peer") and row["torch (baseline)"].startswith("0.50x")
    assert row["cut"] == "WRONG"
    # ours first, then torch and the peers, whatever their number
    assert header[5:] == ["tri", "cut", "torch (baseline)", "quack (peer)", "fa4 (peer)", "tilegym (peer)"]


def test_no_peer_on_a_case_gives_no_ratio(tmp_path):
    res = write(tmp_path, [_rec("tri", "A", 1.0), _rec("torch", "A", 0.0, status="error")])
    assert res.best_peer("softmax", "bf16", "A") is None and res.vs_best_peer(res.results[0]) is None
    row = dict(zip(*[report.main_rows(res)[0], report.main_rows(res)[1][0]]))
    assert row["best peer"] == "-" and row["tri"] == "25%" and row["torch (baseline)"] == "ERROR"


def test_readme_table_per_dtype_and_rewrite(tmp_path, capsys):
    recs = [_rec("quack", "A", 1.0), _rec("tri", "A", 0.5), _rec("quack", "A", 1.0, dtype="fp32"),
            _rec("tri", "A", 4.0, dtype="fp32")]
    res = write(tmp_path, recs)
    table = report.readme_table(res, "bf16")
    assert table.splitlines()[0].startswith("| op | dtype | size | best of ours | best peer |")
    assert "| softmax | bf16 | A | tri 2.00x |" in table and "fp32" not in table  # per dtype, never mixed
    assert len(report.main_rows(res)[1]) == 2  # the report's main table keeps every dtype
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.README_START}\nold table\n{report.README_END}\nafter\n")
    assert cli.main(["report", str(res.path), "--out", str(tmp_path / "o"), "--print",
                     "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old table" not in text and "| softmax | bf16 | A | tri 2.00x |" in text
    assert text.startswith("intro\n") and text.endswith(f"{report.README_END}\nafter\n")
    assert "| softmax | bf16 | A | tri 2.00x |" in capsys.readouterr().out
    no_marks = tmp_path / "plain.md"
    no_marks.write_text("nothing\n")
    assert cli.main(["report", str(res.path), "--out", str(tmp_path / "o"), "--readme", str(no_marks)]) == 2


def test_committed_readme_has_the_markers():
    from tilerosetta.toolchain import REPO_ROOT

    text = (REPO_ROOT / "README.md").read_text()
    assert text.index(report.README_START) < text.index(report.README_END)


def test_environment_records_each_backends_role():
    from tilerosetta.backends.base import Backend
    from tilerosetta.bench import environment

    class Ours(Backend):
        name, language, device_type = "mine", "fake", "cpu"

        def available(self):
            return True, "fake"

        def implementations(self):
            return {}

    class Peer(Ours):
        name, role = "lib", "peer"

    class Torchy(Ours):
        name = "torch"

    info = environment.backend_info([Ours(), Peer(), Torchy()])
    assert {n: i["role"] for n, i in info.items()} == {"mine": "ours", "lib": "peer", "torch": "baseline"}

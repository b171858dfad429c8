"""Report rendering and compare, on the committed fixture (no GPU needed)."""

import base64
import json
import math
import statistics

import pytest

from tilerosetta import cli
from tilerosetta.bench import compare, report, results, timing

FIX = results.FIXTURE


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return report.write(FIX, out), results.load(FIX)


def test_report_files_and_embedded_plots(rendered):
    paths, res = rendered
    page = paths["html"].read_text()
    md = paths["markdown"].read_text()
    n_img = len(res.ops()) + 2  # one bar chart per op, the heatmap, the roofline
    assert page.count("data:image/png;base64,") == n_img
    assert "src='http" not in page and "<script" not in page  # self-contained
    first = page.split("data:image/png;base64,")[1].split("'")[0]
    assert base64.b64decode(first)[:8] == b"\x89PNG\r\n\x1a\n"
    pngs = sorted(p.name for p in paths["plots"].glob("*.png"))
    assert len(pngs) == n_img and "heatmap.png" in pngs and "roofline.png" in pngs
    for name in pngs:
        assert f"(plots/{name})" in md
    for text in (md, page):
        assert "FIXTURE" in text and "NOT measurements" in text
        assert "First call (compile)" in text and "Launch overhead" in text


def test_headline_numbers_match_the_data(rendered):
    paths, res = rendered
    header, rows = report.headline(res)
    # ours first, then torch (the baseline of this old fixture, which has no other peer)
    assert header[:2] == ["op", "dtype"] and header[2:] == ["cutile_py", "triton", "tile_cpp", "torch (baseline)"]
    row = {r[0]: r for r in rows}["matmul"]
    tri = [r for r in res.results if r["op"] == "matmul" and r["backend"] == "triton" and r["dtype"] == "bf16"]
    tor = {r["case"]: r for r in res.results if r["op"] == "matmul" and r["backend"] == "torch" and r["dtype"] == "bf16"}
    pct = math.exp(statistics.fmean(math.log(r["pct_of_ceiling"]) for r in tri))
    sp = math.exp(statistics.fmean(math.log(tor[r["case"]]["timing"]["median_ms"] / r["timing"]["median_ms"])
                                   for r in tri))
    assert row[3] == f"{pct:.0f}% {sp:.2f}x"  # ratio to the best peer (torch here), not a tie: 8-10% apart
    assert row[1] == "bf16"
    soft = {r[0]: r for r in rows}["softmax"]
    assert "wrong" in soft[4]  # tile_cpp has one wrong softmax case in the fixture
    md = paths["markdown"].read_text()
    assert "| matmul | bf16 |" in md and row[3] in md


def test_problems_are_reported(rendered):
    paths, res = rendered
    md = paths["markdown"].read_text()
    assert "rel_err 0.31 > tol 0.01" in md  # the wrong case, with its message
    assert "unsupported mask layout" in md  # the error case
    assert "cutile_jl unavailable: julia not found" in md
    assert "CUDA graph capture failed" in md  # a fallback method is explained


def test_report_cli_and_missing_results(tmp_path, capsys):
    assert cli.main(["report", str(FIX), "--out", str(tmp_path / "r"), "--print"]) == 0
    assert (tmp_path / "r" / "report.html").exists()
    assert "| matmul | bf16 |" in capsys.readouterr().out
    assert cli.main(["report", str(tmp_path / "empty" / "latest")]) == 2


def _edited(tmp_path, edit):
    lines = [json.loads(x) for x in FIX.read_text().splitlines()]
    for rec in lines:
        edit(rec)
    p = tmp_path / "new.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def _is(rec, backend, op, dtype, case):
    return (rec.get("type") == "result" and rec["backend"] == backend and rec["op"] == op and rec["dtype"] == dtype
            and rec["case"] == case)


def test_compare_flags_only_real_changes(tmp_path):
    old = results.load(FIX)
    assert {c.verdict for c in compare.compare(old, old)} == {"same"}

    def edit(rec):
        if _is(rec, "triton", "matmul", "bf16", "M4096_N4096_K4096"):  # 20% slower: flagged
            rec["timing"] = {k: (v * 1.2 if k.endswith("_ms") else v) for k, v in rec["timing"].items()}
        if _is(rec, "torch", "matmul", "bf16", "M4096_N4096_K4096"):  # 2% slower: noise
            rec["timing"] = {k: (v * 1.02 if k.endswith("_ms") else v) for k, v in rec["timing"].items()}
        if _is(rec, "tile_cpp", "rope", "bf16", "B4_H32_S4096_D128"):  # 30% faster
            rec["timing"] = {k: (v / 1.3 if k.endswith("_ms") else v) for k, v in rec["timing"].items()}
        if _is(rec, "triton", "softmax", "bf16", "M4096_N16384"):  # became wrong
            rec.update(status="wrong", message="x")
            rec.pop("timing")
    new = results.load(_edited(tmp_path, edit))
    flagged = {(c.key[0], c.key[1], c.verdict) for c in compare.compare(old, new) if c.verdict != "same"}
    assert flagged == {("triton", "matmul", "slower"), ("tile_cpp", "rope", "faster"),
                       ("triton", "softmax", "status")}
    slower = next(c for c in compare.compare(old, new) if c.verdict == "slower")
    assert slower.ratio == pytest.approx(1.2) and slower.row()[7] == "+20.0%"


def test_compare_noise_from_spread_and_cli_exit(tmp_path):
    old = {"type": "result", "backend": "b", "op": "o", "dtype": "bf16", "case": "c", "status": "ok",
           "timing": {"median_ms": 1.0, "p20_ms": 0.8, "p80_ms": 1.2}}
    noisy = dict(old, timing={"median_ms": 1.15, "p20_ms": 0.95, "p80_ms": 1.35})
    assert compare.classify(old, noisy).verdict == "same"  # inside the runs' own 40% spread
    assert compare.classify(old, None).verdict == "gone" and compare.classify(None, old).verdict == "new"

    def edit(rec):
        if _is(rec, "triton", "matmul", "bf16", "M4096_N4096_K4096"):
            rec["timing"] = {k: (v * 1.5 if k.endswith("_ms") else v) for k, v in rec["timing"].items()}
    new = _edited(tmp_path, edit)
    md = tmp_path / "cmp.md"
    assert cli.main(["compare", str(FIX), str(new), "--markdown", str(md)]) == 0
    assert cli.main(["compare", str(FIX), str(new), "--fail-on-regression"]) == 1
    assert cli.main(["compare", str(FIX), str(FIX), "--fail-on-regression"]) == 0
    assert "| matmul | bf16 | M4096_N4096_K4096 | triton | slower |" in md.read_text()


def test_cpu_only_results_are_labelled(tmp_path):
    p = tmp_path / "cpu.jsonl"
    rec = {"type": "result", "backend": "torch", "op": "vector_add", "dtype": "fp32", "case": "N4099",
           "dims": {"N": 4099}, "bound": "memory", "status": "ok", "method": "cpu_wall", "flops": 4099,
           "bytes": 49188, "tflops": 1e-4, "gbps": 5.0, "first_call_ms": 1.0, "warm_call_ms": 0.1,
           "timing": {"median_ms": 0.01, "p20_ms": 0.01, "p80_ms": 0.011, "min_ms": 0.009, "max_ms": 0.02,
                      "mean_ms": 0.01, "n": 5, "method": "cpu_wall", "flush": False, "note": ""}}
    p.write_text(json.dumps({"type": "meta", "schema": 1, "cpu_only": True, "gpu": {"name": "no CUDA GPU"}}) +
                 "\n" + json.dumps(rec) + "\n")
    paths = report.write(p, tmp_path / "out")
    md = paths["markdown"].read_text()
    assert "CPU ONLY" in md and "heatmap.png" not in md and "op_vector_add.png" in md


def test_compare_in_a_pipe_lists_changes_before_one_file_cases(tmp_path, capsys):
    def edit(rec):
        if _is(rec, "triton", "matmul", "bf16", "M4096_N4096_K4096"):
            rec["timing"] = {k: (v * 1.5 if k.endswith("_ms") else v) for k, v in rec["timing"].items()}
        if rec.get("type") == "result" and rec["backend"] == "torch":  # 'gone' in the new file
            rec["backend"] = "renamed"
    new = _edited(tmp_path, edit)
    assert cli.main(["compare", str(FIX), str(new)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(len(line) <= 200 for line in lines)  # not wrapped at 80, not unbounded either
    assert "slower" in out and "| gone" not in out and "│ gone" not in out  # gone rows are counted, not listed
    assert "gone:" in out and "--all lists them" in out
    assert cli.main(["compare", str(FIX), str(new), "--all"]) == 0
    full = capsys.readouterr().out
    assert full.index("slower") < full.index(" gone ")


def test_compare_warns_when_the_runs_flushed_the_l2_differently(tmp_path, capsys):
    from tilerosetta.bench.runner import Settings

    assert Settings().to_json()["flush_kind"] == timing.FLUSH_KIND == "read"

    def edit(rec):
        if rec.get("type") == "meta":
            rec.setdefault("settings", {})["flush_kind"] = "read"
    new = _edited(tmp_path, edit)
    assert cli.main(["compare", str(FIX), str(new)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "flushed the L2 differently (old: zero, new: read)" in out
    assert cli.main(["compare", str(new), str(new)]) == 0
    assert "flushed the L2 differently" not in capsys.readouterr().out

"""Issue 15's per-case targets (bench/targets.py): each rule met, missed and tied on hand-made records."""
import json

from tilerosetta.bench import targets
from tilerosetta.bench.results import load


def _rec(backend, op, case, ms, bound, pct=None, spread=0.01):
    return {"type": "result", "backend": backend, "op": op, "dtype": "bf16", "case": case, "dims": {}, "params": {},
            "bound": bound, "headline": True, "status": "ok", "pct_of_ceiling": pct,
            "timing": {"median_ms": ms, "p20_ms": ms * (1 - spread), "p80_ms": ms * (1 + spread)}}


def _results(tmp_path, recs):
    meta = {"type": "meta", "schema": 1, "backends": {
        "triton": {"role": "ours"}, "cute_dsl": {"role": "ours"}, "torch": {"role": "baseline"},
        "quack": {"role": "peer"}, "fa4": {"role": "peer"}}}
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [meta, *recs]) + "\n")
    return load(path)


def test_memory_bound_needs_90_pct_of_copy_and_the_best_peer_minus_3_points(tmp_path):
    res = _results(tmp_path, [
        _rec("quack", "softmax", "A", 1.00, "memory", 95.0), _rec("torch", "softmax", "A", 2.0, "memory", 47.5),
        _rec("triton", "softmax", "A", 1.02, "memory", 93.1),   # >= 90 and within 3 points of quack
        _rec("cute_dsl", "softmax", "A", 1.06, "memory", 89.6)])  # under 90 (and 5.4 points behind)
    idx = res.by_key()
    assert targets.judge(res, idx[("triton", "softmax", "bf16", "A")])[0] == targets.MET
    verdict, why = targets.judge(res, idx[("cute_dsl", "softmax", "bf16", "A")])
    assert verdict == targets.GAP and "89.6% < 90%" in why and "quack 95.0%" in why


def test_gemm_against_torch_and_attention_against_the_best_of_fa4_and_sdpa_ties_count(tmp_path):
    res = _results(tmp_path, [
        _rec("torch", "matmul", "G", 1.00, "compute"), _rec("quack", "matmul", "G", 0.90, "compute"),
        _rec("triton", "matmul", "G", 1.02, "compute", spread=0.03),  # inside torch's spread: a tie
        _rec("cute_dsl", "matmul", "G", 1.20, "compute"),
        _rec("fa4", "attention", "P", 1.00, "compute"), _rec("torch", "attention", "P", 1.10, "compute"),
        _rec("triton", "attention", "P", 1.25, "compute")])
    idx = res.by_key()
    # quack is faster than torch, but the GEMM target is cuBLAS as torch users call it
    assert targets.judge(res, idx[("triton", "matmul", "bf16", "G")]) == (targets.MET, "0.98x torch (tie)")
    assert targets.judge(res, idx[("cute_dsl", "matmul", "bf16", "G")]) == (targets.GAP, "0.83x torch")
    assert targets.judge(res, idx[("triton", "attention", "bf16", "P")]) == (targets.GAP, "0.80x fa4")
    header, rows, counts = targets.table(res)
    assert header == ["op", "size", "triton", "cute_dsl"]
    assert counts == {"triton": (1, 2), "cute_dsl": (0, 1)}
    assert rows[0][:2] == ["matmul", "G"] and rows[1][3] == "-"  # cute_dsl has no attention result: not judged


# ---- causes (bench/gap_causes.toml) --------------------------------------------------------------------

import os  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tilerosetta.bench.results import RESULTS_DIR, resolve_results_path  # noqa: E402
from tilerosetta.toolchain import REPO_ROOT  # noqa: E402


def _causes(tmp_path, text):
    path = tmp_path / "causes.toml"
    path.write_text(text)
    return targets.load_causes(path)


def test_a_gap_cell_names_the_first_cause_that_covers_it_and_an_uncovered_gap_says_so(tmp_path):
    res = _results(tmp_path, [
        _rec("quack", "softmax", "M4096_N16384", 1.00, "memory", 95.0),
        _rec("triton", "softmax", "M4096_N16384", 1.5, "memory", 63.0),
        _rec("cute_dsl", "softmax", "M4096_N16384", 1.6, "memory", 59.0),
        _rec("triton", "softmax", "M32768_N4096", 1.5, "memory", 70.0)])
    causes = _causes(tmp_path, """
[[gap]]
backend = "triton"
op = ["rms_norm", "softmax"]
cases = ["M4096_*"]
class = "ours"
cause = "first"
where = "bench/GAPS.md"
[[gap]]
backend = "*"
op = "softmax"
cases = ["M4096_*"]
class = "unknown"
cause = "second"
where = "bench/GAPS.md"
""")
    _, rows, _ = targets.table(res, "bf16", causes)
    cells = {row[1]: row[2:] for row in rows}
    assert cells["M4096_N16384"][0].endswith("[1]") and cells["M4096_N16384"][1].endswith("[2]")
    assert cells["M32768_N4096"][0].endswith("[no cause]")
    assert targets.gaps_without_cause(res, causes) == [("triton", "softmax", "bf16", "M32768_N4096")]
    assert targets.cause_rows(causes, {2})[0][:4] == ["2", "*", "softmax (M4096_*)", "unknown"]


def test_a_cause_without_a_class_or_evidence_is_refused_with_its_entry(tmp_path):
    with pytest.raises(ValueError, match=r"entry 1 \(triton/softmax\): missing \['where'\]"):
        _causes(tmp_path, '[[gap]]\nbackend = "triton"\nop = "softmax"\nclass = "ours"\ncause = "x"\n')
    with pytest.raises(ValueError, match="class must be one of"):
        _causes(tmp_path, '[[gap]]\nbackend = "t"\nop = "s"\nclass = "compiler"\ncause = "x"\nwhere = "w"\n')


def _newest_gpu_run() -> Path:
    return resolve_results_path(RESULTS_DIR / "latest")


def test_every_gap_of_the_newest_committed_h200_run_has_a_cause():
    res = load(_newest_gpu_run())
    missing = targets.gaps_without_cause(res, targets.load_causes())
    assert not missing, f"{len(missing)} gaps of {_newest_gpu_run().name} have no entry in bench/gap_causes.toml: {missing[:8]}"


def _github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    return re.sub(r" ", "-", "".join(ch for ch in text if ch.isalnum() or ch in "-_ "))


def test_every_cause_links_to_evidence_and_a_reproducer_that_exist():
    causes = targets.load_causes()
    assert causes, "bench/gap_causes.toml has no entries"
    for c in causes:
        path, _, anchor = c.where.partition("#")
        doc = REPO_ROOT / path
        assert doc.is_file(), f"{c.backends}/{c.ops}: evidence {c.where} does not exist"
        if anchor:
            anchors = {_github_anchor(m) for m in re.findall(r"^#+ (.+)$", doc.read_text(), re.M)}
            assert anchor in anchors, f"{c.backends}/{c.ops}: no heading of {path} has the anchor #{anchor}"
        if c.repro.startswith(("repro/", "tools/")):  # a reproducer file, or a measuring tool and its arguments
            path = c.repro.split()[0]
            assert (REPO_ROOT / path).is_file(), f"{c.backends}/{c.ops}: reproducer {path} does not exist"
        else:
            assert c.repro.split()[0] in ("tilerosetta", "cargo"), f"{c.backends}/{c.ops}: reproducer {c.repro!r}"


def test_the_committed_targets_page_is_the_rendering_of_the_newest_run():
    from tilerosetta.bench import report

    page = (REPO_ROOT / "bench" / "TARGETS.md").read_text()
    cmd = re.search(r"Generated by `tilerosetta report (\S+) --targets bench/TARGETS.md((?: --targets-with \S+)*)`", page)
    assert cmd, "bench/TARGETS.md does not name the command that generated it"
    sources = [cmd.group(1), *re.findall(r"--targets-with (\S+)", cmd.group(2))]
    newest = f"bench/results/{_newest_gpu_run().name}"
    assert sources[0] == newest, f"bench/TARGETS.md renders {sources[0]}, not the newest run {newest}"
    runs = [(load(REPO_ROOT / s), s) for s in sources]
    assert page == report.targets_markdown(runs) + "\n", (
        f"bench/TARGETS.md is stale: `tilerosetta report {newest} --targets` (with the same --targets-with)")


def test_report_targets_writes_the_page_and_refuses_a_missing_run(tmp_path):
    import subprocess
    import sys

    newest = f"bench/results/{_newest_gpu_run().name}"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "python")}
    page = tmp_path / "T.md"
    res = subprocess.run([sys.executable, "-m", "tilerosetta", "report", newest, "--out", str(tmp_path / "r"),
                          "--targets", str(page)], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = page.read_text()
    assert f"`tilerosetta report {newest} --targets bench/TARGETS.md`" in text and "## Targets at bf16" in text
    bad = subprocess.run([sys.executable, "-m", "tilerosetta", "report", newest, "--out", str(tmp_path / "r"),
                          "--targets", str(page), "--targets-with", str(tmp_path / "none.jsonl")],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "none.jsonl not found" in bad.stdout + bad.stderr, bad.stdout + bad.stderr

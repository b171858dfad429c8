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

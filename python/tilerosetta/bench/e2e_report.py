"""The end-to-end section of `tilerosetta report` (issue 14 item 6): tables of an `e2e-*.jsonl` file
(tilerosetta/bench/e2e.py), as report Blocks, so the Markdown and the HTML say the same thing.

`tilerosetta report E2E.jsonl` renders it alone; `tilerosetta report RESULTS --e2e E2E.jsonl` adds it to a
benchmark report."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tilerosetta.bench.report import Block, Section, _f
from tilerosetta.bench.results import meta_line, newest_in

NOT_OK = ("error", "skipped", "unsupported", "unavailable")


@dataclass
class E2E:
    path: Path
    meta: dict = field(default_factory=dict)
    limit: dict = field(default_factory=dict)
    host_cost: list = field(default_factory=list)
    rows: list = field(default_factory=list)

    def contestants(self) -> list[str]:
        out = []
        for r in self.rows:
            if r["contestant"] not in out:
                out.append(r["contestant"])
        return out

    def row(self, contestant, phase, mode, B, size=None) -> dict | None:
        for r in self.rows:
            if (r["contestant"], r.get("phase"), r.get("mode"), r.get("B")) == (contestant, phase, mode, B) and (
                    size is None or r.get("S", r.get("ctx")) == size):
                return r
        # a contestant that could not run at all has one row for every scenario
        return next((r for r in self.rows if r["contestant"] == contestant and r.get("phase") == "all"), None)


def is_e2e_file(path) -> bool:
    return "e2e" in meta_line(path)


def load_e2e(arg) -> E2E:
    """An e2e results file: a path, or a folder (its newest e2e-*.jsonl). Tolerates a truncated last line."""
    p = Path(arg)
    if p.is_dir():
        p = newest_in(p, "e2e-*.jsonl", "tilerosetta e2e")
    if not is_e2e_file(p):
        raise ValueError(f"{p} is not a `tilerosetta e2e` results file (its first line is no meta with 'e2e')")
    out = E2E(p)
    with open(p, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = rec.get("type")
            if kind == "meta" and not out.meta:
                out.meta = rec
            elif kind == "limit":
                out.limit = rec
            elif kind == "host_cost":
                out.host_cost.append(rec)
            elif kind == "e2e":
                out.rows.append(rec)
    return out


def _tok(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("status") != "ok":
        return r.get("status", "?").upper()
    return f"{r['tokens_per_s']:,.0f}"


def _scenario(r: dict) -> str:
    if r.get("phase") == "all":
        return "all"
    size = f"S={r['S']}" if "S" in r else f"ctx={r.get('ctx')}"
    return f"{r.get('phase')} {r.get('mode')} B={r.get('B')} {size}"


def sections(e: E2E) -> list[Section]:
    plan, meta = e.meta.get("e2e", {}), e.meta
    cfg = plan.get("config", {})
    gpu = (meta.get("gpu") or {}).get("name", "?")
    blocks = []
    if meta.get("cpu_only"):
        blocks.append(Block("p", "**CPU ONLY (dry run)**: a tiny config on CPU tensors, host wall clock. NOT "
                                 "comparable with GPU results; no weight-streaming limit."))
    lim = e.limit
    lim_text = (f"The weight-streaming limit of a B=1 decode step: {lim['weight_bytes'] / 1e9:.2f} GB of weights "
                f"(every layer, final norm, LM head) / {lim['copy_gbps']:.0f} GB/s measured copy bandwidth = "
                f"{lim['limit_ms']:.3f} ms per step ({lim['limit_tokens_per_s_b1']:,.0f} tok/s); the KV cache "
                f"read at ctx {plan.get('ctx')} adds a little and is not counted."
                if lim.get("limit_ms") else f"No weight-streaming limit: {lim.get('reason', 'not measured')}.")
    blocks.append(Block("p", (
        f"Llama-3.1-8B shapes with {cfg.get('layers')} layers (hidden {cfg.get('hidden')}, {cfg.get('heads')}/"
        f"{cfg.get('kv_heads')} heads, MLP {cfg.get('mlp')}, vocab {cfg.get('vocab')}), random weights, "
        f"{plan.get('dtype')}, on {gpu}, file {e.path.name}. Prefill: last-position logits, tokens/s = B*S / time. "
        f"Decode: one token per sequence at context {plan.get('ctx')} (the step re-run at that position), "
        f"tokens/s = B / step time, eager ({plan.get('decode_steps')} steps) and with the step in a CUDA graph "
        f"({plan.get('graph_replays')} replays). hf = transformers (SDPA); hf_compile = torch.compile of it "
        f"(backend {plan.get('compile_backend')}; its graph row is mode='reduce-overhead'). best = per op the "
        f"fastest of our backends in the latest committed benchmark. " + lim_text)))
    names = e.contestants()
    pre_sizes = [tuple(p) for p in plan.get("prefill", [])]
    header = ["contestant"] + [f"prefill B={b} S={s} tok/s" for b, s in pre_sizes] + ["peak GiB"]
    rows = []
    for n in names:
        cells = [e.row(n, "prefill", "eager", b, s) for b, s in pre_sizes]
        peaks = [c.get("peak_mem_gib") for c in cells if c and c.get("peak_mem_gib") is not None]
        rows.append([n] + [_tok(c) for c in cells] + [_f(max(peaks), 1) if peaks else "-"])
    blocks += [Block("p", "Prefill."), Block("table", header=header, rows=rows)]
    batches = plan.get("decode", [])
    header = ["contestant"]
    for b in batches:
        header += [f"B={b} eager tok/s", f"B={b} graph tok/s"]
    header += ["B=1 eager % of limit", "B=1 graph % of limit", "host ms/step B=1 eager", "host ms/step B=1 graph",
               "ms/step B=1 eager", "peak GiB"]
    rows = []
    for n in names:
        cells = []
        for b in batches:
            cells += [_tok(e.row(n, "decode", "eager", b)), _tok(e.row(n, "decode", "graph", b))]
        e1, g1 = e.row(n, "decode", "eager", 1), e.row(n, "decode", "graph", 1)
        ok = lambda r: r is not None and r.get("status") == "ok"  # noqa: E731
        peaks = [r.get("peak_mem_gib") for r in e.rows if r["contestant"] == n and r.get("phase") == "decode"
                 and r.get("peak_mem_gib") is not None]
        cells += [_f(e1.get("pct_of_weight_limit"), 0, "%") if ok(e1) else "-",
                  _f(g1.get("pct_of_weight_limit"), 0, "%") if ok(g1) else "-",
                  _f(e1.get("host_ms_per_step"), 3) if ok(e1) else "-",
                  _f(g1.get("host_ms_per_step"), 3) if ok(g1) else "-",
                  _f(e1.get("ms"), 3) if ok(e1) else "-", _f(max(peaks), 1) if peaks else "-"]
        rows.append([n] + cells)
    blocks += [Block("p", "Decode. Host ms/step close to ms/step means the step is host-bound (the GPU waits "
                          "for launches); a CUDA graph replays the step with one launch."),
               Block("table", header=header, rows=rows)]
    kinds = []
    for r in e.rows:
        for k in (r.get("where") or {}):
            if k not in kinds:
                kinds.append(k)
    rows = []
    for n in names:
        where = {}
        for r in e.rows:
            if r["contestant"] == n:
                for k, v in (r.get("where") or {}).items():
                    where.setdefault(k, v)
        rows.append([n] + [where.get(k, "-") for k in kinds])
    if kinds:
        blocks += [Block("p", "Where each kind of call ran (a torch fallback names its reason)."),
                   Block("table", header=["contestant"] + kinds, rows=rows)]
    bad = [[r["contestant"], _scenario(r), r.get("status", "?"), (r.get("message") or "")[:300]]
           for r in e.rows if r.get("status") in NOT_OK]
    if bad:
        blocks += [Block("p", "Rows not timed, and why."),
                   Block("table", header=["contestant", "scenario", "status", "why"], rows=bad)]
    out = [Section("End to end: Llama 3.1 8B shapes", blocks)]
    if e.host_cost:
        rows = []
        for r in e.host_cost:
            if r.get("status") == "ok":
                rows.append([r["backend"], _f(r.get("bound_us"), 1), _f(r.get("raw_us"), 1),
                             _f(r.get("ratio_to_torch"), 2, "x"), _f(r.get("ratio_to_torch_native"), 2, "x"),
                             "yes" if r.get("within_target") else "NO", r.get("note", "")])
            else:
                rows.append([r["backend"], r.get("status", "?"), "", "", "", "", r.get("message", "")[:200]])
        torch_native = next((r.get("torch_native_us") for r in e.host_cost if r.get("torch_native_us")), None)
        out.append(Section("Host cost per call", [
            Block("p", "Host µs per asynchronous call of vector_add N=1024 through each backend's validated BoundOp "
                       "(the path the model uses) and its raw function; ratio to torch's validated call (target: "
                       f"within 2x, issue 14 item 7) and to torch's own torch.add(out=) ({_f(torch_native, 1)} µs). "
                       "'validation only' is a BoundOp around a kernel that does nothing."),
            Block("table", header=["backend", "validated µs", "raw µs", "/ torch validated", "/ torch.add",
                                   "within 2x", "note"], rows=rows)]))
    return out


def write(arg, out_dir: Path | None = None) -> dict[str, Path]:
    """Render an e2e file alone (report.md, report.html under build/reports/<stem>-report/)."""
    from tilerosetta.bench import report

    e = load_e2e(arg)
    out_dir = Path(out_dir) if out_dir else report.default_out_dir(e.path)
    out_dir.mkdir(parents=True, exist_ok=True)
    title = f"TileRosetta end to end: {(e.meta.get('gpu') or {}).get('name', '?')}"
    secs = sections(e)
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(report.to_markdown(title, secs), encoding="utf-8")
    page.write_text(report.to_html(title, secs), encoding="utf-8")
    return {"markdown": md, "html": page, "plots": out_dir, "e2e_only": True}

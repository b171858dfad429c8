"""`tilerosetta bench`: time every available backend x op x dtype x bench case on this GPU, one way.

Without a CUDA GPU it refuses (exit 2) and says why: CPU timings of CPU tensors say nothing about GPU
kernels. `--allow-cpu` runs the same bookkeeping on CPU backends with small cases and host timing,
labelled "cpu_wall, not comparable" everywhere (for CI and for trying the pipeline).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn)
from rich.table import Table

from tilerosetta import backends as registry
from tilerosetta import shard
from tilerosetta.specs import OP_NAMES

MAX_RESTARTS = 3
NO_GPU = ("no CUDA GPU visible to torch: `tilerosetta bench` times GPU kernels only and refuses to report CPU "
          "timings as if they were comparable.\n  * correctness without a GPU: tilerosetta test\n"
          "  * a report from committed results: tilerosetta report bench/fixtures/h200_sample.jsonl\n"
          "  * the bench bookkeeping on CPU (small cases, host timing, labelled not comparable): "
          "tilerosetta bench --allow-cpu")


def _csv(text):
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _restart_argv(args, path: Path) -> list[str]:
    argv = [sys.executable, "-m", "tilerosetta", "bench", "--resume", str(path), "--out-dir", args.out_dir,
            "--warmup-ms", str(args.warmup_ms), "--rep-ms", str(args.rep_ms)]
    for flag in ("backend", "op", "dtype", "size", "shard"):
        if getattr(args, flag):
            argv += [f"--{flag}", getattr(args, flag)]
    for flag in ("quick", "allow_cpu", "no_graph", "no_flush"):
        if getattr(args, flag):
            argv.append("--" + flag.replace("_", "-"))
    return argv


def run(args) -> int:
    import torch

    from tilerosetta import toolchain
    from tilerosetta.bench import ceilings as ceil_mod
    from tilerosetta.bench import environment, results, runner

    if args.gpus:  # one worker per GPU, each running this command on its share (tilerosetta/shard.py)
        return shard.run_bench(args)
    console = Console()
    cpu = not torch.cuda.is_available()
    if cpu and not args.allow_cpu:
        console.print(f"[red]tilerosetta bench:[/] {NO_GPU}", highlight=False)
        return 2
    toolchain.activate()
    if args.quick:
        args.warmup_ms, args.rep_ms = min(args.warmup_ms, 5.0), min(args.rep_ms, 20.0)
    settings = runner.Settings(warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, graph=not args.no_graph,
                               flush=not args.no_flush, cpu=cpu, quick=args.quick)
    names = _csv(args.backend) or list(registry.BACKEND_NAMES)
    all_b = [registry.get(n) for n in names]
    device = "cpu" if cpu else "cuda"
    chosen = []
    for b in all_b:
        ok, reason = b.is_available()
        if not ok:
            console.print(f"[yellow]skip[/] {b.name}: {reason}", highlight=False)
        elif b.device_type != device:
            console.print(f"[yellow]skip[/] {b.name}: runs on {b.device_type} tensors, this run times {device}",
                          highlight=False)
        else:
            chosen.append(b)
    if not chosen:
        console.print("[red]no backend can run here[/]")
        return 2
    ops = _csv(args.op) or list(OP_NAMES)
    for op in ops:
        if op not in OP_NAMES:
            console.print(f"[red]unknown op '{op}'[/]: expected some of {list(OP_NAMES)}")
            return 2
    try:
        plan = runner.build_plan(ops, _csv(args.dtype) or None, args.size, args.quick, cpu)
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    if not plan:
        console.print("[red]nothing to run[/]: no (op, dtype, case) matches --op/--dtype/--size")
        return 2
    plan = shard.bench_share(plan, args.shard)  # a worker of --gpus: its share only

    if args.resume:
        old = results.load(args.resume)
        path = old.path
        writer = results.ResultsWriter(path, append=True)
        for rec in runner.crashed_records(old.started):
            writer.write(rec)
        writer.write({"type": "resume", "t": results.now_iso(), "git": environment.git_commit(),
                      "settings": settings.to_json()})
        ceilings = old.ceilings
        done = {results.key_of(r) for r in old.results} | set(old.started)
        launch_done = {r["backend"] for r in old.launch}
        console.print(f"resuming {path}: {len(old.results)} result(s) done, {len(old.started)} crashed case(s) "
                      f"skipped")
    else:
        env = environment.collect(all_b)
        path = results.new_results_path(Path(args.out_dir), "cpu" if cpu else env["gpu"]["name"])
        writer = results.ResultsWriter(path)
        writer.write({"type": "meta", "schema": results.SCHEMA, "date": results.now_iso(), "fixture": False,
                      "cpu_only": cpu, "settings": settings.to_json(), **env,
                      "timing": "CPU host wall clock: NOT comparable with GPU timings" if cpu else
                      "CUDA events around a CUDA-graph replay (or plain launches where capture fails), L2 "
                      "flushed before each repetition, median of repetitions"})
        ceilings, done, launch_done = None, set(), set()
        console.print(f"results -> {path}")
    if ceilings is None and not cpu:
        with console.status("measuring ceilings (copy bandwidth, 8192^3 torch.mm)"):
            ceilings = ceil_mod.measure(quick=args.quick)
        writer.write({"type": "ceilings", **ceilings.to_json()})
    if ceilings:
        console.print(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s; mm " +
                      ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in ceilings.mm_tflops.items()))
    if cpu:
        console.print("[bold red]CPU ONLY: host wall-clock timings of CPU tensors, NOT comparable with GPU "
                      "results; no % of ceiling[/]")

    r = runner.Runner(chosen, writer, settings, ceilings, done=done, launch_done=launch_done)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task("bench", total=0)

            def on_done(rec):
                bar.advance(task)
                if not console.is_terminal:  # logs (tee): one plain line per case instead of a live bar
                    t = rec.get("timing") or {}
                    pct = rec.get("pct_of_ceiling")
                    bar.console.print(f"[{int(bar.tasks[0].completed)}/{int(bar.tasks[0].total or 0)}] "
                                      f"{rec['backend']} {rec['op']} {rec['dtype']} {rec['case']}: {rec['status']}"
                                      + (f" {runner.fmt_ms(t.get('median_ms'))}" if t else "")
                                      + (f" {pct:.0f}%" if pct is not None else ""), highlight=False)
                if rec["status"] in ("wrong", "error"):
                    bar.console.print(f"[red]{rec['status']}[/] {rec['backend']}.{rec['op']} {rec['dtype']} "
                                      f"{rec['case']}: {rec.get('message', '')[:300]}", highlight=False)

            progress = runner.Progress(start=lambda total: bar.update(task, total=total),
                                       case=lambda label: bar.update(task, description=label), done=on_done)
            r.run(plan, progress)
    except runner.FatalCudaError as exc:
        writer.close()
        console.print(f"[red]fatal CUDA error, the context is unusable[/]: {exc}", highlight=False)
        restarts = int(os.environ.get("TILEROSETTA_BENCH_RESTARTS", "0"))
        if args.no_restart or restarts >= MAX_RESTARTS:
            console.print(f"continue with: tilerosetta bench --resume {path}")
            return 1
        os.environ["TILEROSETTA_BENCH_RESTARTS"] = str(restarts + 1)
        console.print(f"restarting in a fresh process (--resume {path}), restart {restarts + 1}/{MAX_RESTARTS}")
        sys.stdout.flush()
        os.execv(sys.executable, _restart_argv(args, path))
    writer.close()
    print_summary(console, results.load(path))
    console.print(f"results: {path}\nreport:  tilerosetta report {path}")
    return 0


def print_summary(console, res) -> None:
    from tilerosetta.bench.runner import summary_rows

    header, rows = summary_rows(res)
    title = "median time, % of ceiling, speedup vs torch"
    if res.cpu_only:
        title += "  [CPU host timing: NOT comparable]"
    table = Table(title=title)
    for h in header:
        table.add_column(h)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    bad = [x for x in res.results if x["status"] in ("wrong", "error", "crashed")]
    for x in bad:
        console.print(f"  {x['status']}: {x['backend']}.{x['op']} {x['dtype']} {x['case']}: "
                      f"{x.get('message', '')[:200]}", highlight=False)


def register(sub):
    from tilerosetta.bench.results import RESULTS_DIR

    p = sub.add_parser("bench", help="time backends x ops on this GPU (checked first), write JSONL results")
    p.add_argument("--backend", default="", help="comma-separated backends (default: every available one)")
    p.add_argument("--op", default="", help="comma-separated ops (default: all)")
    p.add_argument("--dtype", default="", help="comma-separated dtypes: fp32,fp16,bf16 (default: the spec's)")
    p.add_argument("--size", default="", help="bench case index (0, 1, ...) or dims like M=4096,N=8192")
    p.add_argument("--quick", action="store_true", help="smoke run: first case, bf16, 5 ms warmup / 20 ms reps")
    p.add_argument("--warmup-ms", type=float, default=25.0, help="warm-up budget per case (GPU ms)")
    p.add_argument("--rep-ms", type=float, default=100.0, help="timed repetitions budget per case (GPU ms)")
    p.add_argument("--no-graph", action="store_true", help="time plain launches, never CUDA graphs")
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 between repetitions")
    p.add_argument("--resume", default="", help="append to this results file, skipping cases already done")
    p.add_argument("--no-restart", action="store_true",
                   help="after a fatal CUDA error stop instead of resuming in a fresh process")
    p.add_argument("--out-dir", "--out", dest="out_dir", default=str(RESULTS_DIR),
                   help="folder for the new results file (default bench/results/)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="without a GPU: run the bookkeeping on CPU backends, labelled NOT comparable")
    shard.add_arguments(p)
    p.set_defaults(func=run)

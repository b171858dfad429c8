"""`tilerosetta bench`: time every available backend x op x dtype x bench case on this GPU, one way.

Without a CUDA GPU it refuses (exit 2) and says why: CPU timings of CPU tensors say nothing about GPU
kernels. `--allow-cpu` runs the same bookkeeping on CPU backends with small cases and host timing,
labelled "cpu_wall, not comparable" everywhere (for CI and for trying the pipeline).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tilerosetta.console import make_console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn)
from rich.table import Table

from tilerosetta import backends as registry
from tilerosetta import shard
from tilerosetta.specs import OP_NAMES

MAX_RESTARTS = 3
DEFAULT_WARMUP_MS, DEFAULT_REP_MS = 25.0, 100.0


def no_gpu_message(command: str) -> str:
    """Why `bench`/`sweep` refuse without a GPU, and what to run instead (spelled as this user can run it)."""
    from tilerosetta.bench.results import RESULTS_DIR, resolve_results_path
    from tilerosetta.console import cli_name

    tr = cli_name()
    try:
        latest = os.path.relpath(resolve_results_path(RESULTS_DIR / "latest"))
        committed = f"{tr} report {latest}   (the newest committed GPU run)"
    except (FileNotFoundError, ValueError):  # ValueError: relpath across drives
        committed = f"{tr} report bench/results/latest"
    return (f"no CUDA GPU visible to torch: `tilerosetta {command}` times GPU kernels only and refuses to report "
            f"CPU timings as if they were comparable.\n  * correctness without a GPU: {tr} test\n"
            f"  * the committed GPU results: {committed}\n"
            f"  * the {command} bookkeeping on CPU (small cases, host timing, labelled not comparable, written to "
            f"build/cpu-results/): {tr} {command} --allow-cpu")


def _csv(text):
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _restart_argv(args, path: Path) -> list[str]:
    argv = [sys.executable, "-m", "tilerosetta", "bench", "--resume", str(path), "--out-dir", args.out_dir,
            "--warmup-ms", str(args.warmup_ms), "--rep-ms", str(args.rep_ms)]
    for flag in ("backend", "op", "dtype", "size", "shard"):
        if getattr(args, flag):
            argv += [f"--{flag}", getattr(args, flag)]
    for flag in ("quick", "allow_cpu", "no_graph", "no_flush", "scaling"):
        if getattr(args, flag):
            argv.append("--" + flag.replace("_", "-"))
    if args.scaling:
        argv += ["--budget-s", str(args.budget_s)]
    return argv


def run(args) -> int:
    import torch

    from tilerosetta import toolchain
    from tilerosetta.bench import ceilings as ceil_mod
    from tilerosetta.bench import environment, results, runner

    if args.gpus:  # one worker per GPU, each running this command on its share (tilerosetta/shard.py)
        return shard.run_bench(args)
    console = make_console()
    cpu = not torch.cuda.is_available()
    if cpu and not args.allow_cpu:
        console.print(f"[red]tilerosetta bench:[/] {no_gpu_message('bench')}", highlight=False)
        return 2
    args.out_dir = args.out_dir or str(results.default_out_dir(cpu))
    toolchain.activate()
    if args.resume and not args.scaling and results.load(args.resume).meta.get("scaling"):
        args.scaling = True  # resuming a scaling file goes on with its scaling plan
    if args.quick:
        args.warmup_ms, args.rep_ms = min(args.warmup_ms, 5.0), min(args.rep_ms, 20.0)
    settings = runner.Settings(warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, graph=not args.no_graph,
                               flush=not args.no_flush, cpu=cpu, quick=args.quick)
    if args.scaling:  # many points, short budgets (explicit --warmup-ms/--rep-ms still win)
        from tilerosetta.bench import scaling

        if args.warmup_ms == DEFAULT_WARMUP_MS:
            settings.warmup_ms = scaling.WARMUP_MS
        if args.rep_ms == DEFAULT_REP_MS:
            settings.rep_ms = scaling.REP_MS
        settings.min_reps = scaling.MIN_REPS
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
    budget, scaling_meta = None, None
    if args.scaling:
        if args.size or args.quick:
            console.print("[red]--scaling takes its sizes from the specs (spec.scaling): drop --size/--quick[/]")
            return 2
        points = scaling.build_plan(ops, _csv(args.dtype) or None,
                                    max_elems=scaling.CPU_MAX_ELEMS if cpu else None)
        plan = [(p.spec, p.dtype, p.case) for p in points]
        total = args.budget_s
        if args.resume:  # a restart after a fatal CUDA error must not start the budget over
            total = max(0.0, total - scaling.seconds_used(results.load(args.resume)))
        budget = scaling.Budget(total, scaling.weights(
            points, chosen, lambda b, p: runner.skip_reason(b, p.spec, p.dtype, settings) is None))
        scaling_meta = {**scaling.describe(points), "budget_s": args.budget_s,
                        "shares_s": {b: round(budget.share_s(b), 1) for b in budget.weights}}
        if cpu:
            scaling_meta["cpu_note"] = f"CPU run: only points of at most {scaling.CPU_MAX_ELEMS} elements"
    else:
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
        path = results.new_results_path(Path(args.out_dir), "cpu" if cpu else env["gpu"]["name"],
                                        prefix="scaling-" if args.scaling else "")
        writer = results.ResultsWriter(path)
        extra = {"scaling": scaling_meta} if scaling_meta else {}
        writer.write({"type": "meta", "schema": results.SCHEMA, "date": results.now_iso(), "fixture": False,
                      "cpu_only": cpu, "settings": settings.to_json(), **extra, **env,
                      "timing": "CPU host wall clock: NOT comparable with GPU timings" if cpu else
                      "CUDA events around a CUDA-graph replay (or plain launches where capture fails), L2 "
                      "flushed before each repetition by reading a 2x L2 buffer (clean lines), median of repetitions"})
        ceilings, done, launch_done = None, set(), set()
        console.print(f"results -> {path}")
    if ceilings is None and not cpu:
        with console.status("measuring ceilings (copy bandwidth; GEMM peak, best of a few large shapes)"):
            ceilings = ceil_mod.measure(quick=args.quick)
        writer.write({"type": "ceilings", **ceilings.to_json()})
    if ceilings:
        console.print(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s; {ceilings.describe_compute()}",
                      highlight=False)
    if cpu:
        console.print("[bold red]CPU ONLY: host wall-clock timings of CPU tensors, NOT comparable with GPU "
                      "results; no % of ceiling[/]")

    r = runner.Runner(chosen, writer, settings, ceilings, done=done, launch_done=launch_done, budget=budget)
    if budget is not None:
        console.print(f"scaling: {len(plan)} point(s) x {len(chosen)} backend(s), coarse to fine, budget "
                      f"{budget.total_s:.0f} s shared by points run: " +
                      ", ".join(f"{b} {budget.share_s(b):.0f} s" for b in budget.weights), highlight=False)
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
    if args.scaling:
        console.print(f"results: {path}\nreport:  tilerosetta report MAIN_RESULTS --scaling {path}")
    else:
        console.print(f"results: {path}\nreport:  tilerosetta report {path}")
    return 0


def print_summary(console, res) -> None:
    from tilerosetta.bench.runner import summary_rows

    header, rows = summary_rows(res)
    title = "median time, % of ceiling, ratio to the best peer (tie = inside the p20-p80 noise)"
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
    p = sub.add_parser("bench", help="time backends x ops on this GPU (checked first), write JSONL results")
    p.add_argument("--backend", default="", help="comma-separated backends (default: every available one)")
    p.add_argument("--op", default="", help="comma-separated ops (default: all)")
    p.add_argument("--dtype", default="", help="comma-separated dtypes: fp32,fp16,bf16 (default: the spec's)")
    p.add_argument("--size", default="", help="bench case index (0, 1, ...) or dims like M=4096,N=8192")
    p.add_argument("--quick", action="store_true", help="smoke run: first case, bf16, 5 ms warmup / 20 ms reps")
    p.add_argument("--warmup-ms", type=float, default=DEFAULT_WARMUP_MS, help="warm-up budget per case (GPU ms)")
    p.add_argument("--rep-ms", type=float, default=DEFAULT_REP_MS, help="timed repetitions budget per case (GPU ms)")
    p.add_argument("--scaling", action="store_true",
                   help="how cost grows with size: time each op over the size sweeps of its spec (spec.scaling), "
                        "one dtype (bf16), short budgets (3 ms warm-up, 12 ms reps, >= 5 reps) plus host time "
                        "per eager call; writes scaling-*.jsonl. Time: about 4 minutes on one H200 with every "
                        "backend and peer (--budget-s of timed points + ~40 s of imports and ceilings); points "
                        "past the budget are recorded as skipped")
    p.add_argument("--budget-s", type=float, default=200.0,
                   help="--scaling: wall seconds for the timed points, shared by the backends in proportion to "
                        "the points each runs (default 200)")
    p.add_argument("--no-graph", action="store_true", help="time plain launches, never CUDA graphs")
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 between repetitions")
    p.add_argument("--resume", default="", help="append to this results file, skipping cases already done")
    p.add_argument("--no-restart", action="store_true",
                   help="after a fatal CUDA error stop instead of resuming in a fresh process")
    p.add_argument("--out-dir", "--out", dest="out_dir", default="",
                   help="folder for the new results file (default: bench/results/ for GPU runs, "
                        "build/cpu-results/ (ignored by git) for --allow-cpu runs)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="without a GPU: run the bookkeeping on CPU backends, labelled NOT comparable")
    shard.add_arguments(p)
    p.set_defaults(func=run)

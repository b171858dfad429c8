"""`tilerosetta sweep --op OP --backend B`: time a backend over its tile-size configurations."""

from __future__ import annotations

from pathlib import Path

from tilerosetta.console import make_console
from rich.table import Table

from tilerosetta import shard


def run(args) -> int:
    import torch

    from tilerosetta import backends as registry
    from tilerosetta import toolchain
    from tilerosetta.bench import environment, runner, sweep
    from tilerosetta.bench.results import SCHEMA, ResultsWriter, new_results_path, now_iso
    from tilerosetta.bench.results import default_out_dir
    from tilerosetta.commands.bench import no_gpu_message
    from tilerosetta.specs import get_spec, parse_dtype

    if args.plan:
        return _print_plan(args)
    if args.gpus:  # the configurations split over one worker per GPU (tilerosetta/shard.py)
        return shard.run_sweep(args)
    console = make_console()
    cpu = not torch.cuda.is_available()
    if cpu and not args.allow_cpu:
        console.print(f"[red]tilerosetta sweep:[/] {no_gpu_message('sweep')}", highlight=False)
        return 2
    args.out_dir = args.out_dir or str(default_out_dir(cpu))
    if cpu and args.write_best:
        console.print("[red]refusing --write-best with CPU timings[/]: tuned_configs.json holds GPU results only")
        return 2
    toolchain.activate()
    try:
        backend, spec = registry.get(args.backend), get_spec(args.op)
        dtype = parse_dtype(args.dtype)
    except (KeyError, ValueError) as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    ok, reason = backend.is_available()
    if not ok:
        console.print(f"[red]{backend.name} unavailable[/]: {reason}")
        return 2
    if args.quick:
        args.warmup_ms, args.rep_ms = min(args.warmup_ms, 5.0), min(args.rep_ms, 20.0)
    settings = runner.Settings(warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, cpu=cpu, quick=args.quick)
    try:
        cases = runner.select_cases(spec, args.size, args.quick, cpu)
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    try:
        where = sweep.parse_where_args(args.where)
    except ValueError as exc:
        console.print(f"[red]--where: {exc}[/]")
        return 2
    if not backend.config_space(spec.name, dtype):
        console.print(f"[red]{backend.name}.{spec.name} has no config space for {args.dtype}[/]")
        return 2
    gpu = "cpu" if cpu else torch.cuda.get_device_name()
    path = new_results_path(Path(args.out_dir), gpu, prefix=f"sweep-{backend.name}-{spec.name}-{args.dtype}-")
    arch = toolchain.device_arch()
    written = []
    with ResultsWriter(path) as w:
        w.write({"type": "meta", "schema": SCHEMA, "date": now_iso(), "fixture": False, "cpu_only": cpu,
                 "sweep": True, "settings": settings.to_json(), **environment.collect([backend])})
        for case in cases:
            with console.status(f"{backend.name} {spec.name} {args.dtype} {case.name}") as st:
                recs = sweep.sweep_case(backend, spec, dtype, case, w, settings,
                                        on_config=lambda label: st.update(f"{case.name}: {label}"),
                                        max_configs=args.max_configs, where=where,
                                        pick=shard.sweep_picker(args.shard))
            table = Table(title=f"{backend.name} {spec.name} {args.dtype} {case.name}")
            for h in ("config", "status", "median", "p20-p80", "first call ms"):
                table.add_column(h)
            for r in sorted(recs, key=lambda r: (r.get("status") != "ok", (r.get("timing") or {}).get("median_ms", 0))):
                t = r.get("timing") or {}
                table.add_row(sweep.config_label(r.get("config")), r["status"], runner.fmt_ms(t.get("median_ms")),
                              f"{runner.fmt_ms(t.get('p20_ms'))}-{runner.fmt_ms(t.get('p80_ms'))}" if t else "-",
                              f"{r.get('first_call_ms', 0):.0f}" if r.get("first_call_ms") else "-")
            console.print(table)
            png = sweep.plot(recs, path.with_name(f"{path.stem}-{case.name}.png"),
                             f"{backend.name} {spec.name} {args.dtype} {case.name} ({gpu})")
            console.print(f"plot: {png}")
            if args.write_best:
                key = sweep.write_best(recs, arch, str(path.name))
                written.append(key)
                console.print(f"tuned_configs.json: {key or 'nothing written (no correct configuration beat the default)'}")
            if any(r.get("fatal") for r in recs):
                console.print("[red]fatal CUDA error: stopping the sweep[/]")
                return 1
    console.print(f"results: {path}")
    return 0


def _print_plan(args) -> int:
    """--plan: the configurations each bench case's sweep would time (after --where, the backend's refusals and
    --max-configs), without a GPU: to check a device session's SWEEPS before spending device time on them."""
    from tilerosetta import backends as registry
    from tilerosetta.bench import runner, sweep
    from tilerosetta.specs import get_spec, parse_dtype

    console = make_console()
    try:
        backend, spec = registry.get(args.backend), get_spec(args.op)
        dtype = parse_dtype(args.dtype)
        cases = runner.select_cases(spec, args.size, args.quick, cpu=False)
        where = sweep.parse_where_args(args.where)
    except (KeyError, ValueError) as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    ok, reason = backend.is_available()
    if not ok and not backend.config_space(spec.name, dtype):
        console.print(f"[red]{backend.name} unavailable here, so its config space is unknown[/]: {reason}")
        return 2
    for case in cases:
        try:
            space, refused = sweep.plan(backend, spec, dtype, case, args.max_configs, where)
        except ValueError as exc:
            console.print(f"[red]{exc}[/]")
            return 2
        console.print(f"{backend.name} {spec.name} {args.dtype} {case.name}: the default, then {len(space)} "
                      f"configuration(s); {len(refused)} refused", highlight=False)
        for cfg in space:
            console.print(f"  {sweep.config_label(cfg)}", highlight=False)
        for cfg, why in refused:
            console.print(f"  refused {sweep.config_label(cfg)}: {why}", highlight=False)
    return 0


def register(sub):
    p = sub.add_parser("sweep", help="time a backend over its tile-size configurations (checked first)")
    p.add_argument("--op", required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--size", default="", help="bench case index or dims like M=4096,N=4096,K=4096 (default: all)")
    p.add_argument("--quick", action="store_true", help="first bench case, 5 ms warmup / 20 ms reps")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    p.add_argument("--max-configs", type=int, default=None,
                   help="try at most this many configurations, evenly spread over the space (default: all)")
    p.add_argument("--where", action="append", default=[], metavar="K=V[,K=V...]",
                   help="keep only configurations matching these key=value pairs; repeat for alternatives "
                        "(e.g. --where BLOCK_N=128 --where BLOCK_M=64,num_warps=4, or join them with '/' as "
                        "tools/gpu-session.sh's SWEEPS do); applied before --max-configs")
    p.add_argument("--write-best", action="store_true",
                   help="write the fastest correct config per size class into python/tilerosetta/tuned_configs.json")
    p.add_argument("--out-dir", "--out", dest="out_dir", default="",
                   help="folder for the sweep's results (default: bench/results/ on a GPU, build/cpu-results/ on CPU)")
    p.add_argument("--allow-cpu", action="store_true", help="without a GPU: host timing, labelled, never written")
    p.add_argument("--plan", action="store_true",
                   help="print the configurations each case's sweep would time (after --where, refusals and "
                        "--max-configs) and exit; needs no GPU")
    shard.add_arguments(p)
    p.set_defaults(func=run)

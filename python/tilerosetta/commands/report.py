"""`tilerosetta report RESULTS`: Markdown + self-contained HTML report of a results file."""

from __future__ import annotations

from pathlib import Path

from tilerosetta.console import make_console


def run(args) -> int:
    from tilerosetta.bench import report
    from tilerosetta.bench.results import load
    from tilerosetta.toolchain import REPO_ROOT

    console = make_console()
    try:
        paths = report.write(args.results, args.out or None, args.dtype, scaling=args.scaling or None,
                             e2e=args.e2e or None)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]tilerosetta report:[/] {exc}", highlight=False)
        return 2
    console.print(f"markdown: {paths['markdown']}\nhtml:     {paths['html']} (self-contained)\nplots:    "
                  f"{paths['plots']}", highlight=False)
    if (args.print or args.readme) and not paths.get("e2e_only"):
        table = report.readme_table(load(args.results), args.dtype)
        if args.print:
            console.print(table, highlight=False, markup=False, soft_wrap=True)
        if args.readme:
            readme = Path(args.readme)
            try:
                report.rewrite_readme(readme if readme.is_absolute() else REPO_ROOT / readme, table)
            except (OSError, ValueError) as exc:
                console.print(f"[red]tilerosetta report --readme:[/] {exc}", highlight=False)
                return 2
            console.print(f"rewrote the table between the markers of {args.readme}", highlight=False)
    if args.targets and not paths.get("e2e_only"):
        out = Path(args.targets)
        out = out if out.is_absolute() else REPO_ROOT / out
        from tilerosetta.bench.results import resolve_results_path
        try:
            runs = [resolve_results_path(p) for p in [args.results, *args.targets_with]]
            out.write_text(report.targets_markdown([(load(p), _repo_relative(p, REPO_ROOT)) for p in runs]) + "\n")
        except (OSError, ValueError) as exc:  # a missing run, or a bad entry of bench/gap_causes.toml
            console.print(f"[red]tilerosetta report --targets:[/] {exc}", highlight=False)
            return 2
        console.print(f"targets:  {out}", highlight=False)
    return 0


def _repo_relative(path, root: Path) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(path)


def register(sub):
    p = sub.add_parser("report", help="write a Markdown + HTML report (matplotlib plots) of a results file")
    p.add_argument("results", help="results .jsonl (a benchmark's or an e2e-*.jsonl), a folder (its newest benchmark), "
                                    "or bench/results/latest")
    p.add_argument("--out", default="", help="output folder (default: <results>-report/ beside the file)")
    p.add_argument("--dtype", default="bf16", help="dtype of the README table, overview and heatmap (default bf16)")
    p.add_argument("--scaling", default="",
                   help="also plot a `bench --scaling` results file (a path, or a folder: its newest scaling-*.jsonl)")
    p.add_argument("--e2e", default="",
                   help="also render a `tilerosetta e2e` results file (a path, or a folder: its newest e2e-*.jsonl) "
                        "as the end-to-end section; RESULTS may itself be an e2e file (rendered alone)")
    p.add_argument("--print", action="store_true",
                   help="also print the headline table (per op and size: our best, the best peer, every backend's "
                        "ratio to it, ties marked) as Markdown for the README")
    p.add_argument("--readme", nargs="?", const="README.md", default="",
                   help="rewrite that table in README.md (or the given file) between its two marker comments")
    p.add_argument("--targets", nargs="?", const="bench/TARGETS.md", default="",
                   help="also write issue 15's per-case targets of every dtype in the run, with each gap's cause "
                        "from bench/gap_causes.toml, as one Markdown page (default bench/TARGETS.md)")
    p.add_argument("--targets-with", action="append", default=[], metavar="RESULTS",
                   help="another run for --targets (e.g. an fp16 run beside the bf16 headline run); "
                        "each dtype is judged from the first run that has it")
    p.set_defaults(func=run)

"""`tilerosetta report RESULTS`: Markdown + self-contained HTML report of a results file."""

from __future__ import annotations

from tilerosetta.console import make_console


def run(args) -> int:
    from tilerosetta.bench import report

    console = make_console()
    try:
        paths = report.write(args.results, args.out or None, args.dtype)
    except FileNotFoundError as exc:
        console.print(f"[red]tilerosetta report:[/] {exc}", highlight=False)
        return 2
    console.print(f"markdown: {paths['markdown']}\nhtml:     {paths['html']} (self-contained)\nplots:    "
                  f"{paths['plots']}", highlight=False)
    if args.print:
        from tilerosetta.bench.report import headline
        from tilerosetta.bench.results import load

        res = load(args.results)
        header, rows = headline(res, args.dtype)
        console.print("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n" +
                      "\n".join("| " + " | ".join(r) + " |" for r in rows), highlight=False, markup=False)
    return 0


def register(sub):
    p = sub.add_parser("report", help="write a Markdown + HTML report (matplotlib plots) of a results file")
    p.add_argument("results", help="results .jsonl, a folder (its newest), or bench/results/latest")
    p.add_argument("--out", default="", help="output folder (default: <results>-report/ beside the file)")
    p.add_argument("--dtype", default="bf16", help="dtype of the headline table and heatmap (default bf16)")
    p.add_argument("--print", action="store_true", help="also print the headline table as Markdown")
    p.set_defaults(func=run)

"""`tilerosetta compare-gpus A.jsonl B.jsonl ...`: results from several GPU kinds side by side."""

from __future__ import annotations

from rich.console import Console


def run(args) -> int:
    from tilerosetta.bench import gpu_compare

    console = Console()
    try:
        kinds, table, files = gpu_compare.compare_files(args.results, args.baseline or None)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]tilerosetta compare-gpus:[/] {exc}", highlight=False)
        return 2
    for res in files:
        tag = " [FIXTURE]" if res.is_fixture else (" [CPU ONLY: not comparable]" if res.cpu_only else "")
        console.print(f"{res.path}: {res.meta.get('date', '?')}, {len(res.results)} result(s){tag}", highlight=False,
                      soft_wrap=True)
    if len(kinds) < 2:
        console.print(f"[yellow]only one GPU kind in these files ({kinds}): nothing to put side by side[/]")
    text = gpu_compare.markdown(kinds, table)
    print(text, flush=True)  # plain: a Markdown table must not be wrapped at the terminal width
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(f"GPU kinds: {', '.join(kinds)}; geometric mean of the median time over the cases every "
                    f"kind timed correctly, (% of that GPU's own measured ceiling), speedup vs {kinds[0]}.\n\n")
            f.write(text)
        console.print(f"markdown: {args.markdown}")
    return 0


def register(sub):
    p = sub.add_parser("compare-gpus", help="results of several GPU kinds side by side per op and backend")
    p.add_argument("results", nargs="+", help="results .jsonl files (or folders: their newest), any GPU kinds")
    p.add_argument("--baseline", default="", help="GPU name the others are compared with (default: the first)")
    p.add_argument("--markdown", default="", help="also write the table to this Markdown file")
    p.set_defaults(func=run)

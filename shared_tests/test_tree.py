"""The committed tree holds the product, not its by-products: no raw device logs, archives or rendered
reports under bench/ (`tilerosetta report` regenerates reports from the committed JSONL results), and a
README without a repeated section."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Raw logs, archives and rendered output; the JSONL results and the Markdown docs are what stays.
NOT_COMMITTED = re.compile(r"\.(log|out|err|tar|gz|tgz|xz|zip|html?|png|svg|jpe?g|pdf|cubin|sass)$", re.I)


def _tracked(path: str) -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (no .git here): nothing to list")
    res = subprocess.run(["git", "ls-files", path], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_bench_tree_has_no_raw_logs_archives_or_rendered_reports():
    files = _tracked("bench/")
    assert files, "git ls-files bench/ is empty: the committed results are gone"
    bad = [f for f in files if NOT_COMMITTED.search(f)]
    assert not bad, f"raw or regenerable files committed under bench/: {bad}"


def test_readme_has_no_repeated_section():
    text = re.sub(r"^```.*?^```", "", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.M | re.S)
    headings = re.findall(r"^(#{1,3} .+?)\s*$", text, re.M)  # code blocks removed: their `# ...` are comments
    seen, repeated = set(), []
    for h in headings:
        if h in seen:
            repeated.append(h)
        seen.add(h)
    assert not repeated, f"README.md repeats the section(s) {repeated}"

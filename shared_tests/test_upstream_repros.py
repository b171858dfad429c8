"""The reproducers of the upstream reports (docs/upstream/, repro/) compile on the CPU and still show the
limit each report states, with the pinned toolchain (tileiras 13.4). A Rust reproducer (repro/cutile_rs/) is
compiled and checked by its cargo test (rust/tests/upstream_inbounds.rs, run by tools/test-rust.sh); here it is
held to the same length and naming rules.

Each check runs the reproducer's own CPU driver (what a report tells its reader to run) and asserts the
SASS facts the report quotes. If one fails after a toolchain update, the compiler changed: re-measure,
then update the report (or close it upstream as fixed) and this test together. Skipped, with the reason,
where tileiras, cuda.tile or cuobjdump is absent.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tilerosetta import toolchain

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "repro"
REPORTS = ROOT / "docs" / "upstream"
# the reproducers themselves; not their drivers (harness.py, compile.py, the GPU runners *_gpu.py)
KERNEL_FILES = sorted(p for p in REPRO.rglob("*") if p.suffix in (".cu", ".py", ".rs") and p.parent != REPRO
                      and p.name not in ("harness.py", "compile.py") and not p.name.endswith("_gpu.py"))


def _skip_reason(need_cutile: bool) -> str | None:
    tc = toolchain.activate()
    ok, why = tc.can_target("sm_90")
    if not ok:
        return why
    if toolchain.binary_tool("cuobjdump") is None:
        return "cuobjdump not found (beside tileiras, in Triton's wheel, on PATH)"
    if not need_cutile:  # CUDA Tile C++: nvcc and tileirdisasm of the same release as tileiras
        missing = [t for t in ("nvcc", "tileirdisasm") if not (tc.bin_dir / t).is_file()]
        if missing:
            return (f"no {' or '.join(missing)} beside tileiras {tc.version_str()} in {tc.bin_dir}: the C++ "
                    "reproducers need the nvcc of that release")
    else:
        try:
            from cuda.tile.compilation import export_kernel  # noqa: F401
        except Exception as exc:
            return f"cuda.tile not importable: {type(exc).__name__}: {exc}"
    return None


def _run(args: list[str], need_cutile: bool, tmp_path) -> dict[str, dict[str, str]]:
    """Run a reproducer driver; its lines `LABEL | [loops=..] KERNEL k=v ...` as {LABEL: {k: v}}."""
    if why := _skip_reason(need_cutile):
        pytest.skip(why)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(ROOT / "python"),
                                                                    os.environ.get("PYTHONPATH")] if p))
    res = subprocess.run([sys.executable, *args, "--out", str(tmp_path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{args[0]} failed:\n{res.stderr[-3000:]}"
    rows = {}
    for text in res.stdout.splitlines():
        if " | " in text:
            label, facts = text.split(" | ", 1)
            rows[label] = dict(w.split("=", 1) for w in facts.split() if "=" in w)
    assert rows, f"{args[0]} printed no kernel:\n{res.stdout}\n{res.stderr[-2000:]}"
    return rows


def test_every_reproducer_kernel_is_under_60_lines():
    assert KERNEL_FILES, "no reproducer under repro/"
    long = {str(p.relative_to(ROOT)): n for p in KERNEL_FILES if (n := len(p.read_text().splitlines())) >= 60}
    assert not long, f"reproducers must stay under 60 lines: {long}"


def test_every_report_names_existing_reproducers():
    reports = [p for p in REPORTS.glob("*.md") if p.name != "README.md"]
    assert reports, "no report in docs/upstream/"
    for report in reports:
        named = set(re.findall(r"repro/[\w/.-]+\.(?:cu|py|rs)", report.read_text()))
        assert named, f"{report.name} names no reproducer under repro/"
        missing = [n for n in named if not (ROOT / n).is_file()]
        assert not missing, f"{report.name} names reproducers that do not exist: {missing}"


def test_tile_cpp_gemm_k_loop_is_pipelined_only_with_irange(tmp_path):
    rows = _run(["repro/tile_cpp/compile.py", "repro/tile_cpp/gemm_kloop.cu", "IRANGE=0,1", "RESTRICT=0,1"],
                False, tmp_path)
    plain, irange = rows["IRANGE=0 RESTRICT=1"], rows["IRANGE=1 RESTRICT=1"]
    assert (plain["loops"], irange["loops"]) == ("loop", "for"), (plain, irange)
    # plain for: one K step per trip, wgmma wait to 0, the accumulator through shared memory
    assert (plain["HGMMA"], plain["wgmma_wait"], plain["LDS"]) == ("4", "0", "64"), plain
    assert (irange["HGMMA"], irange["wgmma_wait"], "LDS" in irange) == ("8", "0/1", False), irange
    # without __restrict__ the TMA producer re-arms a private mbarrier and waits for its own load
    assert rows["IRANGE=1 RESTRICT=0"].get("SYNCS.CCTL.IV") == "2" and "SYNCS.CCTL.IV" not in irange


def test_tile_cpp_view_loads_are_bounds_checked_even_unmasked(tmp_path):
    rows = _run(["repro/tile_cpp/compile.py", "repro/tile_cpp/bounds_checked_loads.cu", "MASKED=1,0"],
                False, tmp_path)
    for label in ("MASKED=1", "MASKED=0"):
        assert (rows[label]["LDG"], rows[label]["ldg_batch"], rows[label]["ldg_in_bssy"]) == ("2", "1", "2"), rows


def test_tile_cpp_only_two_row_tiles_without_restrict_issue_their_loads_together(tmp_path):
    rows = _run(["repro/tile_cpp/compile.py", "repro/tile_cpp/bounds_checked_loads.cu", "ROWS=1,2", "RESTRICT=1,0"],
                False, tmp_path)
    together = rows["ROWS=2 RESTRICT=0"]
    assert (together["LDG"], together["ldg_batch"], "ldg_in_bssy" in together) == ("4", "4", False), together
    for label, n in (("ROWS=1 RESTRICT=1", "2"), ("ROWS=1 RESTRICT=0", "2"), ("ROWS=2 RESTRICT=1", "4")):
        assert (rows[label]["LDG"], rows[label]["ldg_batch"], rows[label]["ldg_in_bssy"]) == (n, "1", n), rows


def test_tile_cpp_static_extent_tiles_issue_their_loads_together(tmp_path):
    # the workaround: a block's own tile with compile-time extents has no bounds check left, one row and
    # __restrict__ (the default variant) included
    rows = _run(["repro/tile_cpp/compile.py", "repro/tile_cpp/bounds_checked_loads.cu", "STATIC=0,1"], False, tmp_path)
    static, view = rows["STATIC=1"], rows["STATIC=0"]
    assert (static["LDG"], static["ldg_batch"], "ldg_in_bssy" in static, "BSSY" in static) == ("2", "2", False, False), static
    assert (view["LDG"], view["ldg_batch"], view["ldg_in_bssy"]) == ("2", "1", "2"), view


def test_cutile_bounds_checked_loads_are_serialised(tmp_path):
    rows = _run(["repro/cutile_py/bounds_checked_loads.py"], True, tmp_path)
    checked, unchecked = rows["check_bounds=True"], rows["check_bounds=False"]
    assert (checked["LDG"], checked["ldg_batch"], checked["ldg_in_bssy"]) == ("2", "1", "2"), checked
    assert (unchecked["LDG"], unchecked["ldg_batch"], "ldg_in_bssy" in unchecked) == ("2", "2", False), unchecked


def test_cutile_extract_cat_goes_through_shared_memory(tmp_path):
    rows = _run(["repro/cutile_py/split_halves.py"], True, tmp_path)
    assert "SHARED" not in rows["MODE=0"] and rows["MODE=0"]["ldg_batch"] == "12", rows["MODE=0"]
    for mode in ("MODE=1", "MODE=2"):
        assert int(rows[mode]["SHARED"]) > 0 and int(rows[mode]["STS"]) > 0 and int(rows[mode]["LDS"]) > 0, rows


def test_tile_cpp_occupancy_hint_is_dropped_with_a_multi_chunk_path(tmp_path):
    rows = _run(["repro/tile_cpp/compile.py", "repro/tile_cpp/occupancy_hint.cu", "FALLBACK=0,1", "IRANGE=0"],
                False, tmp_path)
    one, both = rows["FALLBACK=0 IRANGE=0"], rows["FALLBACK=1 IRANGE=0"]
    assert (one["threads"], one["MAXREG"]) == ("256", "64"), one  # occupancy = 4 honoured
    assert (both["threads"], both["MAXREG"]) == ("384", "168") and int(both["SHARED"]) > 200_000, both


def test_tile_cpp_loads_through_a_lambda_leave_tma_and_spill(tmp_path):
    rows = _run(["repro/tile_cpp/compile.py", "repro/tile_cpp/lambda_loads.cu", "LAMBDA=0,1"], False, tmp_path)
    inline, lam = rows["LAMBDA=0"], rows["LAMBDA=1"]
    assert (inline["threads"], inline.get("STL"), inline.get("LDG"), inline["UTMALDG"]) == ("256", None, None, "3"), inline
    assert lam["threads"] == "512" and int(lam["STL"]) > 0 and int(lam["LDG"]) > 0, lam
    assert int(lam["UTMALDG"]) < int(inline["UTMALDG"]), (inline, lam)


def test_triton_warp_specialize_leaves_hopper_attention_alone_or_fails(tmp_path):
    # Triton's reproducer needs Triton (its own compiler and cuobjdump), not tileiras.
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    if toolchain.binary_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found (beside tileiras, in Triton's wheel, on PATH)")
    env = dict(os.environ, TRITON_INTERPRET="0")
    res = subprocess.run([sys.executable, "repro/triton/warp_specialize_attention.py", "--out", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {t.split(" | ")[0]: dict(w.split("=", 1) for w in t.split(" | ")[1].split() if "=" in w)
            for t in res.stdout.splitlines() if " | " in t}
    plain, ws = rows["WARPS=8 WS=0"], rows["WARPS=8 WS=1"]
    assert plain["compiled"] == ws["compiled"] == "1" and plain["sha"] == ws["sha"], (plain, ws)
    assert rows["WARPS=4 WS=0"]["compiled"] == "1", rows
    assert rows["WARPS=4 WS=1"]["compiled"] == "0" and "PassManager" in rows["WARPS=4 WS=1"]["error"], rows


def test_cutile_attention_never_overlaps_softmax_with_an_mma(tmp_path):
    # FA4's sm_90 forward at D 128 (tools/peer_sm90_facts.py fa4, 2026-12-08): threads=384 REG=168 HGMMA=32
    # wgmma_wait=0/1 setmaxnreg=24/240 bar_ids=1/2/R. The cuTile loop on the same tile: warp-specialised
    # (producer + two consumer warpgroups, setmaxnreg), the same MMA and exp2 counts, but each wgmma waited to
    # completion and no barrier chosen per warpgroup.
    rows = _run(["repro/cutile_py/attention_schedule.py"], True, tmp_path)
    d128 = rows["D=128"]
    assert (d128["threads"], d128["REG"], d128["HGMMA"]) == ("384", "168", "32"), d128
    assert "/" in d128["setmaxnreg"], d128  # producer and consumers take different register counts
    for label, row in rows.items():
        assert row["wgmma_wait"] == "0", (label, row)  # no wgmma left in flight across the softmax
        assert "R" not in row.get("bar_ids", "").split("/"), (label, row)  # no per-warpgroup turn-taking


def test_sass_facts_read_the_schedule_markers():
    # The lines FA4's sm_90 SASS holds (cuobjdump -sass); no toolchain needed.
    sys.path.insert(0, str(REPRO))
    from sass_stats import sass_facts

    sass = """
        Function : k
        /*0010*/                   USETMAXREG.DEALLOC.CTAPOOL 0x18 ;
        /*0020*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0 ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0040*/              @!P0 BAR.ARV 0x2, 0x100 ;
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING R12, 0x100 ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        Function : plain
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
    """
    facts = sass_facts(sass)
    k, plain = facts["k"], facts["plain"]
    assert (k["setmaxnreg"], k["wgmma_wait"], k["bar_ids"]) == ({24, 240}, {0, 1}, {"2", "R12"}), k
    assert (plain["setmaxnreg"], plain["wgmma_wait"], plain["bar_ids"]) == (set(), {0}, set()), plain

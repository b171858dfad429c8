#!/usr/bin/env python3
"""Compile a CUDA Tile C++ reproducer for one arch, once per variant, and print per variant the loop form
of its Tile IR and the SASS facts of its cubin (../sass_stats.py). No GPU needed.

    python3 repro/tile_cpp/compile.py repro/tile_cpp/gemm_kloop.cu IRANGE=0,1 RESTRICT=0,1 [--arch sm_90]

Prints `LABEL | loops=.. KERNEL facts`. Each NAME=v1,v2 is a -DNAME=v; every combination is one variant, compiled one after another (one nvcc at a
time). nvcc: the pinned trio of tilerosetta.toolchain when this checkout has one, else the nvcc on PATH
(CUDA 13.3+ for sm_90); CUDA_HOME/CUDA_PATH are removed from its environment (a different toolkit's
ptxas/libnvvm there makes tileiras fail).
"""
from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sass_stats import activate_tileiras, line, stats  # noqa: E402


def nvcc() -> str:
    activate_tileiras()
    if exe := shutil.which("nvcc"):
        return exe
    raise SystemExit("nvcc not found: put a CUDA 13.3+ toolkit's bin (with tileiras) on PATH")


def build(src: Path, defines: dict[str, str], arch: str, out: Path, kind: str) -> Path:
    """nvcc -tilecubin (kind 'cubin') or -tilebc (kind 'tilebc') of src with these -D values."""
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    target = out / (src.stem + "".join(f"_{k}{v}" for k, v in defines.items()) + f".{arch}.{kind}")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    subprocess.run([nvcc(), f"-tile{kind}", "--tile-only", "-std=c++20", f"-arch={arch}", *flags, str(src),
                    "-o", str(target)], check=True, env=env)
    return target


def loop_forms(tilebc: Path) -> str:
    """The loop ops of the Tile IR: `loop` (while form, not pipelined) or `for` (counted)."""
    exe = Path(nvcc()).parent / "tileirdisasm"
    text = subprocess.run([str(exe), str(tilebc)], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"= (loop|for)\b", text)
    return "loops=" + (",".join(ops) or "none")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("defines", nargs="*", help="NAME=v1,v2,...")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--out", default="/tmp/repro_tile_cpp")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [d.split("=")[0] for d in args.defines]
    values = [d.split("=")[1].split(",") for d in args.defines]
    for combo in itertools.product(*values) if names else [()]:
        defines = dict(zip(names, combo))
        label = " ".join(f"{k}={v}" for k, v in defines.items()) or "default"
        forms = loop_forms(build(Path(args.source), defines, args.arch, out, "bc"))
        for name, row in stats(str(build(Path(args.source), defines, args.arch, out, "cubin"))).items():
            print(label, "|", forms, line(name, row))


if __name__ == "__main__":
    main()

"""`tilerosetta doctor`: what is on this machine, what will break, and how to fix it."""

from __future__ import annotations

import importlib.metadata as md
import platform

from rich.console import Console

from tilerosetta import backends, toolchain


def _pkg(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"


def findings() -> list[tuple[str, str, str]]:
    """(level, topic, text) with level in ok/warn/fail."""
    out = [("ok", "python", f"{platform.python_version()} ({platform.machine()})")]
    import torch

    out.append(("ok", "torch", f"{torch.__version__} (built for CUDA {torch.version.cuda})"))
    if torch.cuda.is_available():
        arch = toolchain.device_arch()
        free, total = torch.cuda.mem_get_info()
        out.append(("ok", "gpu", f"{torch.cuda.get_device_name()} {arch}, {total / 2**30:.0f} GiB, "
                                 f"driver CUDA {_driver_version()}"))
    else:
        arch = None
        out.append(("warn", "gpu", "no CUDA GPU visible to torch: GPU cases will be skipped with this reason"))
    tc = toolchain.find()
    if tc.root is None:
        out.append(("fail", "tileiras", "; ".join(tc.problems)))
    else:
        level = "ok" if tc.ok else "fail"
        text = (f"tileiras {tc.version_str()} at {tc.bin_dir} (found via {tc.source}); ptxas "
                f"{'.'.join(map(str, tc.ptxas_version or ())) or 'missing'}; libnvvm {tc.libnvvm or 'missing'}")
        out.append((level, "tileiras", text))
        for p in tc.problems:
            out.append(("fail", "tileiras", p))
        if tc.tileiras_version and tc.tileiras_version[:2] != toolchain.PINNED_MINOR:
            out.append(("warn", "tileiras", f"the project pins {toolchain.PINNED_MINOR[0]}.{toolchain.PINNED_MINOR[1]}.*;"
                                            f" found {tc.version_str()}"))
        for a in toolchain.COMPILE_ARCHS:
            ok, why = tc.can_target(a)
            out.append(("ok" if ok else "fail", f"target {a}", why))
        if arch:
            ok, why = tc.can_target(arch)
            out.append(("ok" if ok else "fail", "this gpu", why))
    if conflict := toolchain.cuda_home_conflict():
        out.append(("warn", "CUDA_HOME", conflict))
    out.append(("ok", "cuda-tile", _pkg("cuda-tile")))
    out.append(("ok", "triton", _pkg("triton")))
    for b in backends.all_backends():
        ok, reason = b.is_available()
        out.append(("ok" if ok else "warn", f"backend {b.name}", reason))
    return out


def _driver_version() -> str:
    try:
        from cuda.bindings import driver

        err, v = driver.cuDriverGetVersion()
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return "?"


def run(args) -> int:
    console = Console()
    colors = {"ok": "green", "warn": "yellow", "fail": "red"}
    worst = "ok"
    for level, topic, text in findings():
        console.print(f"[{colors[level]}]{level:>4}[/] [bold]{topic}[/]: {text}", highlight=False)
        if level == "fail":
            worst = "fail"
    return 1 if (args.strict and worst == "fail") else 0


def register(sub):
    p = sub.add_parser("doctor", help="check toolchain, GPU and backends; explain mismatches")
    p.add_argument("--strict", action="store_true", help="exit 1 if anything failed")
    p.set_defaults(func=run)

"""`tilerosetta doctor`: what is on this machine, what will break, and how to fix it."""

from __future__ import annotations

import importlib.metadata as md
import platform

from tilerosetta.console import make_console

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
    out += native_build_env()
    out.append(("ok", "cuda-tile", _pkg("cuda-tile")))
    out.append(("ok", "triton", _pkg("triton")))
    for b in backends.all_backends():
        ok, reason = b.is_available()
        out.append(("ok" if ok else "warn", f"backend {b.name}", reason))
    return out


def native_build_env() -> list[tuple[str, str, str]]:
    """The Rust build's environment, read from tools/rust-env.sh itself (the one place that sets it up):
    cargo, and the libclang that bindgen will load."""
    script = toolchain.REPO_ROOT / "tools" / "rust-env.sh"
    if not script.exists():
        return []
    import shutil
    import subprocess

    cargo = shutil.which("cargo")
    out = [("ok" if cargo else "warn", "cargo",
            subprocess.run([cargo, "--version"], capture_output=True, text=True).stdout.strip() if cargo
            else "not found: the cutile_rs backend is skipped (needs Rust >= 1.89)")]
    probe = subprocess.run(["bash", "-c", f'source "{script}" >/dev/null 2>&1; '
                            'printf "%s\\n%s" "${LIBCLANG_PATH:-}" "${RUST_ENV_PROBLEM:-}"'],
                           capture_output=True, text=True)
    libclang, problem = (probe.stdout.split("\n", 1) + [""])[:2]
    if problem.strip():
        out.append(("fail", "rust build", problem.strip() + " (make setup installs what is missing)"))
    else:
        out.append(("ok", "libclang", f"{libclang}/libclang.so (bindgen, from the PyPI libclang wheel)"))
    return out


def _driver_version() -> str:
    try:
        from cuda.bindings import driver

        err, v = driver.cuDriverGetVersion()
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return "?"


def run(args) -> int:
    console = make_console()
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

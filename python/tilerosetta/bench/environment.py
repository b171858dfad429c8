"""What a results file records about where it was measured: GPU, driver, CUDA, toolchain, versions, commit."""

from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess

import torch

from tilerosetta import toolchain
from tilerosetta.bench.results import role_from_meta
from tilerosetta.toolchain import REPO_ROOT


def git_commit() -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit or "unknown", "dirty": dirty}


def driver_version() -> str:
    """The kernel driver's version (e.g. 580.82.07), from nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        return out.splitlines()[0] if out else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def gpu_info() -> dict:
    if not torch.cuda.is_available():
        return {"name": "no CUDA GPU (CPU only)", "arch": None}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"name": torch.cuda.get_device_name(), "arch": toolchain.device_arch(),
            "memory_gib": round(props.total_memory / 2**30, 1), "sms": props.multi_processor_count,
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "driver": driver_version(), "driver_cuda": _driver_cuda()}


def _driver_cuda() -> str:
    """The CUDA version the driver supports (e.g. 13.0)."""
    try:
        from cuda.bindings import driver

        err, v = driver.cuDriverGetVersion()
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return "?"


def toolchain_info() -> dict:
    tc = toolchain.find()
    return {"tileiras": tc.version_str() if tc.root else None,
            "ptxas": ".".join(map(str, tc.ptxas_version)) if tc.ptxas_version else None,
            "root": str(tc.root) if tc.root else None, "source": tc.source, "problems": tc.problems}


def packages() -> dict:
    out = {}
    for name in ("torch", "triton", "cuda-tile", "numpy", "matplotlib", "juliacall", "pybind11"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def backend_info(backends) -> dict:
    out = {}
    for b in backends:
        ok, reason = b.is_available()
        try:
            versions = b.versions() if ok else {}
        except Exception as exc:
            versions = {"error": f"{type(exc).__name__}: {exc}"}
        out[b.name] = {"language": b.language, "available": ok, "reason": reason, "versions": versions,
                       "device_type": b.device_type}
        if hasattr(b, "peer_label"):  # someone else's kernels shown beside ours (e.g. NVIDIA TileGym)
            out[b.name]["peer"] = b.peer_label()
        # ours / baseline / peer: reports compare ours with the best of torch and the peers
        role = getattr(b, "role", None)
        role = role() if callable(role) else role
        out[b.name]["role"] = role if role in ("ours", "baseline", "peer") else role_from_meta(b.name, out[b.name])
    return out


def collect(backends) -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(), "gpu": gpu_info(),
            "cuda_runtime": torch.version.cuda, "toolchain": toolchain_info(), "packages": packages(),
            "git": git_commit(), "backends": backend_info(backends)}

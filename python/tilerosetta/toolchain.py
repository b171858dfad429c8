"""Finding and activating the pinned CUDA tile toolchain (tileiras + its own ptxas + libnvvm).

Why this exists: tileiras, ptxas and libnvvm must be of one minor version. When CUDA_HOME points at an
older system toolkit (CUDA 13.0 is common on GPU nodes), tileiras 13.4 picks up that toolkit's parts and
fails with "failed to compile Tile IR program". So we locate the pinned 13.4 trio, put its bin/ first on
PATH, and remove CUDA_HOME/CUDA_PATH from the environment the compilers see.

The pinned trio is installed by `make setup` into .toolchain/nvidia/cu13 (pip --target, kept out of the
venv because torch pins other versions of the nvidia-* runtime packages).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PINNED_MINOR = (13, 4)
# Lowest tileiras release able to target each arch (Hopper support arrived in 13.3).
MIN_TILEIRAS_FOR_ARCH = {"sm_80": (13, 1), "sm_90": (13, 3), "sm_100": (13, 1), "sm_120": (13, 1)}
COMPILE_ARCHS = tuple(MIN_TILEIRAS_FOR_ARCH)


@dataclass
class Toolchain:
    root: Path | None  # folder holding bin/tileiras
    source: str  # how it was found
    tileiras_version: tuple[int, ...] | None = None
    ptxas_version: tuple[int, ...] | None = None
    libnvvm: Path | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.root is not None and not self.problems

    @property
    def bin_dir(self) -> Path | None:
        return self.root / "bin" if self.root else None

    def version_str(self) -> str:
        return ".".join(map(str, self.tileiras_version)) if self.tileiras_version else "?"

    def can_target(self, arch: str) -> tuple[bool, str]:
        if not self.ok:
            return False, "; ".join(self.problems) or "tileiras not found"
        need = MIN_TILEIRAS_FOR_ARCH.get(arch)
        if need is None:
            return False, f"no tile compiler target for {arch}"
        if self.tileiras_version[:2] < need:
            return False, (f"tileiras {self.version_str()} cannot target {arch}: needs >= "
                           f"{need[0]}.{need[1]}")
        return True, f"tileiras {self.version_str()} targets {arch}"


def _version_of(binary: Path) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30,
                             env=_clean_env(binary.parent)).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"V(\d+)\.(\d+)\.(\d+)", out) or re.search(r"release (\d+)\.(\d+)", out)
    return tuple(int(g) for g in m.groups()) if m else None


def _clean_env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def _candidates():
    if env := os.environ.get("TILEROSETTA_TOOLCHAIN"):
        yield Path(env), "TILEROSETTA_TOOLCHAIN"
    yield REPO_ROOT / ".toolchain" / "nvidia" / "cu13", "repo .toolchain (make setup)"
    try:
        import nvidia.cu13 as cu13  # the pip wheels' layout, if installed into this environment

        yield Path(list(cu13.__path__)[0]), "pip package nvidia-cuda-tileiras"
    except (ImportError, IndexError):
        pass
    if which := shutil.which("tileiras"):
        yield Path(which).resolve().parent.parent, "PATH"
    if home := os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        yield Path(home), "CUDA_HOME"


@lru_cache(maxsize=1)
def find() -> Toolchain:
    for root, source in _candidates():
        tileiras = root / "bin" / "tileiras"
        if not (tileiras.is_file() and os.access(tileiras, os.X_OK)):
            continue
        tc = Toolchain(root, source, _version_of(tileiras))
        ptxas = root / "bin" / "ptxas"
        tc.ptxas_version = _version_of(ptxas) if ptxas.is_file() else None
        nvvm = [p for p in (root / "lib" / "libnvvm.so.4", root / "nvvm" / "lib64" / "libnvvm.so.4") if p.exists()]
        tc.libnvvm = nvvm[0] if nvvm else None
        if tc.tileiras_version is None:
            tc.problems.append(f"{tileiras} does not run (--version failed)")
        elif tc.ptxas_version is None:
            tc.problems.append(f"no ptxas beside {tileiras}: tileiras would fall back to another toolkit's")
        elif tc.ptxas_version[:2] != tc.tileiras_version[:2]:
            tc.problems.append(f"ptxas {'.'.join(map(str, tc.ptxas_version))} does not match tileiras "
                               f"{tc.version_str()}: tileiras fails with 'failed to compile Tile IR program'")
        if tc.libnvvm is None:
            tc.problems.append(f"no libnvvm.so.4 under {root}: tileiras needs the libnvvm of its release")
        return tc
    return Toolchain(None, "not found", problems=[
        "tileiras not found: run `make setup` (installs the pinned 13.4 trio into .toolchain/), or set "
        "TILEROSETTA_TOOLCHAIN to a folder holding bin/tileiras, bin/ptxas and lib/libnvvm.so.4"])


_ACTIVATED: tuple[tuple, Toolchain] | None = None  # (the env it left, the trio) after the last activation


_ENV_KEYS = ("PATH", "CUDA_HOME", "CUDA_PATH", "TILEROSETTA_TOOLCHAIN")
# os.environ's encoded store (POSIX): four dict lookups instead of four encode + decode round trips, which
# cost more than the check on a launch path; any other platform reads os.environ itself.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_DATA_KEYS = tuple(os.environ.encodekey(k) for k in _ENV_KEYS) if hasattr(os.environ, "encodekey") else None


def _activation_env() -> tuple:
    if _ENV_DATA is not None and _ENV_DATA_KEYS is not None:
        return tuple(map(_ENV_DATA.get, _ENV_DATA_KEYS))  # map, not a genexpr: activate() runs per launch
    return tuple(map(os.environ.get, _ENV_KEYS))


def activate() -> Toolchain:
    """Make this process's compilers use the pinned trio: bin first on PATH, CUDA_HOME removed.
    Launch paths call it on every call (a JIT compile may happen inside a launch): while the environment
    is what the last activation left, it returns at once (the full check cost ~50 µs per call)."""
    global _ACTIVATED
    # find() is a cache hit unless someone cleared it (then it answers a new object and the check runs again):
    # cheaper than find.cache_info(), which builds a named tuple on every launch.
    if _ACTIVATED is not None and _ACTIVATED[0] == _activation_env() and find() is _ACTIVATED[1]:
        return _ACTIVATED[1]
    tc = find()
    if tc.root is None:
        return tc
    bin_dir = str(tc.bin_dir)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if not path or path[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir] + [p for p in path if p != bin_dir])
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if var in os.environ and Path(os.environ[var]).resolve() != tc.root.resolve():
            os.environ.setdefault(f"TILEROSETTA_ORIGINAL_{var}", os.environ[var])
            del os.environ[var]
    _ACTIVATED = (_activation_env(), tc)
    return tc


def cuda_home_conflict() -> str | None:
    """Describe the CUDA_HOME mismatch a user would hit, if any."""
    tc = find()
    home = os.environ.get("CUDA_HOME") or os.environ.get("TILEROSETTA_ORIGINAL_CUDA_HOME")
    if not home or tc.root is None:
        return None
    ptxas = Path(home) / "bin" / "ptxas"
    v = _version_of(ptxas) if ptxas.is_file() else None
    if v and tc.tileiras_version and v[:2] != tc.tileiras_version[:2]:
        return (f"CUDA_HOME={home} holds CUDA {v[0]}.{v[1]} but tileiras is {tc.version_str()}: with CUDA_HOME "
                f"set, tileiras would use that ptxas/libnvvm and fail ('failed to compile Tile IR program'). "
                f"TileRosetta removes CUDA_HOME for its compiler calls; do the same in your own shell.")
    return None


def device_arch() -> str | None:
    """sm_XY of the current CUDA device, or None without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    except Exception:
        return None


def binary_tool(name: str) -> Path | None:
    """A CUDA binary utility (cuobjdump, nvdisasm): beside the pinned tileiras if its trio has it, else the
    copy Triton ships in its wheel (the pinned trio carries no cuobjdump), else PATH, else CUDA_HOME/bin.
    None when none exists; the caller names what is missing."""
    import importlib.util

    places = []
    if (tc := find()).bin_dir is not None:
        places.append(tc.bin_dir)
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        places.append(Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin")
    for place in places:
        if (exe := place / name).is_file() and os.access(exe, os.X_OK):
            return exe
    if which := shutil.which(name):
        return Path(which)
    home = os.environ.get("CUDA_HOME") or os.environ.get("TILEROSETTA_ORIGINAL_CUDA_HOME")
    if home and (exe := Path(home) / "bin" / name).is_file():
        return exe
    return None

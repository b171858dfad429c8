"""Backend registry. Adapters are imported lazily, so one broken language never hides the others."""

from __future__ import annotations

import importlib

from tilerosetta.backends.base import Backend, BoundOp, UnavailableBackend

# name -> (module, class, language). The order is the order of every listing and report: the torch
# baseline, our backends, then the peers (someone else's kernels).
REGISTRY: dict[str, tuple[str, str, str]] = {
    "torch": ("tilerosetta.backends.torch_ref", "TorchBackend", "PyTorch (cuBLAS/cuDNN baseline)"),
    "cutile_py": ("tilerosetta.backends.cutile_py", "CuTilePyBackend", "cuTile Python"),
    "triton": ("tilerosetta.backends.triton_lang", "TritonBackend", "Triton"),
    "tile_cpp": ("tilerosetta.backends.tile_cpp", "TileCppBackend", "CUDA Tile C++ (pybind11)"),
    "cutile_rs": ("tilerosetta.backends.cutile_rs", "CuTileRsBackend", "cuTile-rs (PyO3)"),
    "cutile_jl": ("tilerosetta.backends.cutile_jl", "CuTileJlBackend", "cuTile.jl (juliacall)"),
    "cute_dsl": ("tilerosetta.backends.cute_dsl", "CuteDslBackend", "CuTe DSL (nvidia-cutlass-dsl)"),
    # A peer, not one of ours: NVIDIA's own cuTile kernels, optional (included only where tilegym imports).
    "tilegym": ("tilerosetta.backends.tilegym_peer", "TileGymPeer", "NVIDIA TileGym (peer)"),
    # More peers, each optional, each timed as its users call it (returning form): never one of ours.
    "torch_compile": ("tilerosetta.backends.torch_compile_peer", "TorchCompilePeer", "torch.compile (peer)"),
    "liger": ("tilerosetta.backends.liger_peer", "LigerPeer", "Liger-Kernel (peer)"),
    "quack": ("tilerosetta.backends.quack_peer", "QuackPeer", "Quack (peer)"),
    "fa4": ("tilerosetta.backends.attention_peers", "Fa4Peer", "FlashAttention 4 (peer)"),
    "sdpa_cudnn": ("tilerosetta.backends.attention_peers", "SdpaCudnnPeer", "torch SDPA cuDNN (peer)"),
    "sdpa_flash": ("tilerosetta.backends.attention_peers", "SdpaFlashPeer", "torch SDPA flash (peer)"),
}
BACKEND_NAMES = tuple(REGISTRY)
_CACHE: dict[str, Backend] = {}


def get(name: str) -> Backend:
    """The adapter for a backend name; an adapter that fails to import is returned as unavailable."""
    if name in _CACHE:
        return _CACHE[name]
    try:
        module, cls, language = REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown backend '{name}': expected one of {list(REGISTRY)}") from None
    try:
        backend = getattr(importlib.import_module(module), cls)()
    except Exception as exc:
        backend = UnavailableBackend(name, language, f"adapter failed to import: {type(exc).__name__}: {exc}")
    _CACHE[name] = backend
    return backend


def all_backends() -> list[Backend]:
    return [get(n) for n in REGISTRY]


__all__ = ["Backend", "BoundOp", "REGISTRY", "BACKEND_NAMES", "get", "all_backends"]

"""The `tilegym` peer: NVIDIA TileGym's own cuTile kernels for the ops it has, timed beside ours.

TileGym (pip package `tilegym`, github.com/NVIDIA/TileGym) is NVIDIA's library of cuTile Python kernels.
It is optional: when it imports and a GPU is present the benchmark includes it as a *peer* (marked so
in the report), never as a TileRosetta implementation, and nothing requires it (CI does not install it).

How an op is called
  * Through TileGym's public dispatched ops (`tilegym.ops.softmax`, ...) with `backend="cutile"` on
    every call, after `tilegym.set_backend("cutile")`. An op is offered only when TileGym's registry
    holds a real "cutile" implementation for it (`has_backend_impl`), so the dispatcher can never fall
    back to Triton or PyTorch behind our back; otherwise the op is listed missing with that reason.
  * As TileGym's users call it: where its API takes an output (transpose, silu_and_mul) it writes into
    our `out` (destination form). Elsewhere it allocates its own result and the benchmark times exactly
    that, y = tilegym.ops.softmax(x) (returning form, `returning()`): no copy into our buffer is timed.
    The conformance suite calls a wrapper that copies the result into `out` (never timed). rope is
    in-place in TileGym: we copy q into `out` and rotate `out` there (that copy is timed and footnoted).
  * TileGym autotunes on the first call of each shape (cuda.tile.tune.exhaustive_search, which
    synchronises); later calls, and the CUDA-graph capture of the benchmark, reuse its cached choice.

Semantic checks against our specs (TileGym 1.5.1 source, ops/cutile/*.py):
  vector_add    missing: TileGym has no element-wise add.
  transpose     transpose(inp, out=out): (M, N) -> (N, M), writes out.
  softmax       softmax(x): row softmax over the last dim of (M, N), fp32 math, approximate exp/div.
  rms_norm      rms_norm(x, None, w, eps, offset=0.0): x * rsqrt(mean(x^2) + eps) * (0 + w) in fp32;
                offset 0 is the Llama convention our spec uses (Gemma's is 1 + w).
  layer_norm    layer_norm(x, 1, 2, w, b, eps): normalises dims [1, 2) of (M, N) = each row, biased
                variance, y = (x - mean) * rstd * (w + 0) + b.
  silu_and_mul  silu_and_mul(x, out=out): silu(x[:, :H]) * x[:, H:].
  rope          apply_rope_base(q, k, cos[None], sin[None]): rotate-half (Llama/HF), in place on q and k.
                Caveat: the kernel reads only cos[:, :D/2] and sin[:, :D/2], i.e. it assumes the Llama
                layout cos = cat(f, f) that our spec's inputs have; and it tiles D/2 as a power of two, so
                other head dims are refused. k is a one-head scratch tensor (1/H extra work).
  matmul        matmul(a, b): (M, K) @ (K, N), fp32 accumulate, fp32 inputs as tf32.
  bmm           bmm(a, b): (Bt, M, K) @ (Bt, K, N).
  attention     fmha(q, k, v, scaling=scale or 1/sqrt(D), is_causal=causal): top-left causal mask for
                equal lengths (query i sees keys j <= i). A negative scale is refused: TileGym scales
                after the row max and after adding -inf for the causal mask, valid only for scale >= 0.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import math
import os
import warnings
from typing import Any, Callable

import torch

from tilerosetta import toolchain
from tilerosetta.backends.base import Backend, destination_from_returning
from tilerosetta.errors import TileRosettaError
from tilerosetta.specs import OP_NAMES, get_spec

NAME = "tilegym"
TESTED_VERSION = "1.5.1"  # the version this mapping was written against (tools/gpu-bundle.sh carries it)

# our op -> (TileGym registry/op name, how the output reaches our `out`)
#   direct: TileGym writes into `out`; returns: TileGym allocates and returns its result (timed as such);
#   inplace: we copy q into `out` and TileGym rotates it in place.
OP_MAP: dict[str, tuple[str, str]] = {
    "transpose": ("transpose", "direct"),
    "softmax": ("softmax", "returns"),
    "rms_norm": ("rms_norm", "returns"),
    "layer_norm": ("layer_norm", "returns"),
    "silu_and_mul": ("silu_and_mul", "direct"),
    "rope": ("apply_rope_base", "inplace"),
    "matmul": ("matmul", "returns"),
    "bmm": ("bmm", "returns"),
    "attention": ("fmha", "returns"),
}
NOT_IN_TILEGYM = {"vector_add": "TileGym has no element-wise add op (nothing to compare with)",
                  "add_rms_norm": "not bound: we found no fused residual-add + RMSNorm op in TileGym 1.5.1's "
                                  "dispatcher (its unfused rms_norm is bound as rms_norm)"}
OUT_NOTES = {
    "direct": "TileGym writes into out",
    "returns": "TileGym allocates and returns its result; timed as returned (no copy)",
    "inplace": "TileGym's rope is in place; the timed call includes out.copy_(q) and a 1-head scratch k",
}


def _version(mod) -> str:
    """The imported module's own __version__ (the package metadata may belong to another copy on the path)."""
    version = getattr(mod, "__version__", None)
    if version:
        return str(version)
    try:
        return md.version("tilegym")
    except md.PackageNotFoundError:
        return "?"


def _import_tilegym():
    """Import tilegym without letting the import change anything for the other backends.

    TileGym's __init__ wraps cuda.tile.launch in a function that prints a one-time notice for its
    experimental kernels; we put the original back so that cutile_py's launches stay exactly as they were.
    Its import warnings and log lines (no transformers, Triton without a driver) are not ours to print:
    TileGym's log level defaults to ERROR here unless TILEGYM_LOG_LEVEL is set.
    """
    os.environ.setdefault("TILEGYM_LOG_LEVEL", "ERROR")
    try:
        import cuda.tile as ct
        launch = ct.launch
    except Exception:
        ct = launch = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module("tilegym")
    finally:
        if ct is not None and ct.launch is not launch:
            ct.launch = launch


class TileGymPeer(Backend):
    name = NAME
    language = "NVIDIA TileGym (cuTile Python, peer)"
    device_type = "cuda"
    peer = "NVIDIA TileGym"  # marks a peer: someone else's kernels, shown beside ours in reports

    def __init__(self):
        self._mod = None
        self._import_error: str | None = None
        self._resolved: tuple[dict[str, Callable], dict[str, str]] | None = None

    # ---- loading -----------------------------------------------------------------------------------
    def _tilegym(self):
        """The tilegym module, or None with self._import_error saying why."""
        if self._mod is None and self._import_error is None:
            try:
                self._mod = _import_tilegym()
            except Exception as exc:
                self._import_error = (f"tilegym is not importable ({type(exc).__name__}: {exc}); it is optional: "
                                      f"pip install --no-deps tilegym=={TESTED_VERSION} (or the GPU bundle)")
        return self._mod

    def _cutile_problem(self, tg) -> str | None:
        """Why TileGym's cuTile backend cannot serve ops, or None."""
        if not tg.is_backend_available("cutile"):
            return (f"tilegym {_version(tg)} imported, but its 'cutile' backend is not available "
                    f"(cuda.tile / cuda.tile.tune failed to import in tilegym.backend.selector, or "
                    f"TILEGYM_DISABLE_CUTILE=1); available there: {sorted(tg.get_available_backends())}")
        if getattr(tg.ops, "cutile", None) is None:
            try:  # tilegym.ops swallowed the error: import again to say what it was
                importlib.import_module("tilegym.ops.cutile")
            except Exception as exc:
                return f"tilegym.ops.cutile failed to import: {type(exc).__name__}: {exc}"
        return None

    def peer_label(self) -> str:
        tg = self._tilegym()
        return f"{self.peer} {_version(tg)}" if tg is not None else f"{self.peer} (not installed)"

    # ---- availability ------------------------------------------------------------------------------
    def available(self):
        tg = self._tilegym()
        if tg is None:
            return False, self._import_error
        version = _version(tg)
        problem = self._cutile_problem(tg)
        if problem:
            return False, problem
        if not torch.cuda.is_available():
            return False, f"tilegym {version} imported, but no CUDA GPU is visible to torch"
        tc = toolchain.activate()  # TileGym's kernels JIT-compile through the same tileiras as cutile_py
        if not tc.ok:
            return False, f"tilegym {version} found, but tileiras is not usable: {'; '.join(tc.problems)}"
        arch = toolchain.device_arch()
        ok, why = tc.can_target(arch)
        if not ok:
            return False, why
        tg.set_backend("cutile")  # so nothing we call can silently run TileGym's Triton kernels
        note = "" if version == TESTED_VERSION else f" (adapter written for {TESTED_VERSION})"
        return True, (f"peer: NVIDIA TileGym {version}{note}, cuTile backend; tileiras {tc.version_str()}, "
                      f"{torch.cuda.get_device_name()} {arch}")

    # ---- ops ---------------------------------------------------------------------------------------
    def _resolve(self) -> tuple[dict[str, Callable], dict[str, str]]:
        """(our op -> TileGym's dispatched op, our op -> why missing), worked out once."""
        if self._resolved is None:
            self._resolved = self._resolve_now()
        return self._resolved

    def _resolve_now(self) -> tuple[dict[str, Callable], dict[str, str]]:
        missing = dict(NOT_IN_TILEGYM)
        tg = self._tilegym()
        if tg is None:
            return {}, {op: self._import_error for op in OP_NAMES}
        problem = self._cutile_problem(tg)
        if problem:
            return {}, {op: problem for op in OP_NAMES}
        from tilegym.backend import has_backend_impl

        found = {}
        for op, (tg_name, _) in OP_MAP.items():
            fn = getattr(tg.ops, tg_name, None)
            if fn is None:
                missing[op] = f"tilegym {_version(tg)} has no op '{tg_name}'"
            elif not has_backend_impl(tg_name, "cutile"):
                others = [b for b in tg.get_available_backends_for_op(tg_name) if b != "default"]
                missing[op] = (f"tilegym {_version(tg)} has no cuTile kernel for '{tg_name}' (only {others or 'none'}); "
                               f"not timed rather than let its dispatcher fall back")
            else:
                found[op] = fn
        return found, missing

    def implementations(self):
        """Destination form of every op; a returning op is wrapped with a copy (conformance only)."""
        found, _ = self._resolve()
        impls = {}
        for op, fn in found.items():
            bound = _BINDERS[op](fn)
            impls[op] = destination_from_returning(op, bound) if OP_MAP[op][1] == "returns" else bound
        return impls

    def returning(self):
        """The ops TileGym's users call as y = op(x, ...): timed as such, without a copy into our `out`."""
        found, _ = self._resolve()
        return {op: _BINDERS[op](fn) for op, fn in found.items() if OP_MAP[op][1] == "returns"}

    def missing(self):
        _, missing = self._resolve()
        return {op: why for op, why in missing.items() if op in OP_NAMES}

    def unsupported_case(self, op, dims, params):
        if op == "attention" and not _self_attention(dims["H"], dims.get("Hkv", dims["H"]), dims["S"],
                                                     dims.get("Sk", dims["S"])):
            return SELF_ATTENTION_ONLY
        return None

    # ---- configuration: TileGym picks its own (autotuned) tile sizes; nothing for a sweep to set ----------
    def config_space(self, op, dtype):
        get_spec(op)
        return []

    def builtin_config(self, op, dtype, dims):
        """Not tile sizes: what the benchmark's config column should say about how the call was made."""
        get_spec(op)
        if op not in OP_MAP:
            return {}
        tg_name, out_mode = OP_MAP[op]
        return {"tilegym_op": tg_name, "out": out_mode, "tiles": "TileGym autotune"}

    def out_note(self, op: str) -> str | None:
        """A note for results of this op whose timing includes more than TileGym's kernel."""
        mode = OP_MAP.get(op, (None, "direct"))[1]
        note = OUT_NOTES[mode] if mode == "inplace" else None
        if op == "rope":
            note += "; TileGym reads cos/sin[:, :D/2] only (Llama layout cos = cat(f, f))"
        return note

    def versions(self):
        v = {"torch": torch.__version__}
        tg = self._tilegym()
        if tg is not None:
            v["tilegym"] = _version(tg)
        try:
            v["cuda_tile"] = md.version("cuda-tile")
        except md.PackageNotFoundError:
            pass
        tc = toolchain.find()
        if tc.tileiras_version:
            v["tileiras"] = tc.version_str()
        return v


# ---- one binder per op around TileGym's call: fn(*inputs, *outputs, **params) for direct/inplace ops,
# fn(*inputs, **params) -> result for the ops TileGym returns ------------------------------------------
# Every call passes backend="cutile", which TileGym's dispatcher pops and honours.
CUTILE = {"backend": "cutile"}


def _transpose(tg_op):
    def transpose(x, out):
        tg_op(x, out=out, **CUTILE)
    return transpose


def _softmax(tg_op):
    def softmax(x):
        return tg_op(x, **CUTILE)
    return softmax


def _rms_norm(tg_op):
    def rms_norm(x, w, eps):
        # (input, normalized_shape (unused), weight, eps); offset=0.0 is y = norm(x) * w (Llama)
        return tg_op(x, None, w, eps, offset=0.0, **CUTILE)
    return rms_norm


def _layer_norm(tg_op):
    def layer_norm(x, w, b, eps):
        # normalise dims [1, 2) of (M, N): every row over its N columns
        return tg_op(x, 1, 2, w, b, eps, **CUTILE)
    return layer_norm


def _silu_and_mul(tg_op):
    def silu_and_mul(x, out):
        tg_op(x, out=out, **CUTILE)
    return silu_and_mul


def _rope(tg_op):
    def rope(q, cos, sin, out):
        B, H, S, D = q.shape
        half = D // 2
        if half & (half - 1):
            raise TileRosettaError("rope", NAME, "q", f"head dim D={D}: TileGym's rope kernel tiles D/2 as a "
                                                      f"power of two, so D/2={half} would be rotated wrong")
        out.copy_(q)  # TileGym rotates q (and k) in place
        # TileGym rotates a k tensor alongside q; a one-head scratch keeps the extra work at 1/H of q's.
        k = torch.empty((B, 1, S, D), dtype=q.dtype, device=q.device)
        tg_op(out, k, cos.unsqueeze(0), sin.unsqueeze(0), **CUTILE)
    return rope


def _matmul(tg_op):
    def matmul(a, b):
        return tg_op(a, b, **CUTILE)
    return matmul


def _bmm(tg_op):
    def bmm(a, b):
        return tg_op(a, b, **CUTILE)
    return bmm


# Grouped heads and a longer key cache: TileGym's own conventions for them (which heads share, where a causal
# mask is aligned) are not checked by this binding.
SELF_ATTENTION_ONLY = "bound for H == Hkv, S == Sk only (self-attention; no GQA or KV cache in this binding)"


def _self_attention(h: int, hkv: int, s: int, sk: int) -> bool:
    return h == hkv and s == sk


def _attention(tg_op):
    def attention(q, k, v, causal, scale):
        if scale is not None and scale < 0:
            raise TileRosettaError("attention", NAME, "scale", f"{scale} < 0: TileGym applies the scale after the "
                                                               f"row max and the causal -inf mask (needs scale >= 0)")
        if not _self_attention(q.shape[1], k.shape[1], q.shape[2], k.shape[2]):
            raise TileRosettaError("attention", NAME, "k", f"k {tuple(k.shape)} differs from q {tuple(q.shape)} in "
                                                           f"heads or length: {SELF_ATTENTION_ONLY}")
        scaling = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        return tg_op(q, k, v, scaling=scaling, is_causal=bool(causal), **CUTILE)
    return attention


_BINDERS: dict[str, Callable[[Callable], Callable[..., Any]]] = {
    "transpose": _transpose, "softmax": _softmax, "rms_norm": _rms_norm, "layer_norm": _layer_norm,
    "silu_and_mul": _silu_and_mul, "rope": _rope, "matmul": _matmul, "bmm": _bmm, "attention": _attention,
}

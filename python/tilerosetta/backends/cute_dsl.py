"""The `cute_dsl` backend: our kernels in CuTe DSL (nvidia-cutlass-dsl 4.8.1, the CUTLASS Python DSL),
python/tilerosetta/kernels/cute_dsl/, one module per op.

Compilation is ahead of time per specialization: a kernel module's `build(dtype, variant, cfg)` gives the
@cute.jit function with fake tensors whose extents are symbolic, so one `cute.compile` (for the device's
arch, e.g. sm_90a) serves every shape of that dtype / variant / config. The first call of a specialization
compiles it (its wall time is recorded: `record_extras` -> compile_ms, like torch_compile's), later calls
go straight to the compiled function through TVM-FFI, which takes the torch tensors as they are and
launches on torch's current stream. The variant is chosen per call from the extents, dtype and the pointers'
alignment (kernels/cute_dsl/__init__.py, variant_of): "vec" (128-bit accesses) or "scalar" for the
memory-bound ops, "wgmma" (TMA + warpgroup MMA, fp16/bf16 with 16-byte row strides) or "simt" (everything
else) for matmul / bmm, "wgmma_d64" / "wgmma_d128" (TMA + wgmma) or "d64" / "d128" (SIMT) for attention,
the head dim compiled in; attention's config knob WGMMA (1 by default) can send a call to the SIMT kernel,
and TILEROSETTA_CUTE_DSL_ATTENTION=simt / =simple take every call to the SIMT kernel / the wgmma kernel's
simple form (PIPE=0, PACK=0): GPU diagnosis switches that need no code change. An attention call whose
CTAs cannot fill the SMs (decode at small batch) compiles the wgmma kernel's split-KV form (SPLIT=1) and is
launched with its attention_plan.Split, which sizes the fp32 partials allocated per call on torch's current
stream (kernels/cute_dsl/attention_plan.py; config SPLIT_MIN_BLOCKS=0 turns it off).

The runtime is optional and large (~260 MB unpacked): CI does not install it, and the backend is then
unavailable with that reason. Where it imports but no GPU is visible, the kernels still compile
(shared_tests/test_cute_dsl_compile.py compiles every one for sm_90a on the CPU) and the state is "built".
On the H200 it comes from the peers' bundle (tools/peers-bundle.sh, tools/gpu-peers-stage.sh).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import threading
import time

import torch

from tilerosetta.backends.base import _NO_PLAN, H200_SM_COUNT, Backend, sm_count
from tilerosetta.backends.base import current_device_index as _current_device
from tilerosetta.kernels.cute_dsl import FORCE_ATTENTION_ENV, KERNEL_MODULES, MISSING, kernel_module, variant_of
from tilerosetta.kernels.cute_dsl import attention_plan
from tilerosetta.kernels.cute_dsl import config as cfgmod
from tilerosetta.specs import OP_NAMES, dtype_name, get_spec

INSTALL_HINT = ("pip install nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 apache-tvm-ffi; "
                "on the GPU node: tools/peers-bundle.sh + tools/gpu-peers-stage.sh put it on PYTHONPATH")
MIN_MAJOR = 9  # the kernels are compiled and checked for Hopper (sm_90a) and later


def runtime_problem() -> str | None:
    """Why the CuTe DSL runtime cannot be imported here, or None."""
    for module in ("cutlass.cute", "tvm_ffi"):
        try:
            __import__(module)
        except Exception as exc:
            return f"{module} not importable ({type(exc).__name__}: {str(exc)[:200]}): {INSTALL_HINT}"
    return None


def target_arch(major: int, minor: int) -> str:
    """The compile target of a device: from Hopper on the arch-specific variant (sm_90a), which TMA/wgmma need."""
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def attention_schedule(variant: str, dims: dict, cfg: dict,
                       sms: int = H200_SM_COUNT) -> tuple[dict, attention_plan.Split | None]:
    """(compiled config, split) of an attention call. The SIMT kernel has no knobs: {} whatever the config
    says, never split. The wgmma kernel: its simple form (PIPE=0: the simple loop, PACK=0: one query head per
    CTA, WS=0: warp 0 also produces) whatever the config says when TILEROSETTA_CUTE_DSL_ATTENTION=simple; then SPLIT=1 and split = the
    attention_plan.Split when the plan splits the keys (too few CTAs for `sms` SMs), else split = None and
    the config as it was, so an unsplit call compiles exactly the kernel it did before split-KV existed.
    SPLIT_MIN_BLOCKS is host-side (it sizes the chunks): it is not compiled in."""
    if not variant.startswith("wgmma"):
        return {}, None
    if os.environ.get(FORCE_ATTENTION_ENV) == "simple":
        cfg = {**cfg, "PIPE": 0, "PACK": 0, "WS": 0}
    split = attention_plan.split_of(dims, cfg, sms)
    # WS shapes only the unsplit kernel: a split call compiles the same kernel whatever it says, under one key
    compiled = {k: v for k, v in cfg.items() if k != "SPLIT_MIN_BLOCKS" and not (split and k == "WS")}
    return ({**compiled, "SPLIT": 1} if split else compiled), split


def specialization(op: str, dtype: torch.dtype, variant: str, dims: dict, cfg: dict,
                   sms: int = H200_SM_COUNT) -> dict:
    """The config a call compiles with: the tile config plus, for a row op, how many vectors of its row each
    thread keeps in registers (config.resident_chunks; a compile-time constant derived from N, not a knob).
    Attention: attention_schedule's (SIMT: {}; wgmma: the simple-form override and the split-KV form)."""
    if op == "attention":
        return attention_schedule(variant, dims, cfg, sms)[0]
    if op not in cfgmod.ROW_OPS:
        return dict(cfg)
    vec = 16 // torch.empty((), dtype=dtype).element_size() if variant == "vec" else 1
    return {**cfg, "CHUNKS": cfgmod.resident_chunks(op, dims, cfg, vec)}


def _compact(t: torch.Tensor) -> torch.Tensor:
    """t with row-major strides, as compiled: a contiguous tensor may carry any stride on an extent-1 dim
    (e.g. a (1, N) transpose of (N, 1)), which TVM-FFI would refuse as a layout mismatch."""
    if 1 not in t.shape:
        return t
    strides, step = [], 1
    for extent in reversed(t.shape):
        strides.append(step)
        step *= extent
    strides.reverse()
    return t if t.stride() == tuple(strides) else t.as_strided(t.shape, strides)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


_COMPILE_LOCK = threading.Lock()  # see CuteDslBackend.compiled


class CuteDslBackend(Backend):
    name = "cute_dsl"
    config_tables = cfgmod  # default table, sweep space and rules (Backend delegates to them)
    language = "CuTe DSL"
    device_type = "cuda"

    def __init__(self):
        self._compiled: dict[tuple, object] = {}  # (op, dtype, variant, config items, arch) -> compiled fn
        self._compile_ms: dict[tuple, float] = {}  # (op, dtype, variant, config items, arch) -> ms
        self._impls: dict | None = None

    # ---- availability ----------------------------------------------------------------------------
    def available(self):
        problem = runtime_problem()
        if problem:
            return False, problem
        if not torch.cuda.is_available():
            return False, f"nvidia-cutlass-dsl {_version('nvidia-cutlass-dsl') or '?'} found, but no CUDA GPU visible to torch"
        major, minor = torch.cuda.get_device_capability()
        if major < MIN_MAJOR:
            return False, f"{torch.cuda.get_device_name()} is sm_{major}{minor}; these kernels need sm_90 or later"
        return True, (f"nvidia-cutlass-dsl {_version('nvidia-cutlass-dsl') or '?'}, {torch.cuda.get_device_name()} "
                      f"(compiles for {target_arch(major, minor)})")

    def state_when_unavailable(self):
        """Its kernels compile here (CuTe DSL needs no GPU to compile) when the runtime imports."""
        return "built" if runtime_problem() is None else "unavailable"

    def limits(self, op):
        base = super().limits(op)
        if op == "attention":
            return (f"{base}; the wgmma kernel (TMA loads) when q, k, v, out start 16-byte aligned, else the SIMT "
                    f"kernel (config WGMMA=0 or {FORCE_ATTENTION_ENV}=simt: always SIMT)")
        if op in ("matmul", "bmm"):
            return (f"{base}; the wgmma kernel for fp16/bf16 with 16-byte aligned bases and rows, else the SIMT GEMM "
                    f"(both on one flat grid x: no tile count is capped at 65535)")
        return base

    # ---- ops ---------------------------------------------------------------------------------------
    def implementations(self):
        # one callable per op for the backend's life, so backend.op() keeps its validated BoundOp
        if self._impls is None:
            self._impls = {op: self._bind(op) for op in OP_NAMES if op in KERNEL_MODULES}
        return dict(self._impls)

    def missing(self):
        have = self.implementations()
        return {op: MISSING.get(op, "not implemented in this backend yet") for op in OP_NAMES if op not in have}

    def compiled(self, op: str, dtype: torch.dtype, variant: str, cfg: dict, arch: str):
        """The compiled function of one specialization, compiled on first use (and its time recorded)."""
        key = (op, dtype, variant, tuple(sorted(cfg.items())), arch)
        fn = self._compiled.get(key)
        if fn is None:
            # One compilation at a time: the DSL's MLIR compiler is not thread-safe (first calls from
            # several threads killed the process on the H200); launches of compiled functions stay parallel.
            with _COMPILE_LOCK:
                fn = self._compiled.get(key)
                if fn is None:
                    jit_fn, args = kernel_module(op).build(dtype, variant, cfg)
                    t0 = time.perf_counter()
                    fn = self._compile(jit_fn, args, arch)
                    self._compile_ms[key] = (time.perf_counter() - t0) * 1e3
                    self._compiled[key] = fn
        return fn

    def _bind(self, op):
        spec = get_spec(op)
        n_tensors = len(spec.inputs) + len(spec.outputs)

        def plan(tensors):
            """(launch, compiled, extra keywords, which tensors need _compact, device index) of a call."""
            dtype = tensors[0].dtype
            dims = spec.dims_of(tensors[:n_tensors])
            tile_cfg = self.config_for(op, dtype, dims)
            variant = variant_of(op, tensors[:n_tensors], tile_cfg)
            extra = {}
            if op == "attention":  # the split-KV plan rides with the call: launch sizes the workspaces with it
                cfg, split = attention_schedule(variant, dims, tile_cfg, sm_count(device=tensors[0].device))
                extra = {"split": split} if split else {}
            else:
                cfg = specialization(op, dtype, variant, dims, tile_cfg)
            compiled = self.compiled(op, dtype, variant, cfg, self._arch_of(tensors[0].device))
            return (kernel_module(op).launch, compiled, extra, tuple(_compact(t) is not t for t in tensors),
                    tensors[0].get_device())

        def fn(*tensors, **params):
            # Planned once per call signature (issue 14 item 7), 16-byte alignment included: variant_of picks
            # the vectorised / TMA kernels by it.
            memo, key, p = self.signature_memo("cute-plan", op, tensors, params, aligned=True)
            if p is _NO_PLAN:
                p = plan(tensors)
                if memo is not None and all(t.is_cuda for t in tensors):
                    self.keep(key, p)
            launch, compiled, extra, compact, dev = p
            args = [_compact(t) if c else t for t, c in zip(tensors, compact)] if True in compact else tensors
            if dev < 0 or _current_device() == dev:  # off CUDA (CPU tests with stand-ins): no device to switch to
                launch(compiled, *args, **params, **extra)
            else:
                with torch.cuda.device(dev):  # TVM-FFI launches on the current device's current stream
                    launch(compiled, *args, **params, **extra)

        fn.__name__ = op
        return fn

    @staticmethod
    def _compile(jit_fn, args, arch):
        from tilerosetta.kernels.cute_dsl import common  # imports cutlass: only once something compiles

        return common.compile_for(jit_fn, args, arch)

    @staticmethod
    def _arch_of(device) -> str:
        return target_arch(*torch.cuda.get_device_capability(device))

    def record_extras(self, op, dtype, dims):
        """compile_ms of the newest specialization of op/dtype compiled in this process."""
        hits = [ms for (o, d, *_), ms in self._compile_ms.items() if o == op and d == dtype]
        return {"compile_ms": hits[-1]} if hits else {}

    def versions(self):
        v = {"torch": torch.__version__}
        for dist in ("nvidia-cutlass-dsl", "apache-tvm-ffi"):
            if _version(dist):
                v[dist] = _version(dist)
        return v

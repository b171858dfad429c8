"""The `cutile_py` backend: the ten ops as cuTile Python kernels (python/tilerosetta/kernels/cutile/).

cuda.tile JIT-compiles a kernel on its first launch for each new signature (dtypes, constants such as
tile sizes) by calling tileiras, then launches the cubin on torch's current CUDA stream. tileiras must
be the pinned 13.4 trio, so toolchain.activate() runs before anything can compile: it puts the pinned
bin/ first on PATH (cuda.tile looks for the pip package nvidia-cuda-tileiras, then PATH, then CUDA_HOME)
and removes a CUDA_HOME that would drag in an older ptxas/libnvvm.

Without a GPU the backend is unavailable (there is no cuTile interpreter); the kernels are still
compiled for sm_80/90/100/120 on the CPU by shared_tests/test_cutile_py_compile.py.
"""

from __future__ import annotations

import importlib.metadata as md
import torch

from tilerosetta import toolchain
from tilerosetta.backends.base import Backend, current_stream
from tilerosetta.kernels.cutile import config as cfgmod
from tilerosetta.kernels.cutile import prepare_fn
from tilerosetta.specs import OP_NAMES, dtype_name, get_spec


def _cuda_tile_version() -> str | None:
    try:
        import cuda.tile as ct  # noqa: F401
    except Exception:
        return None
    try:
        return md.version("cuda-tile")
    except md.PackageNotFoundError:
        return getattr(ct, "__version__", "?")


class CuTilePyBackend(Backend):
    name = "cutile_py"
    config_tables = cfgmod  # default table, sweep space and rules (Backend delegates to them)
    language = "cuTile Python"
    device_type = "cuda"

    # ---- availability ----------------------------------------------------------------------------
    def available(self):
        try:
            import cuda.tile  # noqa: F401
        except Exception as exc:
            return False, f"cuda.tile not importable ({type(exc).__name__}: {exc}): pip install cuda-tile"
        version = _cuda_tile_version()
        tc = toolchain.activate()
        if not tc.ok:
            return False, f"cuda.tile {version} found, but tileiras is not usable: {'; '.join(tc.problems)}"
        if not torch.cuda.is_available():
            return False, "no CUDA GPU visible to torch"
        arch = toolchain.device_arch()
        ok, why = tc.can_target(arch)
        if not ok:
            return False, why
        return True, (f"cuda.tile {version}, tileiras {tc.version_str()} ({tc.source}), "
                      f"{torch.cuda.get_device_name()} {arch}")

    def state_when_unavailable(self):
        """Its kernels compile here (tileiras needs no GPU) even when none can run."""
        try:
            import cuda.tile  # noqa: F401
        except Exception:
            return "not built"
        return "built" if toolchain.find().ok else "not built"

    # ---- ops ---------------------------------------------------------------------------------------
    def implementations(self):
        return {op: self._bind(op) for op in OP_NAMES}

    def _bind(self, op):
        spec = get_spec(op)
        n_tensors = len(spec.inputs) + len(spec.outputs)
        bound = {}  # cuda.tile's launch and the op's planner, looked up on the first call (they import cuda.tile)

        def fn(*tensors, **params):
            if not bound:
                import cuda.tile as ct

                bound.update(launch=ct.launch, prepare=prepare_fn(op))
            toolchain.activate()  # idempotent; a JIT compile may happen inside ct.launch

            def prepare():
                cfg = self.config_for(op, tensors[0].dtype, spec.dims_of(tensors[:n_tensors]))
                return bound["prepare"](*tensors, cfg, **params)

            plan = self.launch_plan(op, tensors, params, prepare)  # planned once per call signature
            stream = current_stream(tensors[0])  # torch's current stream on the tensors' device (cached object)
            launch = bound["launch"]
            for lx, args in plan:
                launch(stream, lx.grid, lx.kernel, tuple(args))

        fn.__name__ = op
        return fn

    def versions(self):
        v = {"torch": torch.__version__}
        if (ctv := _cuda_tile_version()) is not None:
            v["cuda_tile"] = ctv
        tc = toolchain.find()
        if tc.tileiras_version:
            v["tileiras"] = tc.version_str()
        return v


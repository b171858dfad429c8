"""`tilerosetta inspect --backend B --op OP`: what the compiler made of one kernel, from its cubin.

Per kernel function: threads per block, registers (and the compiler's cap), spills (local memory and
STL/LDL), shared memory, resident blocks per SM with the limiting resource, and the SASS instruction mix
(top opcodes). The kernel is the one a call at the op's benchmark size would launch, with the backend's
default configuration (or --config on top). Nothing runs on a GPU:

- cutile_py: compiled here by the pinned tileiras (the launch's signature as a real tensor's JIT derives it);
- tile_cpp: the cubin embedded in the built module (`make build-python`), for the default config's symbol;
- triton: compiled here by Triton for the target (its own ptxas), with the launcher's signature.
- cute_dsl: compiled here by CuTe DSL for the target (sm_90 -> sm_90a), the specialization a call of the
  bench size would compile (variant, config, resident chunks).

cutile_rs (the extension exposes compile sizes, not cubins: `cargo test` checks its SASS, rust/tests/sass.rs),
cutile_jl (no Julia runtime) and the baselines/peers (not our kernels) are refused with that reason.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from tilerosetta import cubin as cubin_mod
from tilerosetta import toolchain
from tilerosetta.specs import SPECS, dtype_name
from tilerosetta.specs.base import parse_dtype

SUPPORTED = ("cutile_py", "tile_cpp", "triton", "cute_dsl")
REFUSED = {
    "cutile_rs": "cuTile-rs compiles inside the Rust extension, which returns compile sizes, not cubins; its "
                 "SASS is checked by `cargo test` (rust/tests/sass.rs; `cargo test --release --test sass -- "
                 "--ignored --nocapture resource_table` prints every op's resources)",
    "cutile_jl": "cuTile.jl needs a Julia runtime, which cannot be installed on our machines",
}


class Refused(ValueError):
    """The backend/op/dtype/arch combination cannot be inspected; the message says why."""


@dataclass
class Inspected:
    label: str  # which launch: kernel name, grid, config
    kernel: cubin_mod.Kernel
    cubin: bytes = b""  # the whole cubin holding the function (--save writes it for cuobjdump -sass)


def _bench_case(op: str, size: int):
    spec = SPECS[op]
    if not 0 <= size < len(spec.bench_cases):
        raise Refused(f"inspect {op}: --size {size} out of range: the op has {len(spec.bench_cases)} bench "
                      f"sizes ({', '.join(c.name for c in spec.bench_cases)})")
    return spec.bench_cases[size]


def _config(backend: str, op: str, dtype: torch.dtype, dims: dict, override: dict, arch: str,
            default=None, check=None) -> dict:
    """The config a call on an `arch` GPU would use: the backend's default, the tuned table's entry for
    `arch` (the backend reads it for the GPU it runs on, which this machine may not have), then --config.
    `default`/`check` replace the adapter's default_config/set_config (Triton's adapter, imported without a
    GPU, switches to the interpreter and its CPU table)."""
    from tilerosetta import backends, tuning

    b = None if default and check else backends.get(backend)
    tuned = tuning.lookup(backend, op, dtype, arch, dims) if toolchain.device_arch() != arch else None
    cfg = {**(default() if default else b.default_config(op, dtype, dims)), **(tuned or {}), **override}
    if tuned or override:
        try:
            if check:
                check(cfg)
            else:
                b.set_config(op, dtype, cfg)  # the backend's own validation of a forced config
                b.set_config(op, dtype, None)
        except ValueError as exc:
            raise Refused(f"inspect {backend}.{op}: config {cfg} refused: {exc}") from None
    return cfg


def _cutile_py(op, dtype, case, arch, override):
    try:
        import cuda.tile  # noqa: F401
    except Exception as exc:
        raise Refused(f"inspect cutile_py.{op}: cuda.tile does not import ({type(exc).__name__}: {exc})") from None
    tc = toolchain.activate()
    ok, why = tc.can_target(arch)
    if not ok:
        raise Refused(f"inspect cutile_py.{op} for {arch}: {why}")
    from tilerosetta.kernels.cutile import export, prepare_fn

    spec = SPECS[op]
    cfg = _config("cutile_py", op, dtype, case.dims, override, arch)
    shapes = spec.shapes(case)
    tensors = [torch.empty(shapes[n], dtype=dtype, device="meta") for n in list(spec.inputs) + list(spec.outputs)]
    out, seen = [], set()
    for launch in prepare_fn(op)(*tensors, cfg, **spec.full_params(case.params)):
        sig = export.signature(launch)
        key = (id(launch.kernel), repr(sig))
        if key in seen:
            continue
        seen.add(key)
        label = f"{export.kernel_name(launch)} grid {tuple(launch.grid)} config {cfg}"
        data = export.compile_cubin(launch, sig, arch)
        out += [Inspected(label, k, data) for k in cubin_mod.analyse(data)]
    return out


def _tile_cpp(op, dtype, case, arch, override):
    try:
        import tilerosetta_tile_cpp as mod
    except ImportError as exc:
        raise Refused(f"inspect tile_cpp.{op}: the module tilerosetta_tile_cpp is not built ({exc}); "
                      f"build it with `make build-python`") from None
    try:
        data = mod.cubin(op, arch)
    except KeyError:
        raise Refused(f"inspect tile_cpp.{op}: the module holds no {arch} cubin of {op} "
                      f"(archs: {', '.join(mod.ARCHS)})") from None
    from tilerosetta import backends

    cfg = _config("tile_cpp", op, dtype, case.dims, override, arch)
    b = backends.get("tile_cpp")
    b.set_config(op, dtype, cfg)
    try:
        kernel = b.kernel_for(op, dtype, case.dims)
    finally:
        b.set_config(op, dtype, None)
    # The entry point this case launches (a row op's `_loop` entry when N > TN), then its twins, the one an
    # aligned call of this case launches first: `_exact` (whole tiles), `_a16` (aligned: TMA,
    # 128-bit loads), generic. Bench shapes are aligned.
    from tilerosetta.backends.tile_cpp import exact_twin, row_entry

    symbol = row_entry(op, kernel, cfg, case.dims)
    twins = [symbol + "_exact"] if symbol == kernel and exact_twin(op, cfg, case.dims) else []
    twins += [symbol + "_a16", symbol]
    found = {k.name: k for k in cubin_mod.analyse(data) if k.name in twins}
    if missing := [name for name in twins if name not in found]:
        raise Refused(f"inspect tile_cpp.{op}: symbol {', '.join(missing)} not found in the {arch} cubin")
    return [Inspected(f"{name} config {cfg}", found[name], data) for name in twins]


def _triton(op, dtype, case, arch, override):
    import os

    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise Refused(f"inspect triton.{op}: TRITON_INTERPRET is set: the interpreter compiles nothing; "
                      f"run with TRITON_INTERPRET=0")
    os.environ["TRITON_INTERPRET"] = "0"  # read when the kernels are decorated: compiled, not interpreted
    from tilerosetta.kernels.triton import config as tconfig
    from tilerosetta.kernels.triton.aot_check import compile_one, variants

    cfg = _config("triton", op, dtype, case.dims, override, arch,
                  default=lambda: tconfig.default(op, dtype, case.dims, interpret=False),
                  check=lambda c: tconfig.check(op, c))
    out = []
    for kernel, sig, consts, warps, stages, extra, divisible in variants(op, dtype, case.dims, cfg):
        if op == "attention" and (consts["TMA"] != bool(cfg.get("TMA", 0))
                                  or consts["CAUSAL"] != bool(case.params.get("causal", False))):
            continue  # variants() lists both load paths and both masks; keep the one this call takes
        # compiled as the launch compiles it (PDL on sm_90+, the launch's maxnreg): aot_check's compile_one
        compiled = compile_one(kernel, sig, consts, warps, stages, int(arch.removeprefix("sm_")), divisible, extra)
        for k in cubin_mod.analyse(compiled.asm["cubin"]):
            k.threads = warps * 32
            k.shared = max(k.shared, compiled.metadata.shared)  # Triton's shared memory is dynamic
            out.append(Inspected(f"{kernel.fn.__name__} {consts} warps {warps} stages {stages}"
                                 + "".join(f" {n} {v}" for n, v in extra.items()), k,
                                 compiled.asm["cubin"]))
    return out


def _cute_dsl(op, dtype, case, arch, override):
    import tempfile
    from pathlib import Path

    from tilerosetta.backends import cute_dsl as adapter
    from tilerosetta.kernels.cute_dsl import KERNEL_MODULES, MISSING, variant_of

    problem = adapter.runtime_problem()
    if problem:
        raise Refused(f"inspect cute_dsl.{op}: {problem}")
    if op not in KERNEL_MODULES:
        raise Refused(f"inspect cute_dsl.{op}: {MISSING.get(op, 'not implemented')}")
    from tilerosetta.kernels.cute_dsl import common, kernel_module

    spec = SPECS[op]
    shapes = spec.shapes(case)
    # meta tensors: no memory, address 0 (aligned), as a freshly allocated CUDA tensor's base would be
    tensors = [torch.empty(shapes[n], dtype=dtype, device="meta") for n in list(spec.inputs) + list(spec.outputs)]
    tile_cfg = _config("cute_dsl", op, dtype, case.dims, override, arch)
    variant = variant_of(op, tensors, tile_cfg)  # the config may choose the kernel (attention's WGMMA)
    cfg = adapter.specialization(op, dtype, variant, case.dims, tile_cfg)
    target = adapter.target_arch(*divmod(int(arch.removeprefix("sm_")), 10))
    fn, args = kernel_module(op).build(dtype, variant, cfg)
    with tempfile.TemporaryDirectory() as d:
        common.compile_for(fn, args, target, keep_dir=d)
        data = next(Path(d).glob("*.cubin")).read_bytes()
    return [Inspected(f"{k.name} ({target}, {variant} variant) config {cfg}", k, data) for k in cubin_mod.analyse(data)]


def inspect(backend: str, op: str, dtype: str | None = None, arch: str = "sm_90", size: int = 0,
            config: dict | None = None) -> list[Inspected]:
    """The kernels one call would launch, analysed; raises Refused with the reason when it cannot."""
    from tilerosetta.backends import BACKEND_NAMES

    if backend not in BACKEND_NAMES:
        raise Refused(f"inspect: unknown backend '{backend}': expected one of {', '.join(SUPPORTED)}")
    if backend not in SUPPORTED:
        why = REFUSED.get(backend, "not one of our kernel languages (a baseline or a peer)")
        raise Refused(f"inspect {backend}.{op}: {why}; inspect supports {', '.join(SUPPORTED)}")
    if op not in SPECS:
        raise Refused(f"inspect {backend}: unknown op '{op}': expected one of {', '.join(SPECS)}")
    if arch not in cubin_mod.SM_LIMITS:
        raise Refused(f"inspect {backend}.{op}: arch '{arch}' is not a compile target: expected one of "
                      f"{', '.join(cubin_mod.SM_LIMITS)}")
    case = _bench_case(op, size)
    fn = {"cutile_py": _cutile_py, "tile_cpp": _tile_cpp, "triton": _triton, "cute_dsl": _cute_dsl}[backend]
    return fn(op, parse_dtype(resolve_dtype(backend, op, dtype)), case, arch, dict(config or {}))


def resolve_dtype(backend: str, op: str, dtype: str | None) -> str:
    names = [dtype_name(d) for d in SPECS[op].dtypes]
    name = dtype or ("bf16" if "bf16" in names else names[0])
    if name not in names:
        raise Refused(f"inspect {backend}.{op}: dtype '{name}' not in the op's dtypes ({', '.join(names)})")
    return name


def _parse_config(text: str) -> dict:
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise Refused(f"inspect: --config item '{item}' is not KEY=VALUE")
        out[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return out


def render(results: list[Inspected], arch: str, top: int) -> str:
    lines = []
    for r in results:
        k = r.kernel
        occ = k.occupancy(arch)
        cap = f" (cap {k.max_regs})" if k.max_regs else ""
        lines += [f"{r.label}",
                  f"  function   {k.name}",
                  f"  threads    {k.threads if k.threads else '? (no EIATTR_REQNTID)'}",
                  f"  registers  {k.regs}{cap}",
                  f"  spills     local {k.local} B, stack {k.stack} B, {k.spill_stores} STL / {k.spill_loads} LDL",
                  f"  shared     {k.shared} B",
                  f"  occupancy  " + (f"{occ[0]} blocks/SM on {arch} (limited by {occ[1]}; estimate from "
                                      f"registers, shared memory and threads)" if occ else "unknown (threads unknown)"),
                  f"  SASS       {sum(k.mix.values())} instructions; top {top}:"]
        lines += [f"    {n:6d}  {op}" for op, n in k.mix.most_common(top)]
        lines.append("")
    return "\n".join(lines)


def save(results: list[Inspected], folder: str) -> None:
    """One <function>.cubin per kernel, for `cuobjdump -sass` / `nvdisasm` listings."""
    from pathlib import Path

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for r in results:
        path = out / f"{r.kernel.name[:120]}.cubin"
        path.write_bytes(r.cubin)
        print(f"wrote {path}")


def run(args) -> int:
    try:
        results = inspect(args.backend, args.op, args.dtype, args.arch, args.size, _parse_config(args.config))
        print(f"{args.backend}.{args.op} {resolve_dtype(args.backend, args.op, args.dtype)} "
              f"{SPECS[args.op].bench_cases[args.size].name} on {args.arch}\n")
        print(render(results, args.arch, args.top))
        if args.save:
            save(results, args.save)
    except Refused as exc:
        print(f"tilerosetta {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # cuobjdump missing or failing
        print(f"tilerosetta inspect {args.backend}.{args.op}: {exc}", file=sys.stderr)
        return 1
    return 0


def register(sub):
    p = sub.add_parser("inspect", help="registers, spills, smem, occupancy and SASS mix of one kernel (no GPU)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True, help=f"one of {', '.join(SUPPORTED)}")
    p.add_argument("--op", required=True, help="the op")
    p.add_argument("--dtype", default=None, help="fp32, fp16 or bf16 (default bf16, else the op's first)")
    p.add_argument("--arch", default="sm_90", help="compile target (default sm_90)")
    p.add_argument("--size", type=int, default=0, help="which bench size of the op (index, default 0)")
    p.add_argument("--config", default="", help="knobs over the default config, e.g. BM=64,BN=128")
    p.add_argument("--save", default="", metavar="DIR", help="also write each kernel's cubin into DIR")
    p.add_argument("--top", type=int, default=15, help="how many opcodes of the instruction mix (default 15)")
    p.set_defaults(func=run)

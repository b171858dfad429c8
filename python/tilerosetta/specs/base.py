"""The op spec contract: everything every backend, test and benchmark needs to know about one op.

An op is called destination-passing, always in the same order:

    fn(*inputs, *outputs, **params)

`inputs` and `outputs` are torch tensors named by the spec; `params` are Python scalars (eps, causal,
scale). Shapes are declared symbolically (("M", "N"), ("M", "2*H")) so that one generic validator
checks every backend's arguments the same way and names the offending argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from tilerosetta.errors import TileRosettaError, TileRosettaTypeError

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
FLOAT_DTYPES = (FP32, FP16, BF16)
HALF_DTYPES = (FP16, BF16)

DTYPE_NAMES = {FP32: "fp32", FP16: "fp16", BF16: "bf16"}
DTYPES_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}

# Relative-error norm ||out - ref|| / ||ref|| a result must stay under. fp32 elementwise math lands far
# below 1e-5; half-precision storage rounds each output by up to 2^-9 (fp16 2^-11), so 1e-2 leaves room
# for accumulation order without letting a wrong kernel through (a wrong index gives O(1)).
DEFAULT_TOLERANCE = {FP32: 1e-5, FP16: 1e-2, BF16: 1e-2}
# tf32 keeps 10 mantissa bits: rounding both operands gives ~3-4e-4 on random data, so 1e-3 leaves ~3x room.
TF32_TOLERANCE = 1e-3


def dtype_name(dtype: torch.dtype) -> str:
    name = DTYPE_NAMES.get(dtype)  # not .get(dtype, str(dtype)...): that formats the fallback on every call
    return name if name is not None else str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES_BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype '{name}': expected one of {sorted(DTYPES_BY_NAME)}") from None


@dataclass(frozen=True)
class Param:
    """One scalar parameter of an op: its default and what values it accepts, checked once by `validate`.

    kind "positive" is a finite real number > 0 (an int is taken as that float; bool and str are refused,
    not coerced: `eps="1e-5"` would otherwise reach a kernel as a string or a truthy object); kind "flag"
    is a Python bool only (`causal="false"` is truthy, so no truthiness: 0/1 and strings are refused).
    `optional` lets None through (scale=None means "the op's default").
    """

    default: Any
    kind: str  # "positive" or "flag"
    optional: bool = False
    doc: str = ""

    def problem(self, value: Any) -> tuple[type, str] | None:
        """(error class, message) if value is not acceptable, else None."""
        if value is None:
            return None if self.optional else (TileRosettaTypeError, "expected a value, got None")
        if self.kind == "flag":
            if isinstance(value, bool):
                return None
            return TileRosettaTypeError, f"expected a bool (True or False), got {type(value).__name__} {value!r}"
        if self.kind == "positive":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                what = "a finite float > 0" + (" or None" if self.optional else "")
                return TileRosettaTypeError, f"expected {what}, got {type(value).__name__} {value!r}"
            if not math.isfinite(value) or value <= 0:
                return TileRosettaError, f"expected a finite value > 0, got {value!r}"
            return None
        raise AssertionError(f"unknown Param kind {self.kind!r}")

    def normalise(self, value: Any) -> Any:
        """The value a kernel receives once `problem` accepted it (ints become floats)."""
        if self.kind == "positive" and value is not None:
            return float(value)
        return value

    def describe(self) -> str:
        what = {"positive": "finite float > 0", "flag": "bool"}[self.kind]
        return what + (" or None" if self.optional else "") + f" (default {self.default!r})"


def positive(default: Any, doc: str = "", optional: bool = False) -> Param:
    return Param(default, "positive", optional, doc)


def flag(default: bool, doc: str = "") -> Param:
    return Param(default, "flag", False, doc)


@dataclass(frozen=True)
class Case:
    """One problem instance: symbolic dimension sizes plus scalar params."""

    dims: dict[str, int]
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    dist: str = ""  # benchmark input distribution; "" = the op's headline one (see OpSpec.bench_distributions)

    @property
    def name(self) -> str:
        parts = [f"{k}{v}" for k, v in self.dims.items()]
        for k, v in self.params.items():
            if isinstance(v, bool):
                if v:
                    parts.append(k)
            elif v is not None:
                parts.append(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}")
        return "_".join(parts) + (f"_{self.label}" if self.label else "") + (f"_{self.dist}" if self.dist else "")

    def __hash__(self):
        return hash(self.name)


SMALL_M = 64  # matmul rows up to which a product is a weight stream (decode) rather than a GEMM
# matmul rows up to which the backends default to their 16-bit decode tiles: one 16-row tile of A, so the
# weight streams once (above it, up to SMALL_M, their GEMM tiles; rust/src/config.rs DECODE_MAX_M is the
# native copy, checked by test_cutile_rs_adapter).
DECODE_TILE_MAX_M = 16


def decode_tiles(dims: dict[str, int]) -> bool:
    """A matmul call whose M (<= DECODE_TILE_MAX_M) takes the decode tiles by default."""
    return int(dims.get("M", DECODE_TILE_MAX_M + 1)) <= DECODE_TILE_MAX_M


# Decode panels: the widest column panel (of DECODE_PANELS) that still gives at least DECODE_MIN_BLOCKS blocks.
# H200 sweeps (bench/results/decode/, bf16, cuTile Python, cuTile-rs and CUDA Tile C++ alike): at N 14336,
# 16 x 128 (112 blocks) beat 16 x 64 (224) at M = 1 and 16 (32.2-32.5 vs 35.4-37.5 us); at N 4096 and M = 16,
# 16 x 32 (128 blocks) beat 16 x 64 (64). rust/src/config.rs decode_panel is the native copy (its adapter test
# checks it against this one).
DECODE_PANELS = (128, 64, 32)
DECODE_MIN_BLOCKS = 96


def decode_panel(n: int) -> int:
    """Columns of a decode tile for an N-column weight: the widest panel with >= DECODE_MIN_BLOCKS blocks."""
    for bn in DECODE_PANELS:
        if -(-int(n) // bn) >= DECODE_MIN_BLOCKS:
            return bn
    return DECODE_PANELS[-1]


def small_m_class(dims: dict[str, int]) -> str:
    """'_M<P>' (P the power of two >= M) for M <= SMALL_M, else '': decode-sized matmuls get tuned entries
    of their own instead of the GEMM's of the same largest dim. '_deepK' follows when K > N (a
    down-projection: few output columns over a long K, which needs a K split to fill the SMs, where an
    up-projection of the same largest dim has column tiles enough and runs best unsplit)."""
    m = int(dims.get("M", SMALL_M + 1))
    if not 0 < m <= SMALL_M:
        return ""
    deep = "_deepK" if int(dims.get("K", 0)) > int(dims.get("N", 1 << 62)) else ""
    return f"_M{1 << max(0, m - 1).bit_length()}{deep}"


class GemmSpec:
    """What matmul and bmm share (mixed in before OpSpec): M <= SMALL_M rows (decode) make a weight stream,
    with tuned entries of its own and judged against copy bandwidth (<= 64 flops per bf16 weight byte, far
    below the H200 ridge of ~200); fp32 inputs may use tf32."""

    def size_class_suffix(self, dims):
        return small_m_class(dims)

    def case_bound(self, case):
        return "memory" if small_m_class(case.dims) else self.bound

    def tolerance(self, dtype):
        return TF32_TOLERANCE if dtype == FP32 else super().tolerance(dtype)


@dataclass(frozen=True)
class Scaling:
    """One size sweep of an op for `tilerosetta bench --scaling` (data, not runner code): each value of
    `values` is given to every dim in `vary` (e.g. ("M", "N") for square transposes), the other dims are
    `fixed`, and `solve`, when set, is derived so that the product of `product_of` stays `product`
    (attention: B = budget / (H * S) keeps the work per S comparable)."""

    vary: tuple[str, ...]
    values: tuple[int, ...]
    fixed: dict[str, int] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    solve: str = ""
    product_of: tuple[str, ...] = ()
    product: int = 0

    @property
    def name(self) -> str:
        """'N at M=2048', 'S at B*H*S=65536, H=2, D=128'."""
        held = ([f"{'*'.join(self.product_of)}={self.product}"] if self.solve else []) + \
            [f"{k}={v}" for k, v in self.fixed.items()] + [f"{k}={v}" for k, v in self.params.items()]
        return f"{'='.join(self.vary)}" + (f" at {', '.join(held)}" if held else "")

    def dims_at(self, value: int) -> dict[str, int]:
        dims = {**self.fixed, **{d: value for d in self.vary}}
        if self.solve:
            rest = math.prod(dims[d] for d in self.product_of if d != self.solve)
            dims[self.solve] = max(1, self.product // rest)
        return dims

    def matches(self, dims: dict[str, int], params: dict[str, Any] | None = None) -> int | None:
        """The swept value when `dims` (and params) is a point of this sweep, else None."""
        value = dims.get(self.vary[0])
        if value not in self.values or any(dims.get(k) != v for k, v in self.dims_at(value).items()):
            return None
        if params is not None and any(params.get(k) != v for k, v in self.params.items()):
            return None
        return value


def free_factor(expr: str, dims: dict[str, int]) -> tuple[str, int] | None:
    """For an extent such as '2*H' whose one name is not bound yet: (that name, product of the other
    factors), so name = extent / product. None when nothing or more than one thing is unknown."""
    factors = [f.strip() for f in expr.split("*")]
    free = [f for f in factors if f.isidentifier() and f not in dims]
    if len(free) != 1 or factors.count(free[0]) != 1:
        return None
    rest = [f for f in factors if f != free[0]]
    return free[0], eval_dim("*".join(rest) or "1", dims)


def eval_dim(expr: str, dims: dict[str, int]) -> int:
    """Evaluate a symbolic extent such as 'N', '2*H' against bound dims (only * of ints and names)."""
    value = 1
    for factor in expr.split("*"):
        factor = factor.strip()
        value *= int(factor) if factor.isdigit() else dims[factor]
    return value


class OpSpec:
    """Base class of one op's spec. Subclasses fill the class attributes and the small methods below."""

    name: ClassVar[str]  # the op's name; its module is specs/<name>.py, found there by specs/__init__.py
    # Position in the op set (OP_NAMES: the order of tables, tests and reports): ascending, unique; a new
    # op takes the next free number after the last one.
    order: ClassVar[int]
    summary: ClassVar[str]
    inputs: ClassVar[dict[str, tuple[str, ...]]]  # name -> symbolic shape, in call order
    outputs: ClassVar[dict[str, tuple[str, ...]]] = {}
    params: ClassVar[dict[str, Param]] = {}  # name -> declaration (default, type, range)
    # Outputs that may be the very same tensor as an input (same data_ptr, shape): {"out": ("a", "b")}.
    # Only where every backend's kernel was shown to be correct in place (shared_tests/test_bad_inputs.py
    # runs each declared pair); any other overlap of an output with another argument is refused. The native
    # layers refuse every overlap on their own (cpp/src/ops.cpp check_no_overlap, rust/src/args.rs
    # check_no_alias: the raw path has no BoundOp), so a declared pair must be taught to them too.
    inplace_ok: ClassVar[dict[str, tuple[str, ...]]] = {}
    dtypes: ClassVar[tuple[torch.dtype, ...]] = FLOAT_DTYPES
    cases: ClassVar[tuple[Case, ...]] = ()  # conformance cases (small: they also run on CPU)
    bench_cases: ClassVar[tuple[Case, ...]] = ()  # benchmark sizes
    bound: ClassVar[str] = "memory"  # "memory" or "compute": which roofline ceiling applies
    dim_choices: ClassVar[dict[str, tuple[int, ...]]] = {}  # dims restricted to a few values (random tests)
    # A symbol a case may omit, and the symbol whose value it then takes (attention: {"Hkv": "H", "Sk": "S"},
    # so self-attention cases and their names stay as they were before k/v got shapes of their own).
    dim_defaults: ClassVar[dict[str, str]] = {}
    scaling: ClassVar[tuple[Scaling, ...]] = ()  # size sweeps of `bench --scaling` (how cost grows with size)
    # How benchmark inputs are drawn: name -> description, the first is the headline. Benchmarks use
    # inputs like real activations (make_bench_inputs); make_inputs' stress distributions (x30 logits,
    # large offsets) are for conformance only. An op whose speed depends on the distribution lists more
    # than one: the bench times each (the non-headline ones as cases named ..._<dist>).
    bench_distributions: ClassVar[dict[str, str]] = {"randn": "standard normal, like activations"}
    # Ops of one family share a launch shape and one tile table in every language, so a new member needs
    # its kernel files and nothing else there. "rows": rows of the first input (M, N), TM rows per block,
    # the float params after (M, N) in the spec's order. "": the op has its own table and launch plan.
    family: ClassVar[str] = ""

    # ---- semantics -------------------------------------------------------------------------
    def reference(self, params: dict[str, Any], **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Exact-ish result from float64 inputs (the harness upcasts)."""
        raise NotImplementedError

    def baseline(self, *inputs: torch.Tensor, **params: Any):
        """What a torch user writes for this op, fn(*inputs, **params) in the spec's order, returning the
        output (a tuple in `outputs` order when there are several) in the inputs' dtype: torch's fused call
        where it has one. The `torch` backend (backends/torch_ref.py) is this, timed as the baseline."""
        raise NotImplementedError

    def flops(self, case: Case) -> int:
        raise NotImplementedError

    def case_dims(self, case: Case) -> dict[str, int]:
        """The case's dims with every omitted `dim_defaults` symbol filled in."""
        dims = dict(case.dims)
        for sym, like in self.dim_defaults.items():
            if sym not in dims and like in dims:
                dims[sym] = dims[like]
        return dims

    def random_dims(self, dims: dict[str, int], params: dict[str, Any]) -> dict[str, int]:
        """Randomly drawn dims made valid where the op constrains them jointly (random-shape tests)."""
        return dims

    def bytes_moved(self, case: Case, dtype: torch.dtype) -> int:
        """Fewest bytes: each input read once, each output written once."""
        size = torch.tensor([], dtype=dtype).element_size()
        dims = self.case_dims(case)
        total = 0
        for shape in list(self.inputs.values()) + list(self.outputs.values()):
            total += math.prod(eval_dim(e, dims) for e in shape)
        return total * size

    def tolerance(self, dtype: torch.dtype) -> float:
        return DEFAULT_TOLERANCE[dtype]

    def case_bound(self, case: Case) -> str:
        """The roofline ceiling of one case ("memory" or "compute"); default: the op's `bound`."""
        return self.bound

    def size_class_suffix(self, dims: dict[str, int]) -> str:
        """More of the tuned table's size class (tuning.size_class) where the largest dim alone would mix
        problems whose best tiles differ (matmul: M=1 and M=4096 at N=K=4096). Default: nothing."""
        return ""

    def check_extra(self, dims: dict[str, int], params: dict[str, Any]) -> tuple[str, str] | None:
        """Op-specific constraints beyond shapes: return (arg, message) if violated."""
        return None

    def full_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Defaults with the given params on top (ints of float params as floats once checked)."""
        out = {k: p.default for k, p in self.params.items()}
        for k, v in params.items():
            decl = self.params.get(k)
            out[k] = decl.normalise(v) if decl is not None and decl.problem(v) is None else v
        return out

    # ---- shapes and inputs ------------------------------------------------------------------
    def shapes(self, case: Case) -> dict[str, tuple[int, ...]]:
        sym = {**self.inputs, **self.outputs}
        dims = self.case_dims(case)
        return {n: tuple(eval_dim(e, dims) for e in s) for n, s in sym.items()}

    def make_inputs(self, case: Case, dtype: torch.dtype, device, generator: torch.Generator):
        """Fresh random inputs (standard normal unless an op overrides it); never zeros."""
        shapes = self.shapes(case)
        return {
            n: torch.randn(shapes[n], dtype=torch.float32, device=device, generator=generator).to(dtype)
            for n in self.inputs
        }

    def bench_distribution(self, case: Case) -> str:
        """The distribution a bench case draws from (its `dist`, or the headline one)."""
        dist = case.dist or next(iter(self.bench_distributions))
        if dist not in self.bench_distributions:
            raise ValueError(f"{self.name}: unknown bench distribution '{dist}'; expected one of "
                             f"{list(self.bench_distributions)}")
        return dist

    def is_headline(self, case: Case) -> bool:
        return self.bench_distribution(case) == next(iter(self.bench_distributions))

    def make_bench_inputs(self, case: Case, dtype: torch.dtype, device, generator: torch.Generator):
        """Benchmark inputs, drawn like real activations: standard normal unless an op says otherwise
        (never make_inputs' stress distributions)."""
        self.bench_distribution(case)
        return OpSpec.make_inputs(self, case, dtype, device, generator)

    def make_outputs(self, case: Case, dtype: torch.dtype, device, poison: float = float("nan")):
        """Outputs filled with a poison value so unwritten elements are caught."""
        shapes = self.shapes(case)
        return {n: torch.full(shapes[n], poison, dtype=dtype, device=device) for n in self.outputs}

    def dims_of(self, tensors) -> dict[str, int]:
        """Plain dimension symbols bound from already validated tensors, in call order (no checks). Launch
        paths call it on every call: where each symbol is first bound is worked out once per spec."""
        slots = self.__dict__.get("_dim_slots")
        if slots is None:
            seen, slots = set(), []
            for i, shape in enumerate(list(self.inputs.values()) + list(self.outputs.values())):
                for axis, sym in enumerate(shape):
                    if sym.isidentifier() and sym not in seen:
                        seen.add(sym)
                        slots.append((sym, i, axis))
            slots = self._dim_slots = tuple(slots)
        n = len(tensors)
        return {sym: int(tensors[i].shape[axis]) for sym, i, axis in slots if i < n}

    # ---- validation shared by every backend ----------------------------------------------------
    def validate(self, backend: str, device_type: str, tensors: dict[str, Any], params: dict[str, Any],
                 dtypes: tuple[torch.dtype, ...] | None = None, with_outputs: bool = True) -> dict[str, int]:
        """Check types, dtype, device, contiguity and shapes. Returns the bound dims.

        with_outputs=False checks the inputs only (a returning-form call: the callee allocates outputs).

        Raises TileRosettaError naming op, backend and argument on the first problem found.
        """
        allowed = dtypes or self.dtypes

        def fail(arg, msg):
            raise TileRosettaError(self.name, backend, arg, msg)

        unknown = set(params) - set(self.params)
        if unknown:
            fail(sorted(unknown)[0], f"unknown parameter; {self.name} takes {sorted(self.params) or 'none'}")
        for key, value in params.items():
            bad = self.params[key].problem(value)
            if bad:
                cls, msg = bad
                raise cls(self.name, backend, key, msg)
        names = list(self.inputs) + (list(self.outputs) if with_outputs else [])
        dtype = None
        for n in names:
            t = tensors.get(n)
            if not isinstance(t, torch.Tensor):
                raise TileRosettaTypeError(self.name, backend, n, f"expected a torch.Tensor, got {type(t).__name__}")
            if t.dtype not in allowed:
                fail(n, f"dtype {dtype_name(t.dtype)} not supported; expected one of "
                        f"{[dtype_name(d) for d in allowed]}")
            if dtype is None:
                dtype = t.dtype
            elif t.dtype != dtype:
                fail(n, f"dtype {dtype_name(t.dtype)} differs from '{names[0]}' ({dtype_name(dtype)})")
            if t.device.type != device_type:
                fail(n, f"tensor is on {t.device}, this backend needs a {device_type} tensor")
            if not t.is_contiguous():
                fail(n, f"tensor is not contiguous (strides {tuple(t.stride())}); call .contiguous() first")
        first = tensors[names[0]]
        for n in names[1:]:
            if tensors[n].device != first.device:
                fail(n, f"tensor is on {tensors[n].device}, '{names[0]}' is on {first.device}")
        sym = {**self.inputs, **self.outputs}
        dims: dict[str, int] = {}
        bound_by: dict[str, str] = {}
        for n in names:  # pass 1: bind plain symbols
            shape, want = tuple(tensors[n].shape), sym[n]
            if len(shape) != len(want):
                fail(n, f"expected {len(want)}-D ({', '.join(want)}), got shape {shape}")
            for extent, e in zip(shape, want):
                if e.isidentifier():
                    if e in dims and dims[e] != extent:
                        fail(n, f"shape {shape} has {e}={extent} but '{bound_by[e]}' has {e}={dims[e]}")
                    dims.setdefault(e, extent)
                    bound_by.setdefault(e, n)
        for n in names:  # pass 1b: a symbol seen only as 'k*S' (silu_and_mul's 2*H) is derived
            for extent, e in zip(tensors[n].shape, sym[n]):
                solved = free_factor(e, dims)
                if solved:
                    free, k = solved
                    if extent % k:
                        fail(n, f"extent {extent} of '{e}' is not a multiple of {k}")
                    dims[free], bound_by[free] = extent // k, n
        for n in names:  # pass 2: derived extents such as 2*H
            shape, want = tuple(tensors[n].shape), sym[n]
            expect = tuple(eval_dim(e, dims) for e in want)
            if shape != expect:
                fail(n, f"expected shape {expect} ({', '.join(want)}), got {shape}")
        for n in names:
            if tensors[n].numel() == 0:
                fail(n, f"empty tensor (shape {tuple(tensors[n].shape)})")
        bad = self.check_extra(dims, self.full_params(params))
        if bad:
            fail(*bad)
        if with_outputs:  # a returning-form call has no outputs yet: nothing can alias them
            bad = self.overlap(tensors)
            if bad:
                fail(*bad)
        return dims

    def overlap_pairs(self) -> tuple[tuple[int, int], ...]:
        """(output, other argument) index pairs in call order whose memory must not meet: each output with
        every input and every later output (each pair of outputs once)."""
        pairs = self.__dict__.get("_overlap_pairs")
        if pairs is None:
            n_in, n = len(self.inputs), len(self.inputs) + len(self.outputs)
            pairs = self._overlap_pairs = tuple((i, j) for i in range(n_in, n) for j in range(n)
                                                if j < n_in or j > i)
        return pairs

    def overlap(self, tensors: dict[str, torch.Tensor]) -> tuple[str, str] | None:
        """(output, message) if an output shares bytes with any other argument, unless `inplace_ok`
        allows exactly that pair as the very same tensor. Kernels read other tiles of an input after
        writing a tile of the output (transpose, matmul, attention, row ops): an aliased or partly
        overlapping output gives silently wrong numbers, so it is refused before launch."""
        spans = {n: _byte_span(t) for n, t in tensors.items()}
        names = list(self.inputs) + list(self.outputs)
        for i, j in self.overlap_pairs():
            o, n = names[i], names[j]
            (s0, s1, dev0), (t0, t1, dev1) = spans[o], spans[n]
            if dev0 != dev1 or not (s0 < t1 and t0 < s1):
                continue
            same = (s0, s1) == (t0, t1) and tensors[o].shape == tensors[n].shape
            if same and n in self.inplace_ok.get(o, ()):
                continue
            how = "is the same memory as" if same else "partly overlaps"
            return o, (f"output {how} '{n}' (bytes [{s0:#x}, {s1:#x}) and [{t0:#x}, {t1:#x})); "
                       f"{self.name} does not run in place: pass a separate output tensor")
        return None


def _byte_span(t: torch.Tensor) -> tuple[int, int, torch.device]:
    """[first, last+1) byte address a tensor's elements occupy (views included: the storage is shared,
    the addresses are what the kernel touches), and its device."""
    if t.numel() == 0:
        return 0, 0, t.device
    if t.is_contiguous():  # the common case, and every validated call's: dense from data_ptr
        return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), t.device
    first = last = t.data_ptr()
    for size, stride in zip(t.shape, t.stride()):
        step = (size - 1) * stride * t.element_size()
        if step < 0:
            first += step
        else:
            last += step
    return first, last + t.element_size(), t.device


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN/inf anywhere gives inf (NaN never passes)."""
    o = out.detach().to(torch.float64)
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    if not torch.isfinite(o).all():
        return math.inf
    denom = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    return num / denom if denom > 0 else num

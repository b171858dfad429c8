"""CPU tests of the optional `tilegym` peer adapter (NVIDIA TileGym's cuTile kernels beside ours).

TileGym is not installed in CI. What runs here:
  * the precise reason when tilegym is absent;
  * the adapter against a *fake* tilegym package written to a temp folder: a torch model of the API and
    semantics of TileGym 1.5.1's dispatched ops (ops/ops.py + ops/cutile/*.py), so the glue (argument
    order, eps/offset, start/end dims, rope's cos/sin layout and in-place k, attention's is_causal
    default of True, copies into `out`, backend="cutile" on every call) is checked against the specs'
    references; plus its failure modes (no cuTile backend, an op without a cuTile kernel, an import that
    patches cuda.tile.launch);
  * when the real tilegym is importable (e.g. PYTHONPATH holding an unpacked wheel): that its registry
    has a cuTile kernel for every op we map and that every call we make binds to its signature.
The kernels themselves run only on a GPU: `pytest --backend tilegym shared_tests/test_conformance.py`.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap

import pytest
import torch

from tilerosetta import backends
from tilerosetta.backends import tilegym_peer
from tilerosetta.backends.tilegym_peer import OP_MAP, TESTED_VERSION, TileGymPeer
from tilerosetta.errors import TileRosettaError
from tilerosetta.harness import compare, make_case_tensors, reference
from tilerosetta.specs import OP_NAMES, SPECS
from tilerosetta.specs.base import FP32

# ---- a fake tilegym: same module layout and call signatures, torch math on any device -----------------
FAKE_INIT = '''
import os
import torch
__version__ = "0.0-fake"
CALLS = []
_NO_CUTILE = os.environ.get("FAKE_TILEGYM_NO_CUTILE") == "1"
_DROP = set(filter(None, os.environ.get("FAKE_TILEGYM_DROP", "").split(",")))
if os.environ.get("FAKE_TILEGYM_PATCH_LAUNCH") == "1":  # like TileGym's experimental-kernel notice
    import cuda.tile as _ct
    _orig = _ct.launch
    def _patched(*a):
        return _orig(*a)
    _ct.launch = _patched
from . import backend, ops
from .backend import set_backend, is_backend_available, get_available_backends, get_available_backends_for_op
'''
FAKE_BACKEND = '''
import os
_REG = {}
_CURRENT = ["cutile"]
def register(name, backends):
    _REG[name] = set(backends)
def has_backend_impl(name, backend):
    return backend in _REG.get(name, ())
def get_available_backends_for_op(name):
    return sorted(_REG.get(name, ())) + ["default"]
def get_available_backends():
    return {"triton"} if os.environ.get("FAKE_TILEGYM_NO_CUTILE") == "1" else {"cutile", "triton"}
def is_backend_available(b):
    return b in get_available_backends()
def set_backend(b):
    if b not in get_available_backends():
        raise ValueError(b)
    _CURRENT[0] = b
'''
FAKE_OPS = '''
import os
import torch
from tilegym import backend as _backend
from tilegym import CALLS

if os.environ.get("FAKE_TILEGYM_CUTILE_IMPORT_FAILS") == "1":
    cutile = None
else:
    cutile = object()

_DROP = set(filter(None, os.environ.get("FAKE_TILEGYM_DROP", "").split(",")))

def _op(name):
    _backend.register(name, ["triton"] if name in _DROP else ["cutile", "triton"])
    def deco(fn):
        def wrapper(*args, backend=None, **kwargs):
            CALLS.append((name, backend))
            return fn(*args, **kwargs)
        return wrapper
    return deco

@_op("transpose")
def transpose(inp, out=None, static_persistent=None):
    out = torch.empty(inp.shape[::-1], dtype=inp.dtype) if out is None else out
    out.copy_(inp.t())
    return out

@_op("softmax")
def softmax(x, use_tma=False):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)

@_op("rms_norm")
def rms_norm(input, normalized_shape, weight, eps, bias=None, mode=None, offset=0.0):
    x = input.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (offset + weight.float())
    return y.to(input.dtype)

@_op("layer_norm")
def layer_norm(x, start_dim, end_dim, weight, bias, eps, weight_shift=0.0):
    shape = x.shape
    n = 1
    for s in shape[:start_dim]:
        n *= s
    c = 1
    for s in shape[start_dim:end_dim]:
        c *= s
    xs = x.float().reshape(n, c, -1)
    mean = xs.mean(1, keepdim=True)
    var = (xs - mean).pow(2).mean(1, keepdim=True)
    w = weight.float().reshape(1, c, 1) + weight_shift
    y = (xs - mean) * torch.rsqrt(var + eps) * w + bias.float().reshape(1, c, 1)
    return y.reshape(shape).to(x.dtype)

@_op("silu_and_mul")
def silu_and_mul(input, out=None):
    h = input.shape[-1] // 2
    a, b = input[..., :h].float(), input[..., h:].float()
    res = (a * torch.sigmoid(a) * b).to(input.dtype)
    if out is None:
        return res
    out.copy_(res)
    return out

@_op("apply_rope_base")
def apply_rope_base(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, partial_rotary_factor=1.0):
    # TileGym: in place on q and k; cos/sin (1 or B, S, D); only cos/sin[..., :D/2] are read.
    assert cos.ndim == 3 and sin.ndim == 3, "fake: cos/sin must be 3-D"
    for t in (q, k):
        h = t.shape[-1] // 2
        c = cos[..., :h].float().unsqueeze(1)
        s = sin[..., :h].float().unsqueeze(1)
        t1, t2 = t[..., :h].float(), t[..., h:].float()
        n1, n2 = t1 * c - t2 * s, t2 * c + t1 * s
        t[..., :h] = n1.to(t.dtype)
        t[..., h:] = n2.to(t.dtype)
    return q, k

@_op("matmul")
def matmul(a, b, trans_a=False, trans_b=False, static_persistent=None, use_tma=False):
    return (a.float() @ b.float()).to(a.dtype)

@_op("bmm")
def bmm(a, b, transpose_a=False, transpose_b=False, static_persistent=True):
    return (a.float() @ b.float()).to(a.dtype)

@_op("fmha")
def fmha(q, k, v, scaling=None, is_causal=True):
    import math
    scaling = 1.0 / math.sqrt(q.shape[-1]) if scaling is None else scaling
    s = (q.float() @ k.float().transpose(-1, -2)) * scaling
    if is_causal:
        n = q.shape[-2]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype)
'''


def _forget_tilegym():
    for name in [m for m in sys.modules if m == "tilegym" or m.startswith("tilegym.")]:
        del sys.modules[name]


@pytest.fixture
def fake_tilegym(tmp_path, monkeypatch):
    """Put the fake tilegym first on sys.path; returns a factory taking env switches."""
    pkg = tmp_path / "tilegym"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(FAKE_INIT))
    (pkg / "backend.py").write_text(textwrap.dedent(FAKE_BACKEND))
    (pkg / "ops.py").write_text(textwrap.dedent(FAKE_OPS))
    monkeypatch.syspath_prepend(str(tmp_path))
    for var in ("FAKE_TILEGYM_NO_CUTILE", "FAKE_TILEGYM_DROP", "FAKE_TILEGYM_PATCH_LAUNCH",
                "FAKE_TILEGYM_CUTILE_IMPORT_FAILS"):
        monkeypatch.delenv(var, raising=False)
    saved = {m: sys.modules[m] for m in sys.modules if m == "tilegym" or m.startswith("tilegym.")}
    _forget_tilegym()

    def make(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        _forget_tilegym()
        peer = TileGymPeer()
        assert peer._tilegym() is not None, peer._import_error
        assert peer._tilegym().__version__ == "0.0-fake", "a real tilegym shadowed the fake"
        return peer

    yield make
    _forget_tilegym()
    sys.modules.update(saved)


# ---- registry and absence -------------------------------------------------------------------------
def test_registered_as_a_peer():
    b = backends.get("tilegym")
    assert isinstance(b, TileGymPeer), f"adapter failed to import: {b.is_available()}"
    assert (b.name, b.device_type, b.peer) == ("tilegym", "cuda", "NVIDIA TileGym")
    assert "tilegym" in backends.BACKEND_NAMES


def test_absent_tilegym_gives_a_precise_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "tilegym", None)  # import tilegym -> ImportError
    peer = TileGymPeer()
    ok, reason = peer.available()
    assert not ok
    assert reason.startswith("tilegym is not importable (ModuleNotFoundError: import of tilegym halted"), reason
    assert f"pip install --no-deps tilegym=={TESTED_VERSION}" in reason, reason
    assert peer.implementations() == {}
    assert peer.missing() == {op: reason for op in OP_NAMES}
    assert peer.peer_label() == "NVIDIA TileGym (not installed)"


def test_registry_instance_reason_names_the_missing_module():
    try:
        tilegym_peer._import_tilegym()  # the adapter's import: puts cuda.tile.launch back (a bare import would not)
        pytest.skip("tilegym is importable here: the absent-package reason cannot be observed")
    except ImportError:
        pass
    ok, reason = TileGymPeer().available()
    assert not ok and "No module named 'tilegym'" in reason, reason


# ---- the adapter against the fake --------------------------------------------------------------------
def test_mapping_covers_what_the_adapter_claims(fake_tilegym):
    peer = fake_tilegym()
    assert set(peer.implementations()) == set(OP_MAP) == set(OP_NAMES) - set(tilegym_peer.NOT_IN_TILEGYM)
    assert peer.missing() == tilegym_peer.NOT_IN_TILEGYM and all(peer.missing().values())
    assert peer.peer_label() == "NVIDIA TileGym 0.0-fake"
    assert peer.versions()["tilegym"] == "0.0-fake"


def test_op_without_a_cutile_kernel_is_missing_not_fallen_back(fake_tilegym):
    peer = fake_tilegym(FAKE_TILEGYM_DROP="fmha,softmax")
    impls, missing = peer.implementations(), peer.missing()
    assert "attention" not in impls and "softmax" not in impls and "matmul" in impls
    assert "no cuTile kernel for 'fmha'" in missing["attention"] and "['triton']" in missing["attention"]
    assert "no cuTile kernel for 'softmax'" in missing["softmax"]


def test_no_cutile_backend_in_tilegym(fake_tilegym):
    peer = fake_tilegym(FAKE_TILEGYM_NO_CUTILE="1")
    ok, reason = peer.available()
    assert not ok and "its 'cutile' backend is not available" in reason and "['triton']" in reason, reason
    assert peer.implementations() == {}
    assert set(peer.missing()) == set(OP_NAMES)


def test_cutile_ops_import_failure_is_reported(fake_tilegym):
    peer = fake_tilegym(FAKE_TILEGYM_CUTILE_IMPORT_FAILS="1")
    ok, reason = peer.available()
    assert not ok and reason.startswith("tilegym.ops.cutile failed to import: ModuleNotFoundError"), reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present: the no-GPU reason is not reached")
def test_no_gpu_reason(fake_tilegym):
    ok, reason = fake_tilegym().available()
    assert (ok, reason) == (False, "tilegym 0.0-fake imported, but no CUDA GPU is visible to torch")


def test_import_does_not_leave_cuda_tile_launch_patched(fake_tilegym):
    ct = pytest.importorskip("cuda.tile", reason="cuda.tile not installed")
    before = ct.launch
    fake_tilegym(FAKE_TILEGYM_PATCH_LAUNCH="1")
    assert ct.launch is before


def _cases(spec):
    dtypes = [FP32] if FP32 in spec.dtypes else [spec.dtypes[0]]
    return [(d, c) for d in dtypes for c in spec.cases]


@pytest.mark.parametrize("op", sorted(OP_MAP))
def test_glue_matches_the_spec_on_the_fake(fake_tilegym, op):
    """Each binder, driving the fake's model of TileGym's op, reproduces the spec reference on every
    conformance case; every call carried backend="cutile"."""
    peer = fake_tilegym()
    tg = sys.modules["tilegym"]
    fn, spec = peer.implementations()[op], SPECS[op]
    for i, (dtype, case) in enumerate(_cases(spec)):
        inputs, outputs = make_case_tensors(spec, case, dtype, "cpu", seed=i)
        dims = spec.case_dims(case)
        if op == "attention" and (dims["Hkv"] != dims["H"] or dims["Sk"] != dims["S"]):
            with pytest.raises(TileRosettaError, match=r"tilegym\.attention: argument 'k'.*H == Hkv, S == Sk only"):
                fn(*inputs.values(), *outputs.values(), **spec.full_params(case.params))
            continue  # bound for self-attention only (tilegym_peer.py says why)
        fn(*inputs.values(), *outputs.values(), **spec.full_params(case.params))
        ok, err, _, msg = compare(spec, dtype, outputs, reference(spec, case, inputs))
        assert ok, f"{op} {case.name}: {msg} (rel_err {err:.3g})"
    assert tg.CALLS and all(c == (OP_MAP[op][0], "cutile") for c in tg.CALLS), tg.CALLS


def test_rope_refuses_head_dims_tilegym_would_rotate_wrong(fake_tilegym):
    fn = fake_tilegym().implementations()["rope"]
    q, cos = torch.randn(1, 2, 3, 12), torch.randn(3, 12)
    with pytest.raises(TileRosettaError, match=r"tilegym\.rope: argument 'q': head dim D=12"):
        fn(q, cos, cos, torch.empty_like(q))


def test_attention_refuses_negative_scale(fake_tilegym):
    fn = fake_tilegym().implementations()["attention"]
    q = torch.randn(1, 1, 4, 64, dtype=torch.float16)
    with pytest.raises(TileRosettaError, match=r"tilegym\.attention: argument 'scale'"):
        fn(q, q, q, torch.empty_like(q), causal=True, scale=-0.5)


def test_ops_tilegym_allocates_are_timed_as_returned_without_our_copy(fake_tilegym, tmp_path):
    """The bench times TileGym's returning ops as y = op(x): no write into caller memory in the timed call."""
    from bench_fakes import watching_timer

    from tilerosetta.bench import results, runner

    peer = fake_tilegym()
    assert set(peer.returning()) == {op for op, (_, mode) in OP_MAP.items() if mode == "returns"}
    assert {"softmax", "rms_norm", "layer_norm", "matmul", "attention"} <= set(peer.returning())
    peer.device_type = "cpu"  # the fake computes on CPU tensors; the real peer needs a GPU to be available
    peer.available = lambda: (True, "fake tilegym on CPU")
    watched = []
    timer = watching_timer(watched)


    plan = []
    for op in sorted(peer.returning()):
        spec = SPECS[op]
        plan.append((spec, FP32 if FP32 in spec.dtypes else spec.dtypes[0], spec.cases[3]))
    with results.ResultsWriter(tmp_path / "r.jsonl") as w:
        recs = runner.Runner([peer], w, runner.Settings(cpu=True), timer=timer).run(plan)
    assert [(r["op"], r["status"], r["convention"]) for r in recs] == [(p[0].name, "ok", "returns") for p in plan]
    for r, rec in zip(recs, watched):
        assert rec.ops and rec.writes == [], (r["op"], rec.writes)


def test_report_config_says_how_the_output_is_produced():
    peer = TileGymPeer()
    assert peer.config_space("softmax", FP32) == []
    assert peer.default_config("softmax", FP32, {})["out"] == "returns"
    assert peer.default_config("transpose", FP32, {})["out"] == "direct"
    assert peer.default_config("vector_add", FP32, {}) == {}
    assert peer.out_note("transpose") is None and peer.out_note("matmul") is None
    assert "out.copy_(q)" in peer.out_note("rope")
    assert "cos/sin[:, :D/2]" in peer.out_note("rope")


# ---- the real tilegym, where importable ------------------------------------------------------------------
def _real_tilegym():
    _forget_tilegym()
    peer = TileGymPeer()
    tg = peer._tilegym()
    if tg is None:
        pytest.skip(f"real tilegym not importable here: {peer._import_error}")
    if tg.__version__ == "0.0-fake":
        pytest.skip("the fake tilegym is on sys.path")
    problem = peer._cutile_problem(tg)
    if problem:
        pytest.skip(f"real tilegym has no usable cuTile backend here: {problem}")
    return peer, tg


def test_real_tilegym_has_a_cutile_kernel_for_every_mapped_op():
    peer, tg = _real_tilegym()
    from tilegym.backend import has_backend_impl

    for op, (tg_name, _) in OP_MAP.items():
        assert has_backend_impl(tg_name, "cutile"), f"{op}: tilegym {tg.__version__} lacks cutile '{tg_name}'"
    assert set(peer.implementations()) == set(OP_MAP)


def _cutile_impl(tg, tg_name):
    dotted = tg.get_registry_info()[tg_name]["cutile"]
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("op", sorted(OP_MAP))
def test_real_tilegym_signatures_accept_our_calls(op):
    """Record the exact call each binder makes, then bind it to the real cuTile implementation's signature
    (the dispatcher passes *args/**kwargs through unchanged after popping backend=)."""
    peer, tg = _real_tilegym()
    tg_name, mode = OP_MAP[op]
    spec = SPECS[op]
    dtype = FP32 if FP32 in spec.dtypes else spec.dtypes[0]
    # the last case TileGym is bound for (attention: self-attention, k/v shaped like q; issue 14's GQA and
    # decode cases are refused by the binder with a reason)
    case = next(c for c in reversed(spec.cases) if op != "attention" or
                spec.shapes(c)["k"] == spec.shapes(c)["q"])
    inputs, outputs = make_case_tensors(spec, case, dtype, "cpu", seed=0)
    calls = []

    def recorder(*args, **kwargs):  # stands in for TileGym's op: returns a result shaped like `out`
        calls.append((args, kwargs))
        return torch.zeros_like(outputs["out"])

    fn = tilegym_peer._BINDERS[op](recorder)
    tensors = inputs.values() if mode == "returns" else [*inputs.values(), *outputs.values()]
    fn(*tensors, **spec.full_params(case.params))
    (args, kwargs), = calls
    assert kwargs.pop("backend") == "cutile"
    sig = inspect.signature(_cutile_impl(tg, tg_name))
    sig.bind(*args, **kwargs)  # TypeError if TileGym's signature changed under us
    if mode == "direct":
        assert kwargs.get("out") is outputs["out"]


# ---- GPU -------------------------------------------------------------------------------------------------
def test_gpu_peer_forces_tilegym_to_cutile():
    b = backends.get("tilegym")
    ok, reason = b.is_available()
    if not ok:
        pytest.skip(f"tilegym unavailable: {reason}")
    tg = b._tilegym()
    assert tg.get_current_backend() == "cutile"
    ct = importlib.import_module("cuda.tile")
    assert getattr(ct.launch, "__name__", "") != "_patched_launch", "tilegym's launch wrapper left in place"


# ---- the benchmark marks a peer ------------------------------------------------------------------------
def test_runner_records_the_peer_note_and_environment_the_peer_label(tmp_path):
    from bench_fakes import CountingBackend, fixed_timer

    from tilerosetta.bench import environment, results, runner
    from tilerosetta.specs import get_spec

    class FakePeer(CountingBackend):
        peer = "NVIDIA TileGym"

        def peer_label(self):
            return "NVIDIA TileGym 9.9"

        def out_note(self, op):
            return "includes out.copy_" if op == "softmax" else None

    b = FakePeer("peerish")
    assert environment.backend_info([b])["peerish"]["peer"] == "NVIDIA TileGym 9.9"
    va, sm = get_spec("vector_add"), get_spec("softmax")
    with results.ResultsWriter(tmp_path / "r.jsonl") as w:
        recs = runner.Runner([b], w, runner.Settings(cpu=True), timer=fixed_timer(1.0)).run(
            [(va, FP32, va.cases[2]), (sm, FP32, sm.cases[2])])
    by_op = {r["op"]: r for r in recs}
    assert by_op["softmax"]["status"] == "ok" and by_op["softmax"]["note"] == "includes out.copy_"
    assert by_op["vector_add"]["status"] == "ok" and "note" not in by_op["vector_add"]


def test_report_marks_the_peer_column_and_footnotes_its_copies():
    import copy

    from tilerosetta.bench import report, results

    res = copy.deepcopy(results.load(results.FIXTURE))
    res.meta["backends"]["tilegym"] = {"language": "NVIDIA TileGym (peer)", "available": True, "reason": "",
                                       "versions": {"tilegym": "1.5.1"}, "device_type": "cuda",
                                       "peer": "NVIDIA TileGym 1.5.1"}
    torch_softmax = [r for r in res.results if r["backend"] == "torch" and r["op"] == "softmax"
                     and r["status"] == "ok"]
    assert torch_softmax, "fixture has no ok torch softmax result"
    for r in torch_softmax:
        res.results.append({**r, "backend": "tilegym", "note": "includes out.copy_(result)"})
    header, rows = report.headline(res)
    assert header[-1] == "tilegym (peer)" and "torch (baseline)" in header  # ours first, then torch and peers
    softmax_row = next(row for row in rows if row[0] == "softmax")
    assert softmax_row[-1].endswith("†"), softmax_row
    assert not any(cell.endswith("†") for row in rows for cell in row[2:-1])
    _, sections = report.build(res)
    text = "\n".join(b.text for s in sections for b in s.blocks if b.kind == "p")
    assert "Peers: tilegym = NVIDIA TileGym 1.5.1" in text
    assert "† the timed call includes more than the peer's kernel: tilegym.softmax: includes out.copy_(result)" in text
    env = dict(map(tuple, report.environment_rows(res)[1]))
    assert env["backend tilegym"].startswith("peer (NVIDIA TileGym 1.5.1); tilegym 1.5.1")
    assert any(row[3] == "tilegym (peer)" for row in report.results_table(res)[1])

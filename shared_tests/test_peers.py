"""CPU tests of the optional peers (issue 13 item 3): torch_compile, liger, quack, fa4, sdpa_cudnn, sdpa_flash.

None of Liger-Kernel, Quack or FlashAttention 4 is installed in CI. What runs here:
  * each peer is registered after our backends, labelled a peer, and absent with a reason naming its pip
    package (`tilerosetta list` shows it);
  * the adapters against *fake* modules (torch math on CPU, same call signatures and the argument
    checks the real APIs make: Quack's fp32 layernorm weights and (B, S, H, D) rotary layout, Liger's
    same-layout gate/up, FA4's (B, S, H, D) layout and (out, lse) result) reproduce every conformance
    case of our specs and are timed by the bench in their returning form, with no write into caller memory;
  * torch_compile (backend "eager" here: no compiler in CI) compiles once per shape and records compile_ms;
  * sdpa_flash runs for real on CPU; sdpa_cudnn refuses a CPU case instead of falling back.
The real kernels run only on a GPU (tools/gpu-session.sh PEERS_SMOKE=1).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F

from bench_fakes import fixed_timer, watching_timer
from tilerosetta import backends
from tilerosetta.backends.attention_peers import Fa4Peer, SdpaCudnnPeer, SdpaFlashPeer
from tilerosetta.backends.liger_peer import LigerPeer
from tilerosetta.backends.quack_peer import QuackPeer
from tilerosetta.backends.torch_compile_peer import TorchCompilePeer
from tilerosetta.bench import environment, results, runner
from tilerosetta.commands.list import listing
from tilerosetta.harness import compare, make_case_tensors, reference
from tilerosetta.specs import SPECS

NEW_PEERS = ("torch_compile", "liger", "quack", "fa4", "sdpa_cudnn", "sdpa_flash")
OURS = ("cutile_py", "triton", "tile_cpp", "cutile_rs", "cutile_jl")


# ---- fakes: the real APIs' call signatures and input checks, torch math ------------------------------
def _rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _fake_liger():
    lk = types.ModuleType("liger_kernel")
    lk.IMPL = []
    lk.set_impl = lk.IMPL.append
    f = types.ModuleType("liger_kernel.transformers.functional")
    f.liger_softmax = lambda x: torch.softmax(x.float(), -1).to(x.dtype)
    f.liger_rms_norm = lambda X, W, eps, offset=0.0, casting_mode="llama", in_place=True: _rms(X, W + offset, eps)
    f.liger_layer_norm = lambda X, W, B, eps: F.layer_norm(X.float(), (X.shape[-1],), W.float(), B.float(),
                                                           eps).to(X.dtype)

    def liger_swiglu(a, b):  # the real kernel indexes a and b with the output's strides
        assert a.is_contiguous() and b.is_contiguous() and a.shape == b.shape, "liger_swiglu: a, b layout"
        return (F.silu(a.float()) * b.float()).to(a.dtype)
    f.liger_swiglu = liger_swiglu
    return {"liger_kernel": lk, "liger_kernel.transformers.functional": f}


def _fake_quack():
    q = types.ModuleType("quack")
    rms = types.ModuleType("quack.rmsnorm")
    rot = types.ModuleType("quack.rotary")
    gemm = types.ModuleType("quack.gemm_interface")
    q.softmax = lambda x: torch.softmax(x.float(), -1).to(x.dtype)
    q.rmsnorm = lambda x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6, \
        prenorm=False, weight_offset=0.0: _rms(x, weight, eps)

    def layernorm_fwd(x, weight, bias=None, eps=1e-6, return_rstd=False, return_mean=False):
        assert weight.dtype == torch.float32 and bias.dtype == torch.float32, "Weight must be float32"
        return F.layer_norm(x.float(), (x.shape[-1],), weight, bias, eps).to(x.dtype)
    rms.layernorm_fwd = layernorm_fwd

    def apply_rotary(x, cos, sin, seqlen_offsets=None, cu_seqlens=None, max_seqlen=None, interleaved=False,
                     inplace=False, conjugate=False):
        _, s, _, d = x.shape  # (batch, seqlen, nheads, headdim); cos/sin (seqlen_ro, rotary_dim / 2)
        assert cos.shape == (s, d // 2) and cos.stride(-1) == 1 and not interleaved
        c, si = cos[None, :, None, :].float(), sin[None, :, None, :].float()
        x1, x2 = x[..., : d // 2].float(), x[..., d // 2:].float()
        return torch.cat([x1 * c - x2 * si, x2 * c + x1 * si], -1).to(x.dtype)
    rot.apply_rotary = apply_rotary
    gemm.gemm = lambda A, B, out=None, **kw: (A.float() @ B.float()).to(A.dtype)
    return {"quack": q, "quack.rmsnorm": rms, "quack.rotary": rot, "quack.gemm_interface": gemm}


def _fake_fa4():
    fa = types.ModuleType("flash_attn.cute")

    def flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False, **kw):
        dtype = q.dtype
        # (batch, seqlen, nheads, headdim) in, (out, lse) back; as documented for flash_attn_func: k/v may
        # have fewer heads (H divisible by Hkv), and the causal mask is aligned to the bottom right.
        q, k, v = (t.transpose(1, 2).float() for t in (q, k, v))
        s, sk = q.shape[-2], k.shape[-2]
        mask = torch.ones(s, sk, dtype=torch.bool).tril(diagonal=sk - s) if causal else None
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=softmax_scale,
                                           enable_gqa=q.shape[1] != k.shape[1])
        return o.transpose(1, 2).to(dtype).contiguous(), None
    fa.flash_attn_func = flash_attn_func
    return {"flash_attn": types.ModuleType("flash_attn"), "flash_attn.cute": fa}


FAKES = {LigerPeer: _fake_liger, QuackPeer: _fake_quack, Fa4Peer: _fake_fa4}


@pytest.fixture
def on_cpu(monkeypatch):
    """A peer class -> an instance bound to its fake modules, computing on CPU tensors."""
    def make(cls):
        for name, mod in FAKES[cls]().items():
            monkeypatch.setitem(sys.modules, name, mod)
        peer = cls()
        peer.device_type = "cpu"
        return peer
    return make


def _dtype(spec, peer):
    allowed = peer.dtypes(spec.name)
    return torch.float32 if torch.float32 in allowed else allowed[0]


# ---- registry, labels, absence ---------------------------------------------------------------------------
def test_peers_are_registered_after_our_backends_and_labelled_peers():
    names = list(backends.BACKEND_NAMES)
    assert all(names.index(p) > max(names.index(o) for o in OURS) for p in NEW_PEERS + ("tilegym",))
    for p in NEW_PEERS:
        b = backends.get(p)
        assert getattr(b, "peer", None) and "peer" in b.language, p
        assert environment.backend_info([b])[p].get("peer"), p


@pytest.mark.parametrize("cls, package", [(LigerPeer, "liger-kernel"), (QuackPeer, "quack-kernels"),
                                          (Fa4Peer, "flash-attn-4")])
def test_absent_peer_gives_its_reason_and_every_op_missing(monkeypatch, cls, package):
    monkeypatch.setitem(sys.modules, cls.modules[0], None)  # import of it raises ImportError
    peer = cls()
    ok, reason = peer.is_available()
    assert not ok and "not importable" in reason and package in reason
    assert peer.implementations() == {} and peer.returning() == {}
    assert set(peer.missing().values()) == {reason}
    assert peer.peer_label().endswith("(not installed)")


def test_list_shows_every_peer_with_availability_and_reason():
    table, notes = listing()
    rows = [str(c) for c in table.columns[0]._cells]
    for p in NEW_PEERS:
        assert f"{p} (peer)" in rows
        ok, reason = backends.get(p).is_available()
        assert ok or (p, f"{backends.get(p).state()}: {reason}") in notes


def test_peers_on_cpu_without_gpu_say_so():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    for cls in (TorchCompilePeer, SdpaCudnnPeer, SdpaFlashPeer):
        ok, reason = cls().is_available()
        assert not ok and "no CUDA GPU" in reason


# ---- the glue, on fakes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, ops", [
    (LigerPeer, {"softmax", "rms_norm", "layer_norm", "silu_and_mul"}),
    (QuackPeer, {"softmax", "rms_norm", "layer_norm", "rope", "matmul", "bmm"}),
    (Fa4Peer, {"attention"}),
])
def test_fake_peer_matches_every_conformance_case(on_cpu, cls, ops):
    peer = on_cpu(cls)
    assert peer.is_available()[0]
    assert set(peer.returning()) == ops and set(peer.implementations()) == ops
    assert set(peer.missing()) == set(SPECS) - ops and all(peer.missing().values())
    for op in sorted(ops):
        spec = SPECS[op]
        dtype = _dtype(spec, peer)
        fn = peer.op_returning(op)
        for i, case in enumerate(spec.cases):
            if op == "rope" and case.dims["D"] % 16:
                continue  # Quack needs D % 8 == 0 for rotary_dim = D/2; our spec allows D=2
            inputs, _ = make_case_tensors(spec, case, dtype, "cpu", seed=i)
            got = fn(*inputs.values(), **case.params)
            ok, err, _, msg = compare(spec, dtype, got, reference(spec, case, inputs))
            assert ok, f"{cls.name}.{op} {case.name}: {msg} (rel_err {err:.3g})"
        # the conformance wrapper writes the same into `out`
        inputs, outputs = make_case_tensors(spec, spec.cases[-1], dtype, "cpu", seed=0)
        peer.op(op)(*inputs.values(), *outputs.values(), **spec.cases[-1].params)
        assert compare(spec, dtype, outputs, reference(spec, spec.cases[-1], inputs))[0], op


def test_liger_is_pinned_to_its_triton_kernels(on_cpu):
    peer = on_cpu(LigerPeer)
    assert peer.is_available()[0]
    assert sys.modules["liger_kernel"].IMPL == ["nvidia-triton"]


def test_prepared_inputs_are_made_once_per_tensor_and_redone_after_a_write(on_cpu):
    peer = on_cpu(QuackPeer)
    made = []
    w = torch.randn(8)
    first = peer.prepare("w", w, lambda t: made.append(1) or t.float())
    assert peer.prepare("w", w, lambda t: made.append(1) or t.float()) is first and len(made) == 1
    w.add_(1.0)  # a new version of the same tensor: prepared again
    peer.prepare("w", w, lambda t: made.append(1) or t.float())
    assert len(made) == 2


def _bench_watched(tmp_path, peer, plan):
    watched = []
    timer = watching_timer(watched)
    with results.ResultsWriter(tmp_path / "r.jsonl") as w:
        recs = runner.Runner([peer], w, runner.Settings(cpu=True), timer=timer).run(plan)
    return recs, watched


@pytest.mark.parametrize("cls", [LigerPeer, QuackPeer, Fa4Peer])
def test_fake_peers_are_timed_returning_without_writes_into_caller_memory(on_cpu, tmp_path, cls):
    peer = on_cpu(cls)
    plan = []
    for op in sorted(peer.returning()):
        spec = SPECS[op]
        plan.append((spec, _dtype(spec, peer), spec.cases[-1]))
    recs, watched = _bench_watched(tmp_path, peer, plan)
    assert [(r["op"], r["status"], r["convention"]) for r in recs] == [(s.name, "ok", "returns") for s, _, _ in plan]
    for r, w in zip(recs, watched):
        assert w.ops and w.writes == [], (r["op"], w.writes)


# ---- torch_compile and the SDPA pins ---------------------------------------------------------------------
@pytest.mark.parametrize("op", ["rope", "add_rms_norm"])
def test_torch_compile_compiles_the_specs_baseline_correctly(op):
    """The compiled code is the spec's baseline (a bound method, re-created per shape): right on CPU with
    dynamo's eager backend, one output (rope) and two (add_rms_norm)."""
    from tilerosetta.backends.base import as_outputs

    peer = TorchCompilePeer()
    peer.device_type, peer.compile_backend = "cpu", "eager"
    spec = SPECS[op]
    case = spec.cases[-1]
    inputs, _ = make_case_tensors(spec, case, torch.float32, "cpu", 0)
    outs = as_outputs(spec, "torch_compile", peer.returning()[op](*inputs.values(), **spec.full_params(case.params)))
    good, err, _, problem = compare(spec, torch.float32, outs, reference(spec, case, inputs))
    assert good, problem


def test_torch_compile_compiles_per_shape_and_records_compile_time(tmp_path):
    peer = TorchCompilePeer()
    peer.device_type, peer.compile_backend = "cpu", "eager"
    assert peer.is_available()[0]
    memory_bound = {op for op, spec in SPECS.items() if spec.bound == "memory"}  # the specs' baselines
    assert set(peer.returning()) == memory_bound and {"softmax", "add_rms_norm"} <= memory_bound
    assert "compute-bound" in peer.missing()["matmul"]
    sm, rn = SPECS["softmax"], SPECS["rms_norm"]
    plan = [(sm, torch.float32, sm.cases[4]), (sm, torch.float32, sm.cases[5]), (rn, torch.float32, rn.cases[4])]
    recs, watched = _bench_watched(tmp_path, peer, plan)
    assert [r["status"] for r in recs] == ["ok"] * 3 and all(w.writes == [] for w in watched)
    assert all(r["convention"] == "returns" and r["compile_ms"] > 0 for r in recs)
    timed = {k: fn for k, fn in peer._compiled.items() if k[0] != "vector_add"}  # (+ the launch probe's)
    assert len(timed) == 3  # one specialization per (op, shape); timed calls reuse it
    codes = {id(fn._torchdynamo_orig_callable.__code__) for fn in timed.values()}
    assert len(codes) == 3  # a fresh code object each: dynamo's recompile limit never applies


def test_sdpa_flash_pin_runs_and_cudnn_pin_refuses_a_cpu_case(tmp_path):
    spec = SPECS["attention"]
    flash, cudnn = SdpaFlashPeer(), SdpaCudnnPeer()
    for p in (flash, cudnn):
        p.device_type = "cpu"
        assert p.is_available()[0] and set(p.returning()) == {"attention"}
    assert flash.versions()["sdpa_backend"] == "FLASH_ATTENTION"
    plan = [(spec, torch.bfloat16, spec.cases[4])]
    (ok,), watched = _bench_watched(tmp_path, flash, plan)
    assert ok["status"] == "ok" and ok["convention"] == "returns" and watched[0].writes == []
    assert ok["config"] == {"sdpa_backend": "FLASH_ATTENTION"}
    with results.ResultsWriter(tmp_path / "c.jsonl") as w:
        (bad,) = runner.Runner([cudnn], w, runner.Settings(cpu=True), timer=fixed_timer(1.0)).run(plan)
    assert bad["status"] == "error" and "sdpa_cudnn.attention" in bad["message"]


def test_gpu_smoke_cases_are_valid_for_every_op():
    """tools/peers_smoke.py (run on the GPU node) has one valid case per op."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "peers_smoke.py"
    spec_ = importlib.util.spec_from_file_location("peers_smoke", path)
    smoke = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(smoke)
    assert set(smoke.CASES) <= set(SPECS) and set(NEW_PEERS) <= set(smoke.PEERS)
    for op, spec in SPECS.items():
        case = smoke.case_of(op)
        dtype = spec.dtypes[-1]
        shapes = spec.shapes(case)
        tensors = {n: torch.empty(shapes[n], dtype=dtype) for n in list(spec.inputs) + list(spec.outputs)}
        spec.validate("smoke", "cpu", tensors, case.params, spec.dtypes)


# ---- the real packages, where importable (e.g. PYTHONPATH holding the unpacked gpu-peers bundle) --------
REAL_CALLS = {  # peer class -> (module, function) pairs its adapter calls
    LigerPeer: [("liger_kernel.transformers.functional", f) for f in
                ("liger_softmax", "liger_rms_norm", "liger_layer_norm", "liger_swiglu")],
    QuackPeer: [("quack", "softmax"), ("quack", "rmsnorm"), ("quack.rmsnorm", "layernorm_fwd"),
                ("quack.rotary", "apply_rotary"), ("quack.gemm_interface", "gemm")],
    Fa4Peer: [("flash_attn.cute", "flash_attn_func")],
}


@pytest.mark.parametrize("cls", list(REAL_CALLS))
def test_real_peer_signatures_accept_our_calls(monkeypatch, cls):
    """Every call an adapter makes binds to the installed package's real signature (no kernel runs)."""
    import importlib
    import inspect

    peer = cls()
    if peer._load() is None:
        pytest.skip(f"real {cls.dist} not importable here: {peer._import_error}")
    seen = []
    for mod_name, fn_name in REAL_CALLS[cls]:
        mod = importlib.import_module(mod_name)
        sig = inspect.signature(getattr(mod, fn_name))

        def recorder(*args, _sig=sig, _name=fn_name, **kwargs):
            _sig.bind(*args, **kwargs)  # TypeError if the package's signature changed under us
            seen.append(_name)
            first = args[0]
            if _name == "flash_attn_func":
                return torch.zeros_like(first), None
            if _name == "gemm":
                return first.new_zeros(*first.shape[:-1], args[1].shape[-1])
            return torch.zeros_like(first)
        monkeypatch.setattr(mod, fn_name, recorder)
    peer.device_type = "cpu"
    for op, fn in peer.returning().items():
        spec = SPECS[op]
        case = spec.cases[-1]
        inputs, _ = make_case_tensors(spec, case, spec.dtypes[-1], "cpu", 0, bench=True)
        fn(*inputs.values(), **spec.full_params(case.params))
    assert sorted(set(seen)) == sorted({f for _, f in REAL_CALLS[cls]})


def test_gpu_peers_stage_waits_for_every_part_then_unpacks(tmp_path):
    """tools/gpu-peers-stage.sh: parts checked against MANIFEST, kept outside the checkout, unpacked once all
    arrived (a corrupt part is not accepted), and the PYTHONPATH printed names dsl_packages."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    if not all(shutil.which(t) for t in ("bash", "xz", "tar", "sha256sum", "split")):
        pytest.skip("needs bash, xz, tar, sha256sum, split")
    repo = Path(__file__).resolve().parents[1]
    src = tmp_path / "site"
    (src / "nvidia_cutlass_dsl" / "dsl_packages").mkdir(parents=True)
    (src / "payload.bin").write_bytes(os.urandom(500_000))  # incompressible: several parts
    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(repo / "tools" / "gpu-peers-stage.sh", checkout / "tools")
    peers = checkout / "gpu-peers"
    peers.mkdir()
    sh = lambda cmd, **kw: subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, **kw)  # noqa: E731
    sh(f"tar -C {src} -cf - . | xz -1 > {tmp_path}/p.tar.xz && split -b 200K {tmp_path}/p.tar.xz {peers}/part- "
       f"&& cd {peers} && sha256sum part-* > MANIFEST && echo \"$(sha256sum < {tmp_path}/p.tar.xz | cut -d' ' -f1)"
       f"  peers.tar.xz\" >> MANIFEST", check=True)
    parts = sorted(p.name for p in peers.glob("part-*"))
    assert len(parts) >= 2
    hold = tmp_path / "hold"
    hold.mkdir()
    for p in parts[1:]:
        shutil.move(peers / p, hold / p)  # only the first part has "arrived"
    env = {"PATH": "/usr/bin:/bin", "PEERS_PARTS": str(tmp_path / "parts"), "PEERS_SITE": str(tmp_path / "out")}
    run = lambda: sh(f"{checkout}/tools/gpu-peers-stage.sh", env=env)  # noqa: E731
    r = run()
    assert r.returncode == 3 and f"still missing: {' '.join(parts[1:])}" in r.stdout, r.stdout + r.stderr
    (peers / parts[0]).unlink()  # a later call no longer has it: the kept copy counts
    for p in parts[1:]:
        (peers / p).write_bytes(b"corrupt")
    assert run().returncode == 3
    for p in parts[1:]:
        shutil.move(hold / p, peers / p)
    r = run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "out" / "payload.bin").read_bytes() == (src / "payload.bin").read_bytes()
    out = tmp_path / "out"
    assert f"PYTHONPATH={out}:{out}/nvidia_cutlass_dsl/dsl_packages" in r.stdout

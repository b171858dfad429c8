#!/usr/bin/env python3
"""The best peers' sm_90 kernels compiled on the CPU (no GPU), and the SASS facts of their cubins.

Issue 15 judges our prefill attention against FlashAttention 4 and our GEMMs against cuBLAS, beside which
Quack's GEMM runs in the same benchmark. Their compiled schedules are the comparison for ours
(repro/sass_stats.py's facts: threads, registers, wgmma waits, setmaxnreg, named barriers chosen per
warpgroup, TMA multicast), read the same way as our kernels' cubins instead of assumed from papers.

    tools/peer_sm90_facts.py fa4 [--d 128] [--out DIR]   # FA4's forward, non-causal (the causal build needs
                                                         # the interface's scheduler arguments, not rebuilt here)
    tools/peer_sm90_facts.py quack_gemm [--out DIR]      # Quack's default sm_90 GEMM (what `quack` runs in the
                                                         # bench: gemm(..., tuned=False)), bf16, A K-major

Needs the peers' runtime (flash_attn.cute, quack, cutlass.cute, tvm_ffi, einops): on the GPU node
tools/gpu-peers-stage.sh puts it on PYTHONPATH; here, unpack gpu-peers/ (tools/peers-bundle.sh) into a folder
and put it and its nvidia_cutlass_dsl/dsl_packages on PYTHONPATH (einops from PyPI). FA4's configuration is the
one its interface picks for a bf16 B4 H32 S4096 call on sm_90 (`_tile_size_fwd_sm90`: 128 x 128 at D 128,
192 x 128 at D 64; two K/V stages; 384 threads); Quack's is its sm_90 default (`_default_config_for_cap(9)`).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_fa4(d: int, out: Path) -> str:
    import cutlass.cute as cute
    from cutlass import BFloat16, Float32
    from flash_attn.cute import interface
    from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
    from quack.compile_utils import make_fake_tensor

    cfg = interface._tile_size_fwd_sm90(d, d, False, False)
    kernel = FlashAttentionForwardSm90(
        BFloat16, d, d, 1, is_causal=False, is_local=False, pack_gqa=False, tile_m=cfg.m_block_size,
        tile_n=cfg.n_block_size, num_stages=2, num_threads=384, Q_in_regs=False,
        intra_wg_overlap=cfg.intra_wg_overlap, mma_pv_is_rs=cfg.mma_pv_is_rs)
    b, s, h = 4, 4096, 32
    qkvo = [make_fake_tensor(BFloat16, (b, s, h, d), divisibility=8) for _ in range(4)]  # 16-byte rows
    lse = make_fake_tensor(Float32, (b, h, s), divisibility=4)
    cute.compile(kernel, *qkvo, lse, Float32(d ** -0.5),
                 stream=cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True),
                 options=f"--gpu-arch sm_90a --enable-tvm-ffi --keep-cubin --dump-dir {out}")
    return (f"FA4 sm_90 forward D {d}: tile {cfg.m_block_size} x {cfg.n_block_size}, "
            f"intra_wg_overlap={cfg.intra_wg_overlap} mma_pv_is_rs={cfg.mma_pv_is_rs}")


def compile_quack_gemm() -> str:
    """Into CUTE_DSL_DUMP_DIR (main sets it before cutlass is imported)."""
    from cutlass import BFloat16
    from quack.gemm import _compile_gemm
    from quack.gemm_config import SplitKMode, _default_config_for_cap
    from quack.rounding import RoundingMode

    cfg = _default_config_for_cap(9)
    # Quack's compile entry with fake tensors, arguments in its order: dtypes (a, b, d, c = none), majors (a k,
    # b n, d n), tile, cluster, pingpong, persistent, dynamic scheduler, then no epilogue extras (row / column
    # vectors, alpha, beta, accumulate, concat, varlen, gather, batch permutation), the arch, rounding, seed
    # mode, warps, no scale factors, no split-K, unbatched 2-D operands with B given as (K, N).
    _compile_gemm(BFloat16, BFloat16, BFloat16, None, "k", "n", "n", None, (cfg.tile_m, cfg.tile_n),
                  (cfg.cluster_m, cfg.cluster_n, cfg.cluster_k), cfg.pingpong, True, cfg.is_dynamic_persistent,
                  None, None, 0, 0, 0, False, None, False, False, False, False, False, (9, 0), RoundingMode.RN, 0,
                  cfg.num_warps, None, None, 1, SplitKMode.SERIAL, False, True)
    return (f"Quack sm_90 GEMM: tile {cfg.tile_m} x {cfg.tile_n}, cluster {cfg.cluster_m} x {cfg.cluster_n}, "
            f"pingpong={cfg.pingpong}, persistent, dynamic scheduler={cfg.is_dynamic_persistent}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("kernel", choices=("fa4", "quack_gemm"))
    ap.add_argument("--d", type=int, default=128, choices=(64, 128), help="fa4: head dimension")
    ap.add_argument("--out", default=None, help="where the cubin goes (default /tmp/peer_sm90_KERNEL)")
    args = ap.parse_args()
    out = Path(args.out or f"/tmp/peer_sm90_{args.kernel}")
    # read when cutlass is imported: the target (no device is queried) and, for Quack's own compile call,
    # where its cubin is kept
    os.environ.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="cubin", CUTE_DSL_DUMP_DIR=str(out),
                      QUACK_CACHE_ENABLED="0")  # a cached compile would leave no cubin to read
    module = {"fa4": "flash_attn.cute", "quack_gemm": "quack.gemm"}[args.kernel]
    try:
        __import__(module)
    except Exception as exc:
        print(f"peer_sm90_facts: {module} does not import here ({type(exc).__name__}: {exc}); see this "
              f"script's docstring for the peers' runtime", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.cubin"):
        old.unlink()
    print(compile_fa4(args.d, out) if args.kernel == "fa4" else compile_quack_gemm())
    found = sorted(out.glob("*.cubin"))
    if not found:
        raise SystemExit(f"peer_sm90_facts: the {args.kernel} compile wrote no cubin into {out}")
    sys.path.insert(0, str(ROOT / "repro"))
    from sass_stats import line, stats

    for name, row in stats(str(found[0])).items():
        print(line(args.kernel, row), f"({name[:60]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

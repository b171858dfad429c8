#!/usr/bin/env python3
"""FlashAttention 4's sm_90 forward kernel compiled on the CPU (no GPU), and the SASS facts of its cubin.

The peer our prefill attention is judged against (issue 15) runs this kernel on the H200. Its compiled schedule
is the comparison for ours (repro/sass_stats.py's facts: threads, registers, wgmma waits, setmaxnreg, named
barriers), read the same way as our kernels' cubins instead of assumed from the FA3 paper.

    tools/fa4_sm90_facts.py [--d 128] [--out DIR]     # non-causal (the causal build needs the interface's
                                                     # scheduler arguments, not rebuilt here)

Needs the peers' runtime (flash_attn.cute, cutlass.cute, tvm_ffi, einops): on the GPU node
tools/gpu-peers-stage.sh puts it on PYTHONPATH; here, unpack gpu-peers/ (tools/peers-bundle.sh) into a folder
and put it and its nvidia_cutlass_dsl/dsl_packages on PYTHONPATH (einops from PyPI). The configuration is the
one FA4's interface picks for a bf16 B4 H32 S4096 call on sm_90 (its `_tile_size_fwd_sm90`, read from the
installed package: 128 x 128 at D 128, 192 x 128 at D 64; two K/V stages; 384 threads).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_fa4(d: int, out: Path) -> Path:
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
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.cubin"):
        old.unlink()
    cute.compile(kernel, *qkvo, lse, Float32(d ** -0.5),
                 stream=cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True),
                 options=f"--gpu-arch sm_90a --enable-tvm-ffi --keep-cubin --dump-dir {out}")
    found = sorted(out.glob("*.cubin"))
    if not found:
        raise SystemExit(f"fa4_sm90_facts: cute.compile wrote no cubin into {out}")
    print(f"FA4 sm_90 forward D {d}: tile {cfg.m_block_size} x {cfg.n_block_size}, "
          f"intra_wg_overlap={cfg.intra_wg_overlap} mma_pv_is_rs={cfg.mma_pv_is_rs}")
    return found[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=128, choices=(64, 128))
    ap.add_argument("--out", default="/tmp/fa4_sm90")
    args = ap.parse_args()
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # read when cutlass is imported: no device is queried
    try:
        import flash_attn.cute  # noqa: F401
    except Exception as exc:
        print(f"fa4_sm90_facts: FlashAttention 4 (flash_attn.cute) does not import here ({type(exc).__name__}: "
              f"{exc}); see this script's docstring for the peers' runtime", file=sys.stderr)
        return 2
    cubin = compile_fa4(args.d, Path(args.out))
    sys.path.insert(0, str(ROOT / "repro"))
    from sass_stats import line, stats

    for name, row in stats(str(cubin)).items():
        print(line("fa4_fwd_sm90", row), f"({name[:60]}...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

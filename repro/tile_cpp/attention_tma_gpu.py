#!/usr/bin/env python3
"""Run every variant of attention_tma.cu on a GPU and compare it with torch (fp32 math on the bf16 inputs).

    python3 repro/tile_cpp/attention_tma_gpu.py [--cubins DIR] [--bh 8] [--s 512]

One line per variant: TMA, STAGE, what the stage computes, rel_err = |out - ref| / |ref| (Frobenius), and
ok / WRONG (1e-2, the project's bf16 tolerance). --cubins: a folder of prebuilt
attention_tma_TMA{t}_STAGE{s}.sm_90.cubin (compile.py's names, e.g. built on a CPU with
`compile.py attention_tma.cu TMA=0,1,2 STAGE=0,1,2,3,4`); without it every variant is compiled first. The
kernel is launched with the driver API as the tile_cpp module launches its kernels: grid (blocks, 1, 1),
block (1, 1, 1) (the cubin fixes the threads), no dynamic shared memory.
"""
from __future__ import annotations

import argparse
import ctypes
import math
import sys
from pathlib import Path

import torch

STAGES = {0: "out = q", 1: "out = q k[0:64]^T", 2: "out = q v[0:64]", 3: "attention",
          4: "attention, key tile 0"}
TQ, TK, D = 128, 64, 64
TMAS = (0, 1, 2)  # no TMA, TMA, TMA for all but K


def _ok(cu, r: int, what: str) -> None:
    if r != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(r, ctypes.byref(name))
        raise RuntimeError(f"{what}: CUDA error {r} {name.value.decode() if name.value else ''}")


def launch(cubin: Path, q, k, v, out, scale_log2: float) -> None:
    cu = ctypes.CDLL("libcuda.so.1")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    image = cubin.read_bytes()
    _ok(cu, cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image)), f"cuModuleLoadData({cubin.name})")
    _ok(cu, cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"attn"), "cuModuleGetFunction(attn)")
    BH, S = q.shape[0], q.shape[1]
    vals = [ctypes.c_void_p(t.data_ptr()) for t in (q, k, v, out)]
    vals += [ctypes.c_int(BH), ctypes.c_int(S), ctypes.c_float(scale_log2)]
    args = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(x) for x in vals])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    _ok(cu, cu.cuLaunchKernel(fn, BH * (S // TQ), 1, 1, 1, 1, 1, 0, stream, args, None), "cuLaunchKernel")
    torch.cuda.synchronize()
    cu.cuModuleUnload(mod)


def reference(stage: int, q, k, v, scale: float):
    q, k, v = q.float(), k.float(), v.float()
    if stage == 0:
        return q
    if stage == 1:
        return q @ k[:, :TK].transpose(1, 2)
    if stage == 2:
        return q @ v[:, :TK]
    if stage == 4:
        k, v = k[:, :TK], v[:, :TK]
    return torch.softmax(q @ k.transpose(1, 2) * scale, dim=-1) @ v


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubins", type=Path)
    ap.add_argument("--bh", type=int, default=8)
    ap.add_argument("--s", type=int, default=512, help="a multiple of 128")
    a = ap.parse_args()
    here = Path(__file__).resolve().parent
    if a.cubins is None:
        sys.path.insert(0, str(here))
        from compile import build  # noqa: E402
        a.cubins = Path("/tmp/repro_attention_tma")
        a.cubins.mkdir(parents=True, exist_ok=True)
        for t in TMAS:
            for s in STAGES:
                build(here / "attention_tma.cu", {"TMA": str(t), "STAGE": str(s)}, "sm_90", a.cubins, "cubin")
    torch.manual_seed(0)
    q, k, v = (torch.randn(a.bh, a.s, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    scale = 1 / math.sqrt(D)
    print(f"bf16 BH={a.bh} S={a.s} D={D} TQ={TQ} TK={TK}, {torch.cuda.get_device_name()}")
    for t in TMAS:
        for s, what in STAGES.items():
            cubin = a.cubins / f"attention_tma_TMA{t}_STAGE{s}.sm_90.cubin"
            out = torch.full_like(q, float("nan"))
            try:
                launch(cubin, q, k, v, out, scale * math.log2(math.e))
            except RuntimeError as e:
                print(f"TMA={t} STAGE={s} {what:22s} ERROR {e}")
                continue
            ref = reference(s, q, k, v, scale)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            bad = (out.float() - ref).abs() > 0.05 * ref.abs().max()
            where = ""
            if bad.any():  # which rows / columns of a tile go wrong: the pattern points at the layout
                rows = bad.any(dim=2).any(dim=0).nonzero().flatten().tolist()
                cols = bad.any(dim=1).any(dim=0).nonzero().flatten().tolist()
                where = f" bad rows {rows[:6]}..{len(rows)} bad cols {cols[:8]}..{len(cols)}"
            print(f"TMA={t} STAGE={s} {what:22s} rel_err {err:.3e} {'ok' if err < 1e-2 else 'WRONG'}{where}")


if __name__ == "__main__":
    main()

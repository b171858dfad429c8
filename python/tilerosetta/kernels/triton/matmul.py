"""matmul: out (M, N) = a (M, K) @ b (K, N); also the kernel of bmm (program axis 1 = batch).

One (BLOCK_M, BLOCK_N) tile of out per program, accumulated in fp32 over BLOCK_K slices with tl.dot
(tensor cores: bf16/fp16 inputs, tf32 for fp32 inputs — the spec allows tf32 for fp32, tolerance 1e-3).
Programs are ordered in groups of GROUP_M tile-rows: consecutive programs share the same few A row
panels and sweep B's column panels, so both stay in L2 (grouped ordering).
Tails in M, N and K are masked; masked K lanes load 0 and add nothing to the dot.

TMA (config key, 0 by default): `matmul_tma_kernel` reads A and B and writes out through tensor descriptors
of the (Bt, M, K), (Bt, K, N), (Bt, M, N) views, so the copy engine does the addresses and zero-fills or clips
the tails (no masks) and the loads become TMA transfers into the pipeline's shared-memory stages. Why: the
pointer kernel moves its tiles with cp.async, so all 8 warps issue the loads (12 LDGSTS.128 per thread per
K step on the H200 cubin) and meet at 2 CTA barriers per step (bench/GAPS.md, gap cause 17). Only where a
descriptor may be built (16-byte aligned bases and row strides) and K is not split; else the pointer kernel.
PERSIST (with TMA; 0 by default): PERSIST x SMs programs walk the output tiles (`matmul_tma_persistent_kernel`,
one flattened loop over their tiles' K steps), as Triton's persistent matmul tutorial does on Hopper, where
one program per tile refills its pipeline at every tile.

Split-K (small M, e.g. a decode step's M = 1..64 tokens against a 4096 x 14336 weight): the output tiles
alone are far fewer than the 132 SMs, so a GEMV-like product would stream the weight from a handful of
SMs. The plan (kernels/matmul_split.py) then cuts K into N_SPLIT chunks of K_CHUNK: program (tile, split)
writes its fp32 partial tile to a workspace (N_SPLIT, Bt*M*N) and the splits are summed in split order
and cast: deterministic, no host sync (the workspace comes from torch's caching allocator on the current
stream, so the launch is CUDA-graph capturable). Who sums (config FIXUP):
  1: the tile's last program to arrive. Each program counts its arrival on the tile's counter
     (kernels/arrival_counters.py) after storing its partial; the one that sees N_SPLIT - 1 earlier arrivals
     reads every partial back through L2 and writes the tile: no second launch (a decode step has one per
     split matmul, about 1.5 us each in a CUDA graph).
  0, or no counters to be had: `splitk_reduce_kernel`, a second launch over the whole output. The tile's M shrinks to
the rows there are (>= 16 for tl.dot), so M = 1 loads one 16-row A tile and streams B's (BLOCK_K, BLOCK_N)
tiles, N contiguous (128-bit loads).
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tilerosetta.backends.base import sm_count
from tilerosetta.kernels import arrival_counters
from tilerosetta.kernels.matmul_split import split_plan
from tilerosetta.kernels.triton import Launch, pdl

REDUCE_ELEMENTS = 4096  # fp32 partials one reduce program loads at once (16 KB in flight, 32 per thread)


@triton.jit
def _prefetch_l2(ptrs, mask):
    """prefetch.global.L2 of each pointer's line where mask is set (no register result, nothing waits)."""
    tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.b32 $0, 0; }",
                              "=r,l,r", [ptrs, mask.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _grouped_tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's output tile: (flat tile index, what is left of the program index above the tiles
    (batch entry and K split), tile-row, tile-column)."""
    return _grouped_tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)


@triton.jit
def _grouped_tile_of(linear, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """_grouped_tile of the `linear`-th position of the program order (a persistent program's walk)."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # One flat program axis of (batch entry, K split, output tile), tile fastest: Bt may exceed axis 1's
    # 65535, and neighbouring programs read neighbouring column panels of the same B rows.
    pid = linear % (tiles_m * tiles_n)
    rest = linear // (tiles_m * tiles_n)
    # Grouped ordering: GROUP_M tile-rows are walked column-major inside the group.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)  # the last group may be short
    return pid, rest, first_m + (pid % per_group) % group_rows, (pid % per_group) // group_rows


@triton.jit
def matmul_tma_kernel(a_desc, b_desc, out_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """One output tile as in matmul_kernel (unsplit), through the descriptors of the 3-D views."""
    _pid, batch, pid_m, pid_n = _grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm, rn = pid_m * BLOCK_M, pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):  # past K the descriptors read zeros: no K mask either
        a = a_desc.load([batch, rm, k]).reshape(BLOCK_M, BLOCK_K)
        b = b_desc.load([batch, k, rn]).reshape(BLOCK_K, BLOCK_N)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    out_desc.store([batch, rm, rn], acc.to(out_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))  # clipped at M, N


@triton.jit
def matmul_tma_persistent_kernel(a_desc, b_desc, out_desc, M, N, K, TILES, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                                 INPUT_PRECISION: tl.constexpr):
    """matmul_tma_kernel's TILES output tiles (all batch entries) walked by num_programs programs (config
    PERSIST), in the same grouped order. flatten: the tile loop and its K loop become one software-pipelined
    loop, so the loads of a program's next tile start while this tile's last K steps and its store run."""
    for t in tl.range(tl.program_id(0), TILES, tl.num_programs(0), flatten=True):
        _pid, batch, pid_m, pid_n = _grouped_tile_of(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rm, rn = pid_m * BLOCK_M, pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([batch, rm, k]).reshape(BLOCK_M, BLOCK_K)
            b = b_desc.load([batch, k, rn]).reshape(BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        out_desc.store([batch, rm, rn], acc.to(out_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))


@triton.jit
def matmul_kernel(a_ptr, b_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K, stride_ab, stride_bb, stride_ob, stride_ws,
                  N_SPLIT, K_CHUNK, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, INPUT_PRECISION: tl.constexpr, SPLIT: tl.constexpr, FIXUP: tl.constexpr,
                  PREFETCH_ROWS: tl.constexpr = 0, PREFETCH_LINES: tl.constexpr = 1, PDL: tl.constexpr = False):
    pid, rest, pid_m, pid_n = _grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)

    if SPLIT:
        split = rest % N_SPLIT
        batch = (rest // N_SPLIT).to(tl.int64)
        lo = split * K_CHUNK
        hi = min(K, lo + K_CHUNK)
    else:  # no split-index arithmetic at all: the large-M kernel stays as lean as before split-K existed
        split = 0
        batch = rest.to(tl.int64)
        lo = 0
        hi = K
    if PDL and PREFETCH_ROWS > 0:
        # Before waiting for the previous kernel: B (a decode step's weights) is not written by it, so the
        # first PREFETCH_ROWS rows of this program's B panel are pulled into L2 while it finishes.
        pf_rows = lo + tl.arange(0, PREFETCH_ROWS)
        pf_cols = pid_n * BLOCK_N + tl.arange(0, PREFETCH_LINES) * (BLOCK_N // PREFETCH_LINES)
        pf_ptrs = b_ptr + batch * stride_bb + pf_rows[:, None].to(tl.int64) * N + pf_cols[None, :]
        _prefetch_l2(pf_ptrs, (pf_rows[:, None] < hi) & (pf_cols[None, :] < N))
    pdl.enter(PDL)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + rm[:, None].to(tl.int64) * K + (lo + rk[None, :])
    b_ptrs = b_ptr + batch * stride_bb + (lo + rk[:, None]).to(tl.int64) * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(lo, hi, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (k + rk[None, :] < hi), other=0.0)
        b = tl.load(b_ptrs, mask=(k + rk[:, None] < hi) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT:
        # Partial tile of this split: ws[split, batch, m, n], fp32 (the reduce casts once, at the end).
        ws_ptrs = (ws_ptr + split.to(tl.int64) * stride_ws + batch * stride_ob + rm[:, None].to(tl.int64) * N
                   + rn[None, :])
        tl.store(ws_ptrs, acc, mask=mask)
        if FIXUP:
            tl.debug_barrier()  # every thread's part of the partial is stored before the arrival counts
            ticket = cnt_ptr + batch * (tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)) + pid
            if tl.atomic_add(ticket, 1, sem="acq_rel", scope="gpu") == N_SPLIT - 1:
                # The last to arrive: all N_SPLIT partials are stored. Sum them in split order (the same
                # result whichever program arrives last), loaded through L2 (.cg: no stale L1 line).
                part_ptrs = ws_ptr + batch * stride_ob + rm[:, None].to(tl.int64) * N + rn[None, :]
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for _ in range(0, N_SPLIT):
                    total += tl.load(part_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
                    part_ptrs += stride_ws
                out_ptrs = out_ptr + batch * stride_ob + rm[:, None].to(tl.int64) * N + rn[None, :]
                tl.store(out_ptrs, total.to(out_ptr.dtype.element_ty), mask=mask)
                tl.store(ticket, 0)  # zero again for the next launch that uses these counters
    else:
        out_ptrs = out_ptr + batch * stride_ob + rm[:, None].to(tl.int64) * N + rn[None, :]
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def splitk_reduce_kernel(ws_ptr, out_ptr, TOTAL, N_SPLIT, BLOCK: tl.constexpr, SPLIT_P2: tl.constexpr,
                         PDL: tl.constexpr = False):
    """out[i] = sum over the splits of ws[s, i], for BLOCK flat elements of out per program. All splits are
    loaded at once (one (SPLIT_P2, BLOCK) tile: every load in flight together) and summed by tl.sum, whose
    order is fixed by the compiled kernel: the same result on every run."""
    pdl.enter(PDL)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    s = tl.arange(0, SPLIT_P2)
    mask = (s[:, None] < N_SPLIT) & (offs[None, :] < TOTAL)
    part = tl.load(ws_ptr + s[:, None].to(tl.int64) * TOTAL + offs[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.sum(part, axis=0).to(out_ptr.dtype.element_ty), mask=offs < TOTAL)


def prepare_batched(a, b, out, batch, m, n, k, cfg):
    """The launches over `batch` independent (m, k) @ (k, n) products laid out contiguously: the tiled
    kernel alone, or (split-K) the tiled kernel into an fp32 workspace and the reduce."""
    # fp32 inputs use tf32 tensor cores (allowed by the spec); fp16/bf16 inputs are exact products anyway.
    precision = "tf32" if a.dtype.itemsize == 4 else "ieee"
    # The tile shrinks to the rows there are (decode: 1..64 tokens); tl.dot needs >= 16.
    bm = max(16, min(cfg["BLOCK_M"], triton.next_power_of_2(m)))
    bn, bk = cfg["BLOCK_N"], cfg["BLOCK_K"]
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn) * batch
    sms = sm_count(device=a.device)
    n_split, chunk = split_plan(tiles, m, k, bk, a.dtype.itemsize, cfg["SPLIT_K"], sms)
    split = n_split > 1
    if cfg.get("TMA", 0) and not split and all(_describable(t) for t in (a, b, out)):
        descs = [TensorDescriptor.from_tensor(t.view(batch, rows, cols), [1, br, bc])
                 for t, rows, cols, br, bc in ((a, m, k, bm, bk), (b, k, n, bk, bn), (out, m, n, bm, bn))]
        consts = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": cfg["GROUP_M"], "INPUT_PRECISION": precision}
        opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
        programs = cfg.get("PERSIST", 0) * sms
        if 0 < programs < tiles:  # PERSIST: that many programs walk the tiles (none is left without one)
            return [Launch(matmul_tma_persistent_kernel, (programs,), (*descs, m, n, k, tiles), consts, opts)]
        return [Launch(matmul_tma_kernel, (tiles,), (*descs, m, n, k), consts, opts)]
    total = batch * m * n
    ws = torch.empty((n_split, total), dtype=torch.float32, device=a.device) if split else out
    counters = arrival_counters.region(a.device, tiles) if split and cfg.get("FIXUP", 0) else None
    fixup = counters is not None
    # PREFETCH: B rows (in BLOCK_K tiles) each program pulls into L2 before it waits for the previous kernel
    # (PDL only); one prefetch per 128-byte line of the program's BLOCK_N columns.
    pf = cfg.get("PREFETCH", 0)
    pf_rows = min(triton.next_power_of_2(pf * bk), triton.next_power_of_2(chunk)) if pf else 0
    pf_lines = max(1, bn * b.dtype.itemsize // 128)
    launches = [Launch(matmul_kernel, (tiles * n_split,),
                       (a, b, out, ws, counters if fixup else out, m, n, k, m * k, k * n, m * n, total, n_split,
                        chunk),
                       {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": cfg["GROUP_M"],
                        "INPUT_PRECISION": precision, "SPLIT": split, "FIXUP": fixup, "PREFETCH_ROWS": pf_rows,
                        "PREFETCH_LINES": pf_lines},
                       {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})]
    if split and not fixup:
        sp2 = triton.next_power_of_2(n_split)
        block = max(32, REDUCE_ELEMENTS // sp2)  # about REDUCE_ELEMENTS partials per program
        launches.append(Launch(splitk_reduce_kernel, (triton.cdiv(total, block),), (ws, out, total, n_split),
                               {"BLOCK": block, "SPLIT_P2": sp2}, {"num_warps": 4}))
    return launches


def _describable(t):
    """Whether a TMA descriptor may cover t: 16-byte aligned base and row stride (t is contiguous)."""
    return t.data_ptr() % 16 == 0 and (t.shape[-1] * t.element_size()) % 16 == 0


def prepare(a, b, out, cfg):
    m, k = a.shape
    return prepare_batched(a, b, out, 1, m, out.shape[1], k, cfg)

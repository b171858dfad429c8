"""matmul: out (M, N) = a (M, K) @ b (K, N); also the kernel of bmm (program axis 1 = batch).

One (BLOCK_M, BLOCK_N) tile of out per program, accumulated in fp32 over BLOCK_K slices with tl.dot
(tensor cores: bf16/fp16 inputs, tf32 for fp32 inputs — the spec allows tf32 for fp32, tolerance 1e-3).
Programs are ordered in groups of GROUP_M tile-rows: consecutive programs share the same few A row
panels and sweep B's column panels, so both stay in L2 (grouped ordering).
Tails in M, N and K are masked; masked K lanes load 0 and add nothing to the dot.
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import Launch


@triton.jit
def matmul_kernel(a_ptr, b_ptr, out_ptr, M, N, K, stride_ab, stride_bb, stride_ob,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  INPUT_PRECISION: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # One flat program axis of (batch entry, output tile), tile fastest: Bt may exceed axis 1's 65535.
    batch = (tl.program_id(0) // (tiles_m * tiles_n)).to(tl.int64)
    pid = tl.program_id(0) % (tiles_m * tiles_n)
    # Grouped ordering: GROUP_M tile-rows are walked column-major inside the group.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)  # the last group may be short
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + rm[:, None].to(tl.int64) * K + rk[None, :]
    b_ptrs = b_ptr + batch * stride_bb + rk[:, None].to(tl.int64) * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (k + rk[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(k + rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    out_ptrs = out_ptr + batch * stride_ob + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def prepare_batched(a, b, out, batch, m, n, k, cfg):
    """The launch over `batch` independent (m, k) @ (k, n) products laid out contiguously."""
    # fp32 inputs use tf32 tensor cores (allowed by the spec); fp16/bf16 inputs are exact products anyway.
    precision = "tf32" if a.dtype.itemsize == 4 else "ieee"
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]) * batch,)
    return [Launch(matmul_kernel, grid, (a, b, out, m, n, k, m * k, k * n, m * n),
                   {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "BLOCK_K": cfg["BLOCK_K"],
                    "GROUP_M": cfg["GROUP_M"], "INPUT_PRECISION": precision},
                   {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})]


def prepare(a, b, out, cfg):
    m, k = a.shape
    return prepare_batched(a, b, out, 1, m, out.shape[1], k, cfg)

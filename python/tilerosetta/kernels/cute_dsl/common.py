"""What every CuTe DSL kernel module shares: dtypes, the 128-bit vector width, fake (symbolic) tensors
for ahead-of-time compiles, the compile call itself, and the row reductions of the row ops.

Compiled functions take torch tensors directly through TVM-FFI (`--enable-tvm-ffi`): the call converts
them without a DLPack round trip per argument, checks them against the compiled layout (dtype, rank,
divisibility, alignment) and launches on TVM-FFI's environment stream, which is torch's current stream
(the fake stream is compiled with use_tvm_ffi_env_stream=True, so no stream argument is passed).
"""

from __future__ import annotations

import torch

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

DTYPES = {torch.float32: cutlass.Float32, torch.float16: cutlass.Float16, torch.bfloat16: cutlass.BFloat16}
VECTOR_BYTES = 16  # one 128-bit global load / store (ld.global.v4.b32)


def cute_dtype(dtype: torch.dtype):
    return DTYPES[dtype]


def vec_width(dtype: torch.dtype, variant: str) -> int:
    """Elements per vector access: 128 bits in the "vec" variant, one element in the "scalar" one."""
    return VECTOR_BYTES // torch.empty((), dtype=dtype).element_size() if variant == "vec" else 1


def fake(dtype: torch.dtype, shape: tuple, vec: int):
    """A row-major fake tensor: `shape` may hold ints and cute.sym_int()s (one per runtime extent). In the
    vec variant the innermost extent is declared divisible by `vec` and the base 16-byte aligned, which is
    what lets the compiler emit 128-bit accesses; TVM-FFI refuses a tensor that breaks either."""
    order = tuple(reversed(range(len(shape))))  # stride order: last mode fastest (row-major)
    align = VECTOR_BYTES if vec > 1 else torch.empty((), dtype=dtype).element_size()
    return make_fake_compact_tensor(cute_dtype(dtype), shape, stride_order=order, assumed_align=align)


def sym(vec: int = 1):
    """One runtime extent, divisible by `vec`."""
    return cute.sym_int(divisibility=vec)


def stream():
    """The compiled function's stream argument: TVM-FFI's environment stream (torch's current stream)."""
    return make_fake_stream(use_tvm_ffi_env_stream=True)


def compile_for(fn, args, arch: str, keep_dir: str | None = None):
    """cute.compile for `arch` (e.g. "sm_90a"); needs no GPU: the device code is compiled to PTX and a cubin
    here, the module is only loaded on the first launch. keep_dir: also write the PTX and cubin there
    (the result's .artifacts.PTX is then the PTX text; the cubin is KERNEL.ARCH.cubin in keep_dir)."""
    keep = f" --keep-ptx --keep-cubin --dump-dir {keep_dir}" if keep_dir else ""
    return cute.compile(fn, *args, options=f"--gpu-arch {arch} --enable-tvm-ffi{keep}")


@cute.jit
def row_reduce(val: cutlass.Float32, op: cutlass.Constexpr, scratch: cute.Tensor, row: cutlass.Int32,
               warp_in_row: cutlass.Int32, lane: cutlass.Int32, warps_per_row: cutlass.Constexpr):
    """Reduce `val` over the threads of one row: butterfly shuffles inside each warp, then (several warps
    per row) each warp's result through shared memory `scratch` (rows, warps_per_row). Every thread of
    the CTA must call it (it synchronises the CTA when warps_per_row > 1); every thread gets the result."""
    val = cute.arch.warp_reduction(val, op)
    if cutlass.const_expr(warps_per_row > 1):
        if lane == 0:
            scratch[row, warp_in_row] = val
        cute.arch.sync_threads()
        val = scratch[row, 0]
        for w in cutlass.range_constexpr(1, warps_per_row):
            val = op(val, scratch[row, w])
        cute.arch.sync_threads()  # scratch is free again for the next reduction
    return val


@cute.jit
def row_slot(warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr, m: cutlass.Int32):
    """Where this thread works in a row op: CTA b holds `rows` rows, each shared by warps_per_row warps.
    Returns (row, row in the CTA, thread in the row, warp in the row, lane, valid). A CTA's last rows
    may lie past m: they redo row m-1 (so every thread reaches the CTA-wide barriers) and `valid` is
    False, which the caller uses to skip the store."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    per_row = 32 * warps_per_row
    slot = tidx // per_row
    t = tidx % per_row
    row = bidx * rows + slot
    valid = row < m
    if not valid:
        row = m - 1
    return row, slot, t, t // 32, tidx % 32, valid


def row_scratch(rows: int, warps_per_row: int):
    """Shared memory for row_reduce: one fp32 per (row, warp)."""
    smem = cutlass.memory.SmemAllocator()
    return smem.allocate_tensor(cutlass.Float32, cute.make_layout((rows, warps_per_row), stride=(warps_per_row, 1)),
                                byte_alignment=16)


def row_grid(m, rows: int):
    return [cute.ceil_div(m, rows), 1, 1]


def as_row(t: cute.Tensor) -> cute.Tensor:
    """A 1-D tensor (N,) viewed as one row (1, N), so its vectors have the (1, vec) shape of a row's."""
    return cute.make_tensor(t.iterator, cute.make_layout((1, cute.size(t)), stride=(0, 1)))


@cute.jit
def load_row(g: cute.Tensor, row: cutlass.Int32, t: cutlass.Int32, step: cutlass.Constexpr,
             chunks: cutlass.Constexpr, vec: cutlass.Constexpr, n_vectors: cutlass.Int32, fill):
    """A thread's `chunks` vectors of row `row` of g (its vectors t, t + step, ...) in a register tensor of
    g's dtype (raw[None, k] is vector k); vectors past the row end read `fill`. Only the load sits in each
    bounds branch and nothing reads it before all are issued (predicated LDGs back to back): a branch that
    also converted its vector waited there for the load, so a thread's loads went to memory one after
    another (cute_dsl softmax 4096x16384 read 61-64% of copy that way)."""
    raw = cute.make_rmem_tensor(cute.make_layout(((1, vec), chunks)), g.element_type)
    raw.fill(fill)
    for k in cutlass.range_constexpr(chunks):
        j = t + k * step
        if j < n_vectors:
            raw[None, k].store(g[(None, (row, j))].load())
    return raw


def row_registers(chunks: int, vec: int):
    """A thread's share of a row in registers: `chunks` vectors of shape (1, vec), fp32; regs[None, k] is
    the vector it reads at column vector t + k * (threads per row)."""
    return cute.make_rmem_tensor(cute.make_layout(((1, vec), chunks)), cutlass.Float32)

// The one table of instantiated tile kernels, shared by the kernel sources (which instantiate them) and
// the pybind11 module (which lists, validates and launches them). Plain preprocessor only: it is read
// both by nvcc in tile mode and by the host C++ compiler.
//
// Each entry is X(op, dtype, CType, template args...). The kernel symbol is extern "C"
// `<op>_<dtype>_<arg1>_<arg2>...` so the module finds it by name with cuModuleGetFunction. The meaning
// of the arguments per op is TR_CONFIG_KEYS below. To try another tile size, add a line here; the
// Python adapter's config_space() lists whatever is instantiated. An op of a family (OpSpec.family) has
// no line here: it takes its family's table (the generated tr_families.h, included at the end).
#pragma once

// clang-format off
// vector_add: TILE (elements per block)
#define TR_VECTOR_ADD_KERNELS(X) \
  X(vector_add, fp32, float, 1024) X(vector_add, fp32, float, 4096) \
  X(vector_add, fp16, __half, 1024) X(vector_add, fp16, __half, 4096) \
  X(vector_add, bf16, __nv_bfloat16, 1024) X(vector_add, bf16, __nv_bfloat16, 4096)

// transpose: TM x TN input tile (16-bit 128 x 128: the tile TileGym's cuTile transpose takes for M, N >= 4096)
#define TR_TRANSPOSE_KERNELS(X) \
  X(transpose, fp32, float, 32, 32) X(transpose, fp32, float, 64, 64) \
  X(transpose, fp16, __half, 64, 64) X(transpose, fp16, __half, 128, 64) X(transpose, fp16, __half, 128, 128) \
  X(transpose, bf16, __nv_bfloat16, 64, 64) X(transpose, bf16, __nv_bfloat16, 128, 64) \
  X(transpose, bf16, __nv_bfloat16, 128, 128)

// The "rows" family (OpSpec.family = "rows": softmax and the norms): TM rows per block, TN
// columns per chunk (looped over N; a row with N <= TN is loaded once), OCC the occupancy hint (see
// common.cuh: without it 255 registers, 1 CTA/SM), W the worker-warps hint (0: the compiler's 4). The adapter
// takes the smallest single-chunk TN >= N up to 16384, else the looped 1 x 1024. Each member's
// TR_<OP>_KERNELS is generated (tr_families.h).
#define TR_ROW_KERNELS_T(X, op, dt, CT) \
  X(op, dt, CT, 1, 1024, 4, 0) X(op, dt, CT, 4, 512, 4, 0) X(op, dt, CT, 1, 4096, 4, 0) \
  X(op, dt, CT, 1, 8192, 4, 0) X(op, dt, CT, 1, 8192, 2, 0) X(op, dt, CT, 1, 16384, 2, 0)
// 16-bit also two rows per block at 4096 and 8192: softmax's loads are then issued back to back (sm_90 SASS:
// 8 / 16 LDG.E.128 in one batch; one row per block puts each in its own bounds branch region; rms_norm's
// stay in regions), and layer_norm's 8192 row fits 215 registers without the spills of 1 x 8192 OCC 4.
// H200: the tuned tile of softmax 32768x4096 and add_rms_norm 16384x4096 (bench/GAPS.md).
// And 8 worker warps (256 threads) on the wide rows: a 16384 row per 128 threads takes 255 registers, 2 CTAs
// and 8 warps per SM, each warp's exp and reductions over 128 values in series; with W 8 and OCC 3 it is 80
// registers, no spills, 3 CTAs and 24 warps per SM (sm_90 SASS). At 8192 columns 8 warps take OCC 4: 64
// registers, no spills, 32 warps per SM (layer_norm sm_90 SASS: 640 instructions where W 0 OCC 4 has 1048); the
// slot held OCC 3 (72 registers), which the H200 sweep of 2026-12-03 measured slower than W 0 (42.8 vs 36.0 us);
// OCC 4 measured level with W 0 at 4096x8192 (layer_norm 36.3 vs 36.0 us, rms_norm 34.5 vs 34.5: inside the spreads).
// And 1 x 4096 at OCC 8: 8 rows per SM where OCC 4 leaves softmax 80 registers (6 CTAs) and layer_norm 112 (4),
// at 64 registers without spills (sm_90 SASS). It took the slot of 2 x 4096 W 8, which the H200 sweeps of
// 2026-12-03 measured slower than the W 0 tiles (softmax 32768x4096 157 vs 134 us, layer_norm 16384x4096 80 vs 78).
#define TR_ROW_KERNELS_16(X, op, dt, CT) \
  TR_ROW_KERNELS_T(X, op, dt, CT) X(op, dt, CT, 2, 4096, 4, 0) X(op, dt, CT, 2, 8192, 2, 0) \
  X(op, dt, CT, 1, 16384, 3, 8) X(op, dt, CT, 1, 8192, 4, 8) X(op, dt, CT, 1, 4096, 8, 0)
// The multi-chunk loop (`<name>_loop`, launched for rows wider than TN) is compiled for chunks of at most
// TR_ROW_LOOP_MAX_TN columns; wider configs hold only their one-tile entries (a row of N <= TN). A 8192- or
// 16384-column chunk loop cost most of the row ops' compile time (tileiras 13.4, sm_90 rms_norm: 184 s with
// them, 75 s without, on the 2-core CI machine) and nothing picks it: the adapter loops wider rows in
// 1 x 1024 chunks, and the H200 sweeps never chose a chunk over 4096 (bench/GAPS.md). The module refuses
// N > TN > TR_ROW_LOOP_MAX_TN naming the kernel (ops.cpp, row_entry). TR_ROW_LOOP_<TN> gives each TN of the
// table its answer for the preprocessor (common.cuh, TR_ROW_ENTRIES, checks it against the bound): a new TN
// needs its line here.
#define TR_ROW_LOOP_MAX_TN 4096
#define TR_ROW_LOOP_512 1
#define TR_ROW_LOOP_1024 1
#define TR_ROW_LOOP_4096 1
#define TR_ROW_LOOP_8192 0
#define TR_ROW_LOOP_16384 0
#define TR_FAMILY_ROWS_KERNELS(X, op) \
  TR_ROW_KERNELS_T(X, op, fp32, float) TR_ROW_KERNELS_16(X, op, fp16, __half) \
  TR_ROW_KERNELS_16(X, op, bf16, __nv_bfloat16)
#define TR_FAMILY_ROWS_CONFIG_KEYS "TM", "TN", "OCC", "W"

// silu_and_mul: TM x TN output tile; AX 1 = exp2 with flushed subnormals instead of exp (kernels/silu_and_mul.cu)
#define TR_SILU_AND_MUL_KERNELS(X) \
  X(silu_and_mul, fp32, float, 4, 256, 0) X(silu_and_mul, fp32, float, 1, 1024, 0) \
  TR_SILU_AND_MUL_KERNELS_16(X, fp16, __half) TR_SILU_AND_MUL_KERNELS_16(X, bf16, __nv_bfloat16)
// 16-bit also two-row tiles: sm_90 SASS (tileiras 13.4) of 2 x 1024 and 2 x 2048 issues 4 and 8 predicated
// LDG.E.128 back to back, where 4 x 256 and 1 x 1024 put each load in its own bounds branch region (two rows
// and no __restrict__ is what it takes: repro/tile_cpp/bounds_checked_loads.cu ROWS=2 RESTRICT=0). H200:
// 2 x 2048 is the tuned tile (69% -> 95.6% of copy, bench/GAPS.md).
#define TR_SILU_AND_MUL_KERNELS_16(X, dt, CT) \
  X(silu_and_mul, dt, CT, 4, 256, 0) X(silu_and_mul, dt, CT, 1, 1024, 0) X(silu_and_mul, dt, CT, 2, 1024, 0) \
  X(silu_and_mul, dt, CT, 2, 2048, 0) X(silu_and_mul, dt, CT, 2, 1024, 1) X(silu_and_mul, dt, CT, 2, 2048, 1)

// rope: TS positions per block, TD columns of each half per chunk (looped over D/2), OCC occupancy hint
#define TR_ROPE_KERNELS_T(X, dt, CT) \
  X(rope, dt, CT, 16, 64, 4) X(rope, dt, CT, 32, 64, 4) X(rope, dt, CT, 32, 64, 8)
#define TR_ROPE_KERNELS(X) \
  TR_ROPE_KERNELS_T(X, fp32, float) TR_ROPE_KERNELS_T(X, fp16, __half) TR_ROPE_KERNELS_T(X, bf16, __nv_bfloat16)

// matmul, bmm: TM x TN output tile, TK reduction chunk, W the num_worker_warps_per_cta hint (0 = the
// compiler's choice; 128 x 256 needs 8 or its accumulator spills), P persistent blocks per SM (0: a block per
// tile; gemm.cuh). fp32 runs as tf32 (HGMMA .TF32). P 1 only on the 16-bit 128 x 256 tile (a sweep option).
#define TR_GEMM_KERNELS_16(X, op, dt, CT) \
  X(op, dt, CT, 64, 64, 64, 0, 0) X(op, dt, CT, 128, 128, 64, 0, 0) X(op, dt, CT, 128, 256, 64, 8, 0) \
  X(op, dt, CT, 128, 128, 64, 8, 0) X(op, dt, CT, 128, 256, 64, 8, 1)
#define TR_GEMM_KERNELS(X, op) \
  X(op, fp32, float, 64, 64, 32, 0, 0) X(op, fp32, float, 128, 128, 32, 0, 0) \
  TR_GEMM_KERNELS_16(X, op, fp16, __half) TR_GEMM_KERNELS_16(X, op, bf16, __nv_bfloat16)
// Decode (matmul at M <= 16: the weight streamed once): one 16-row tile of A, narrow TN so that N / TN
// blocks cover the SMs (N 4096 / 32 = 128), a deep TK per load. 16 x 64 x 128 and 16 x 128 x 256: the tiles the
// H200 sweep at M=1 chose for cuTile Python and cuTile-rs (N 4096 and 14336; bench/results/decode/).
#define TR_MATMUL_DECODE_KERNELS_16(X, dt, CT) X(matmul, dt, CT, 16, 32, 256, 0, 0) \
  X(matmul, dt, CT, 16, 64, 256, 0, 0) X(matmul, dt, CT, 16, 64, 128, 0, 0) X(matmul, dt, CT, 16, 128, 256, 0, 0)
#define TR_MATMUL_KERNELS(X)                                                                       \
  TR_GEMM_KERNELS(X, matmul)                                                                       \
  TR_MATMUL_DECODE_KERNELS_16(X, fp16, __half) TR_MATMUL_DECODE_KERNELS_16(X, bf16, __nv_bfloat16)
#define TR_BMM_KERNELS(X) TR_GEMM_KERNELS(X, bmm)

// attention: D (head dim, exact), TQ query rows per block, TK keys per chunk, W worker-warps hint, OCC the
// occupancy hint (0: none, common.cuh).
// One config per head dim (~20 s of nvcc each per arch, and CI compiles four archs on two cores). D 64 takes
// W 8: its _a16 body (128-bit loads, attention.cu) spills with the default (255 regs, 152 B of stack on
// sm_90) and holds in 144 registers with two consumer warpgroups; D 128 does not spill with the default.
// TQ 16 (decode: a packed group of G = H / Hkv <= 16 query rows, kernels/attention_split.py): a 128-row tile
// would spend eight times the MMA and exp2 work of its real rows on padding; TK 128 halves its key steps.
// D 128 TQ 16 also at OCC 2: without a hint the decode tile takes 255 registers and one CTA per SM keeps a
// 153 KB K/V ring; at OCC 2 it is 128 registers, no spills and a 110 KB ring, two CTAs per SM (sm_90 SASS).
// D 128 TQ 128 also at OCC 2 (prefill, a sweep option): 256 threads, 128 registers with 72 B of stack (21 STL),
// 108 KB, two CTAs per SM, where the default takes 384 threads, 168 registers, 126 KB and one; cutile_rs's
// fastest prefill tile is the same trade (128 x 64 at OCC 2, 40 B of stack: 0.80-0.84x FA4, H200 2026-12-07).
#define TR_ATTENTION_KERNELS_T(X, dt, CT)                                                \
  X(attention, dt, CT, 64, 128, 64, 8, 0) X(attention, dt, CT, 128, 128, 64, 0, 0)       \
  X(attention, dt, CT, 64, 16, 128, 0, 0) X(attention, dt, CT, 128, 16, 128, 0, 0)      \
  X(attention, dt, CT, 128, 16, 128, 0, 2) X(attention, dt, CT, 128, 128, 64, 0, 2)
#define TR_ATTENTION_KERNELS(X) TR_ATTENTION_KERNELS_T(X, fp16, __half) TR_ATTENTION_KERNELS_T(X, bf16, __nv_bfloat16)
// clang-format on

// The names of the template arguments, per op, in order (used by the module to report configs); a family
// op's come with its family (tr_families.h).
#define TR_CONFIG_KEYS(Y) \
  Y(vector_add, "TILE") Y(transpose, "TM", "TN") Y(silu_and_mul, "TM", "TN", "AX") Y(rope, "TS", "TD", "OCC") \
  Y(matmul, "TM", "TN", "TK", "W", "P") Y(bmm, "TM", "TN", "TK", "W", "P") Y(attention, "D", "TQ", "TK", "W", "OCC") \
  TR_FAMILY_OPS_CONFIG_KEYS(Y)

// Generated from the specs (python -m tilerosetta.codegen): the family ops' kernel lists and key names.
#include "../generated/tr_families.h"

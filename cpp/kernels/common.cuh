// Shared includes and small helpers for the tile kernels (compiled by nvcc -tilecubin --tile-only).
//
// Conventions used by every kernel here:
//  * one tile block per output tile; the grid is sized by the module (cpp/src/ops.cpp);
//  * tensors are wrapped in tensor_span with dynamic extents, so partition_view knows the true bounds;
//  * every load is load_masked (out-of-bounds elements read as padding) and every store is store_masked
//    (out-of-bounds elements are dropped), so sizes need not be multiples of the tile: tails, M = 1 and
//    primes are handled by the view, not by special cases;
//  * arithmetic is done in fp32 (element_cast on load, cast back to the storage type on store);
//  * every kernel is instantiated twice (TR_ENTRY below): a generic body, and an `_a16` body for calls
//    whose pointers are 16-byte aligned and whose row strides are multiples of 16 bytes (the module
//    checks this per call, see Plan::aligned in src/ops.cpp). Only with those facts stated to the
//    compiler (ct::assume_aligned / ct::assume_divisible) does tileiras use TMA (UTMALDG/UTMASTG) or
//    128-bit LDG/STG; without them every element is a separate 2- or 4-byte load, which made the
//    first version of these kernels 2-40x slower than cuTile Python.
#pragma once
#include <cuda_tile.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_tf32.h>

#include "tr_kernels.h"

namespace ct = cuda::tiles;
using namespace ct::literals;

namespace tr {

template <int R, int C>
using ftile = ct::tile<float, ct::shape<R, C>>;

// Row-major (rows, cols) view of memory whose rows are `ld` elements apart (ld >= cols): used for the
// halves of silu_and_mul's input and rope's head dim, which are column slices of a wider row.
template <typename T>
__tile__ inline auto strided_rows(T* base, int rows, int cols, int ld) {
  using E = ct::extents<int, ct::dynamic_extent, ct::dynamic_extent>;
  using S = ct::strides<int, ct::dynamic_stride, 1>;
  using M = ct::layout_strided<S>::mapping<E>;
  return ct::tensor_span<T, E, ct::layout_strided<S>>{base, M{E{rows, cols}, S{ld}}};
}

__tile__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// A body's A argument: false / 0 the generic body, true / 1 the `_a16` twin (pointers 16-byte aligned, row
// strides multiples of 16 bytes), kExact the `_exact` twin of a "rows" family one-tile body (TR_ROW_ENTRIES),
// of silu_and_mul or of rope: the `_a16` facts and every block's tile wholly inside the tensor (rows: N == TN
// and TM divides M; silu_and_mul: TM divides M and TN divides H; rope: TS divides S and TD divides D/2), which
// the module checked (ops.cpp, make_plan).
inline constexpr int kExact = 2;

// A (1 or kExact): tell the compiler the pointer is 16-byte aligned (the module checked it).
template <int A, typename T>
__tile__ inline T* al(T* p) {
  if constexpr (A != 0) return ct::assume_aligned<16>(p);
  else return p;
}

// A (1 or kExact): tell the compiler n is a multiple of 16 bytes' worth of T (a row stride the module checked).
template <int A, typename T>
__tile__ inline int dv(int n) {
  if constexpr (A != 0) return ct::assume_divisible<16 / sizeof(T)>(n);
  else return n;
}

// The (TM, TN) tiles of the row-major (M, N) tensor at p, and the tile row block i loads (row_at). With
// A == kExact the view is block i's own TM rows of TN, extents known at compile time: tileiras then knows
// every access is in bounds and issues a thread's loads back to back, with no bounds branch region around
// each (CUDA Tile C++ has no in-bounds flag for a view load: docs/upstream/cuda-tile-cpp-inbounds-load.md).
// The base is computed in the kernel, so such a view has no TMA descriptor: load it with load_no_tma.
template <int A, int TM, int TN, typename T>
__tile__ inline auto row_tiles(T* p, int M, int N, unsigned i) {
  if constexpr (A == kExact) {
    T* rows = ct::assume_aligned<16>(p + static_cast<long long>(i) * TM * TN);
    return ct::partition_view{ct::tensor_span{rows, ct::extents<int, TM, TN>{}}, ct::shape<TM, TN>{}};
  } else {
    return ct::partition_view{ct::tensor_span{p, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  }
}

// The TM x TN tile whose first element is p[at], its rows ld elements apart, as a view with compile-time extents
// (load tile (0, 0) of it): for a tile the module proved whole (silu_and_mul's and rope's `_exact` twins; as
// row_tiles).
template <int TM, int TN, typename T>
__tile__ inline auto tile_at(T* p, long long at, int ld) {
  using E = ct::extents<int, TM, TN>;
  using S = ct::strides<int, ct::dynamic_stride, 1>;
  using L = ct::layout_strided<S>;
  return ct::partition_view{ct::tensor_span<T, E, L>{ct::assume_aligned<16>(p + at), L::mapping<E>{E{}, S{ld}}},
                            ct::shape<TM, TN>{}};
}

template <int A>
__tile__ inline unsigned row_at(unsigned i) {
  if constexpr (A == kExact) return 0;
  else return i;
}

// A per-column vector of N (a norm's weight or bias) in TN tiles; with A == kExact, N == TN at compile time.
template <int A, int TN, typename T>
__tile__ inline auto col_tiles(T* p, int N) {
  if constexpr (A == kExact) return ct::partition_view{ct::tensor_span{p, ct::extents<int, TN>{}}, ct::shape<TN>{}};
  else return ct::partition_view{ct::tensor_span{p, ct::extents{N}}, ct::shape<TN>{}};
}

// Loads and stores without TMA (`allow_tma=false`): plain 128-bit LDG/STG by the computing warps, instead of
// TMA and the producer/consumer handshakes tileiras builds around it for these row kernels (softmax 32768 x
// 4096: 43% -> 63% of copy on the H200), and no TMA descriptor for a view whose base the kernel computes
// (built on the device in a workspace the launch never provides: gemm.cuh).
template <typename View, typename... I>
__tile__ inline auto load_no_tma(const View& v, I... at) {
  decltype(v.load_masked(at...)) t;
  [[cutile::hint(0, allow_tma = false)]] t = v.load_masked(at...);
  return t;
}

template <typename View, typename Tile, typename... I>
__tile__ inline void store_no_tma(const View& v, const Tile& t, I... at) {
  [[cutile::hint(0, allow_tma = false)]] v.store_masked(t, at...);
}

// A load / store that may go by TMA, except in an `_exact` body (A == kExact): its views (row_tiles, tile_at)
// start at a base the kernel computes, which has no TMA descriptor.
template <int A, typename View, typename... I>
__tile__ inline auto load_any(const View& v, I... at) {
  if constexpr (A == kExact) return load_no_tma(v, at...);
  else return v.load_masked(at...);
}

template <int A, typename View, typename Tile, typename... I>
__tile__ inline void store_any(const View& v, const Tile& t, I... at) {
  if constexpr (A == kExact) store_no_tma(v, t, at...);
  else v.store_masked(t, at...);
}

}  // namespace tr

// Kernel-level compiler hints, chosen per instantiated config (tr_kernels.h) and spliced in front of
// __tile_global__. 0 = no hint (the compiler's choice).
//  OCC: occupancy, the CTAs per SM tileiras cuts the register budget for. Without it the row kernels
//       get 255 registers and one CTA per SM, too little memory traffic in flight.
//  W:   num_worker_warps_per_cta. A 128x256 GEMM accumulator or a 128x128 attention accumulator spills
//       to local memory with the default; 8 worker warps (two consumer warpgroups) hold it.
#define TR_HINT_OCC_0
#define TR_HINT_OCC_1 [[cutile::hint(0, occupancy = 1)]]
#define TR_HINT_OCC_2 [[cutile::hint(0, occupancy = 2)]]
#define TR_HINT_OCC_3 [[cutile::hint(0, occupancy = 3)]]
#define TR_HINT_OCC_4 [[cutile::hint(0, occupancy = 4)]]
#define TR_HINT_OCC_8 [[cutile::hint(0, occupancy = 8)]]
#define TR_HINT_W_0
#define TR_HINT_W_4 [[cutile::hint(0, num_worker_warps_per_cta = 4)]]
#define TR_HINT_W_8 [[cutile::hint(0, num_worker_warps_per_cta = 8)]]

// The symbols of one "rows" family config (softmax and the norms), E(symbol, HINTS, body, A, CT, TM, TN)
// defining one (HINTS: TR_ROW_HINTS(OCC, W), the config's kernel hints): `name` and `name_a16` run the one-tile
// body (the whole row in one TN tile, N <= TN),
// `name_exact` the same body for calls whose rows are exactly TN wide and whose M is a multiple of TM
// (tr::row_tiles: no bounds branches), `name_loop` and `name_loop_a16` the multi-chunk body (any N), only
// where TN <= TR_ROW_LOOP_MAX_TN (tr_kernels.h says why). The module launches `_loop` only when N > TN (cpp/src/ops.cpp, row_entry). One
// kernel holding both paths behind `if (nc == 1)` makes tileiras 13.4 drop the occupancy hint (layer_norm
// 4096x8192: 1 CTA/SM instead of 4; docs/upstream/cuda-tile-cpp-occupancy-hint.md), and the one-tile entry
// must not pay for a path it never runs.
#define TR_CAT_(a, b) a##b
#define TR_CAT(a, b) TR_CAT_(a, b)
#define TR_ROW_HINTS(OCC, W) TR_HINT_OCC_##OCC TR_HINT_W_##W
#define TR_ROW_LOOPS_0(E, name, H, chunks, CT, TM, TN)
#define TR_ROW_LOOPS_1(E, name, H, chunks, CT, TM, TN) \
  E(name##_loop, H, chunks, false, CT, TM, TN) E(name##_loop_a16, H, chunks, true, CT, TM, TN)
#define TR_ROW_ENTRIES(E, name, OCC, W, one, chunks, CT, TM, TN)                                   \
  static_assert(TR_ROW_LOOP_##TN == ((TN) <= TR_ROW_LOOP_MAX_TN), "TR_ROW_LOOP_" #TN " disagrees with TR_ROW_LOOP_MAX_TN"); \
  E(name, TR_ROW_HINTS(OCC, W), one, false, CT, TM, TN) E(name##_a16, TR_ROW_HINTS(OCC, W), one, true, CT, TM, TN) \
  E(name##_exact, TR_ROW_HINTS(OCC, W), one, tr::kExact, CT, TM, TN)                               \
  TR_CAT(TR_ROW_LOOPS_, TR_ROW_LOOP_##TN)(E, name, TR_ROW_HINTS(OCC, W), chunks, CT, TM, TN)

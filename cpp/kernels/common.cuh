// Shared includes and small helpers for the tile kernels (compiled by nvcc -tilecubin --tile-only).
//
// Conventions used by every kernel here:
//  * one tile block per output tile; the grid is sized by the module (cpp/src/ops.cpp);
//  * tensors are wrapped in tensor_span with dynamic extents, so partition_view knows the true bounds;
//  * every load is load_masked (out-of-bounds elements read as padding) and every store is store_masked
//    (out-of-bounds elements are dropped), so sizes need not be multiples of the tile: tails, M = 1 and
//    primes are handled by the view, not by special cases;
//  * arithmetic is done in fp32 (element_cast on load, cast back to the storage type on store).
#pragma once
#include <cuda_tile.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

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

}  // namespace tr

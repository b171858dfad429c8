// CUDA Tile C++: partition_view::load_masked and ::load both put each global load in its own branch region,
// consumed before the next load issues. out (M, N) = a * b, one (ROWS, TILE) tile of a and of b per block,
// bf16 in and out, fp32 math. ROWS=2 with RESTRICT=0 (no __restrict__ on the pointers) is the one variant
// whose loads are predicated and issued back to back; ROWS=1, or __restrict__, keeps a region per load.
// STATIC=1 (the workaround): each block views its own tile with compile-time extents at a base it computes
// (the caller guarantees whole tiles): no bounds check is left, the loads go back to back, no TMA.
// Build one variant for sm_90 on any machine, no GPU needed:
//   nvcc -tilecubin --tile-only -std=c++20 -arch=sm_90 -DMASKED=1 -DROWS=2 -DRESTRICT=0 bounds_checked_loads.cu -o k.cubin
//   cuobjdump -sass k.cubin | grep -E 'LDG|BSSY|BSYNC|BRA'
#include <cuda_tile.h>
#include <cuda_bf16.h>

namespace ct = cuda::tiles;

constexpr int TILE = 1024;
#ifndef ROWS
#define ROWS 1
#endif
#if !defined(RESTRICT) || RESTRICT
#define PTR __nv_bfloat16* __restrict__
#else
#define PTR __nv_bfloat16*
#endif

#if MASKED
#define LOAD load_masked
#define STORE store_masked
#else
#define LOAD load
#define STORE store
#endif

extern "C" __tile_global__ void mul(PTR a, PTR b, PTR out, int M, int N) {
  // The caller guarantees 16-byte aligned bases and rows of a multiple of 8 elements.
  a = ct::assume_aligned<16>(a), b = ct::assume_aligned<16>(b), out = ct::assume_aligned<16>(out);
  N = ct::assume_divisible<8>(N);
  int tiles = (N + TILE - 1) / TILE;
  int m = ct::bid().x / tiles, j = ct::bid().x % tiles;
#if STATIC
  long long at = (long long)m * ROWS * N + (long long)j * TILE;  // this block's tile, rows N apart
  auto tile = [&](__nv_bfloat16* p) {
    using E = ct::extents<int, ROWS, TILE>;
    using S = ct::strides<int, ct::dynamic_stride, 1>;
    return ct::partition_view{ct::tensor_span<__nv_bfloat16, E, ct::layout_strided<S>>{
        ct::assume_aligned<16>(p + at), ct::layout_strided<S>::mapping<E>{E{}, S{N}}}, ct::shape<ROWS, TILE>{}};
  };
  auto pa = tile(a), pb = tile(b), po = tile(out);
  m = j = 0;
#else
  ct::partition_view pa{ct::tensor_span{a, ct::extents{M, N}}, ct::shape<ROWS, TILE>{}};
  ct::partition_view pb{ct::tensor_span{b, ct::extents{M, N}}, ct::shape<ROWS, TILE>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, ct::shape<ROWS, TILE>{}};
#endif
  auto g = ct::element_cast<float>(pa.LOAD(m, j));
  auto u = ct::element_cast<float>(pb.LOAD(m, j));
  auto y = g * u;
  po.STORE(ct::element_cast<__nv_bfloat16>(y), m, j);
}

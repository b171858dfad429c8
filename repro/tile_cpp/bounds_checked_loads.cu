// CUDA Tile C++: partition_view::load_masked puts each global load in its own branch region, consumed
// before the next load issues; partition_view::load (no bounds check) issues the loads back to back.
// out (M, N) = a * b, one (1, TILE) row tile of a and of b per block, bf16 in and out, fp32 math.
// Build one variant (MASKED 0 or 1) for sm_90 on any machine, no GPU needed:
//   nvcc -tilecubin --tile-only -std=c++20 -arch=sm_90 -DMASKED=1 bounds_checked_loads.cu -o k.cubin
//   cuobjdump -sass k.cubin | grep -E 'LDG|BSSY|BSYNC|BRA'
#include <cuda_tile.h>
#include <cuda_bf16.h>

namespace ct = cuda::tiles;

constexpr int TILE = 1024;

#if MASKED
#define LOAD load_masked
#define STORE store_masked
#else
#define LOAD load
#define STORE store
#endif

extern "C" __tile_global__ void mul(__nv_bfloat16* __restrict__ a, __nv_bfloat16* __restrict__ b,
                                    __nv_bfloat16* __restrict__ out, int M, int N) {
  // The caller guarantees 16-byte aligned bases and rows of a multiple of 8 elements.
  a = ct::assume_aligned<16>(a), b = ct::assume_aligned<16>(b), out = ct::assume_aligned<16>(out);
  N = ct::assume_divisible<8>(N);
  ct::partition_view pa{ct::tensor_span{a, ct::extents{M, N}}, ct::shape<1, TILE>{}};
  ct::partition_view pb{ct::tensor_span{b, ct::extents{M, N}}, ct::shape<1, TILE>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, ct::shape<1, TILE>{}};
  int tiles = (N + TILE - 1) / TILE;
  int m = ct::bid().x / tiles, j = ct::bid().x % tiles;
  auto g = ct::element_cast<float>(pa.LOAD(m, j));
  auto u = ct::element_cast<float>(pb.LOAD(m, j));
  auto y = g * u;
  po.STORE(ct::element_cast<__nv_bfloat16>(y), m, j);
}

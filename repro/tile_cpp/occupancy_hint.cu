// CUDA Tile C++: [[cutile::hint(0, occupancy = 4)]] on a layer_norm row kernel (one 8192-wide bf16 row per
// block). FALLBACK=1 adds the multi-pass path for rows wider than the tile (it does not run at N = 8192);
// IRANGE picks its loop form. Build one variant for sm_90 on any machine, no GPU needed:
//   nvcc -tilecubin --tile-only -std=c++20 -arch=sm_90 -DFALLBACK=1 -DIRANGE=0 occupancy_hint.cu -o k.cubin
//   cuobjdump --dump-resource-usage k.cubin; cuobjdump -elf k.cubin | grep -A1 -E 'REQNTID|MAXREG'
#include <cuda_tile.h>
#include <cuda_bf16.h>

namespace ct = cuda::tiles;
using namespace ct::literals;
using T = __nv_bfloat16;
constexpr int TN = 8192;
using Row = ct::tile<float, ct::shape<1, TN>>;

extern "C" [[cutile::hint(0, occupancy = 4)]] __tile_global__ void layer_norm(T* x, T* w, T* b, T* out, int M,
                                                                             int N, float eps) {
  x = ct::assume_aligned<16>(x), w = ct::assume_aligned<16>(w), b = ct::assume_aligned<16>(b);
  out = ct::assume_aligned<16>(out), N = ct::assume_divisible<8>(N);
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, ct::shape<1, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, ct::shape<1, TN>{}};
  ct::partition_view pw{ct::tensor_span{w, ct::extents{N}}, ct::shape<TN>{}};
  ct::partition_view pb{ct::tensor_span{b, ct::extents{N}}, ct::shape<TN>{}};
  int i = ct::bid().x, nc = (N + TN - 1) / TN;
  float inv_n = 1.0f / (float)N;
  auto lane = ct::iota<ct::tile<int, ct::shape<1, TN>>>();
#define WB(p, j) ct::reshape(ct::element_cast<float>(p.load_masked(j)), ct::shape<1, TN>{})  // w or b chunk j
  if (!FALLBACK || nc == 1) {  // the row in one tile: the path that runs at N = 8192
    auto t = ct::element_cast<float>(px.load_masked(i, 0));
    auto d = ct::select(lane < N, t - ct::sum(t, 1_ic) * inv_n, ct::zeros<Row>());
    auto rstd = ct::rsqrt(ct::sum(d * d, 1_ic) * inv_n + eps);
    po.store_masked(ct::element_cast<T>(d * rstd * WB(pw, 0) + WB(pb, 0)), i, 0);
    return;
  }
#if FALLBACK
#if IRANGE
#define FOR_CHUNKS(j) for (int j : ct::irange(0, nc))
#else
#define FOR_CHUNKS(j) for (int j = 0; j < nc; ++j)
#endif
  auto mean = ct::zeros<ct::tile<float, ct::shape<1, 1>>>(), var = mean;
  FOR_CHUNKS(j) mean = mean + ct::sum(ct::element_cast<float>(px.load_masked(i, j)), 1_ic);
  mean = mean * inv_n;
  FOR_CHUNKS(j) {
    auto d = ct::select(lane + j * TN < N, ct::element_cast<float>(px.load_masked(i, j)) - mean, ct::zeros<Row>());
    var = var + ct::sum(d * d, 1_ic);
  }
  auto rstd = ct::rsqrt(var * inv_n + eps);
  FOR_CHUNKS(j)
    po.store_masked(ct::element_cast<T>((ct::element_cast<float>(px.load_masked(i, j)) - mean) * rstd * WB(pw, j) + WB(pb, j)), i, j);
#endif
}

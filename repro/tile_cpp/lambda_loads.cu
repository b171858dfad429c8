// CUDA Tile C++: the same flash-attention key loop, its K/V tile loads written inline (LAMBDA=0) or through
// lambdas that capture the views (LAMBDA=1). Inline, tileiras loads every tile by TMA in a 256-thread
// kernel without spills; through the lambdas it builds 512 threads at 128 registers that spill, and most
// tiles come by LDG. out (BH, S, D) = softmax(q k^T * scale) v per head, bf16, D = TK = 64, TQ = 128.
// Build one variant for sm_90 on any machine, no GPU needed:
//   nvcc -tilecubin --tile-only -std=c++20 -arch=sm_90 -DLAMBDA=1 lambda_loads.cu -o k.cubin
//   cuobjdump -res-usage k.cubin; cuobjdump -sass k.cubin | grep -cE 'UTMALDG|LDG|STL'
#include <cuda_tile.h>
#include <cuda_bf16.h>
namespace ct = cuda::tiles;  using namespace ct::literals;
using T = __nv_bfloat16;
constexpr int D = 64, TQ = 128, TK = 64;
template <int R, int C> using ftile = ct::tile<float, ct::shape<R, C>>;

template <int R, typename V> __tile__ auto ld(const V& v, int bh, int j) {
  return ct::reshape(v.load_masked(bh, j, 0), ct::shape<R, D>{});
}

extern "C" __tile_global__ void attn(T* __restrict__ q, T* __restrict__ k, T* __restrict__ v,
                                     T* __restrict__ out, int BH, int S, float scale_log2) {
  // 16-byte aligned tensors, views of the parameters themselves: TMA-eligible.
  q = ct::assume_aligned<16>(q), k = ct::assume_aligned<16>(k);
  v = ct::assume_aligned<16>(v), out = ct::assume_aligned<16>(out);
  ct::partition_view pq{ct::tensor_span{q, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  ct::partition_view pk{ct::tensor_span{k, ct::extents{BH, S, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view pv{ct::tensor_span{v, ct::extents{BH, S, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  int nq = S / TQ, bh = ct::bid().x / nq, bx = ct::bid().x % nq;
  auto qt = ld<TQ>(pq, bh, bx);
#if LAMBDA
  auto kt = [&](int j) { return ld<TK>(pk, bh, j); };
  auto vt = [&](int j) { return ld<TK>(pv, bh, j); };
#define K_TILE(j) kt(j)
#define V_TILE(j) vt(j)
#else
#define K_TILE(j) ld<TK>(pk, bh, j)
#define V_TILE(j) ld<TK>(pv, bh, j)
#endif
  auto m = ct::full<ftile<TQ, 1>>(-INFINITY);
  auto l = ct::zeros<ftile<TQ, 1>>();
  auto acc = ct::zeros<ftile<TQ, D>>();
  for (int j : ct::irange(0, S / TK)) {
    auto s = ct::mma(qt, ct::transpose(K_TILE(j)), ct::zeros<ftile<TQ, TK>>()) * scale_log2;
    auto m_new = ct::max(m, ct::reduce_max(s, 1_ic));
    auto p = ct::exp2(s - m_new);
    auto alpha = ct::exp2(m - m_new);
    l = l * alpha + ct::sum(p, 1_ic);
    acc = ct::mma(ct::element_cast<T>(p), V_TILE(j), acc * alpha);
    m = m_new;
  }
  po.store_masked(ct::reshape(ct::element_cast<T>(acc / l), ct::shape<1, TQ, D>{}), bh, bx, 0);
}

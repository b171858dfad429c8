// CUDA Tile C++: the pieces of a flash-attention body on tiles of 3-D (BH, S, D) views, with TMA loads and
// store (TMA=1), the same views with allow_tma=false (TMA=0), or TMA for all but K (TMA=2), one piece per
// STAGE, so a GPU run shows which piece goes wrong. Block b owns query rows [bx*TQ, (bx+1)*TQ) of head bh (b = bh * S/TQ + bx); D == TK.
//   STAGE 0: out = q                     STAGE 1: out = q k[0:TK]^T (K tile transposed in registers)
//   STAGE 2: out = q v[0:TK] (q as P)    STAGE 3: out = softmax(q k^T * scale) v (online softmax)
//   STAGE 4: stage 3 over the first key tile only (a loop of one trip: no pipelined TMA ring)
// Build: nvcc -tilecubin --tile-only -std=c++20 -arch=sm_90 -DTMA=1 -DSTAGE=3; check: attention_tma_gpu.py
#include <cuda_tile.h>
#include <cuda_bf16.h>
namespace ct = cuda::tiles;  using namespace ct::literals;
using T = __nv_bfloat16;
constexpr int D = 64, TQ = 128, TK = 64;
template <int R, int C> using ftile = ct::tile<float, ct::shape<R, C>>;

#define NO_TMA [[cutile::hint(0, allow_tma = false)]]
template <int R, bool K = false, typename V> __tile__ auto ld(const V& v, int bh, int j) {
  decltype(v.load_masked(bh, j, 0)) t;
  if constexpr (TMA == 0 || (TMA == 2 && K)) { NO_TMA t = v.load_masked(bh, j, 0); }
  else { t = v.load_masked(bh, j, 0); }
  return ct::reshape(t, ct::shape<R, D>{});
}
extern "C" __tile_global__ void attn(T* __restrict__ q, T* __restrict__ k, T* __restrict__ v,
                                     T* __restrict__ out, int BH, int S, float scale_log2) {
  // 16-byte aligned tensors (the caller's); views of the parameters (no device-built TMA descriptor).
  q = ct::assume_aligned<16>(q), k = ct::assume_aligned<16>(k);
  v = ct::assume_aligned<16>(v), out = ct::assume_aligned<16>(out);
  ct::partition_view pq{ct::tensor_span{q, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  ct::partition_view pk{ct::tensor_span{k, ct::extents{BH, S, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view pv{ct::tensor_span{v, ct::extents{BH, S, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  int nq = (S + TQ - 1) / TQ, bh = ct::bid().x / nq, bx = ct::bid().x % nq;
  auto qt = ld<TQ>(pq, bh, bx);
#if STAGE == 0
  auto o = qt;
#elif STAGE == 1
  auto o = ct::element_cast<T>(ct::mma(qt, ct::transpose(ld<TK, true>(pk, bh, 0)), ct::zeros<ftile<TQ, TK>>()));
#elif STAGE == 2
  auto o = ct::element_cast<T>(ct::mma(qt, ld<TK>(pv, bh, 0), ct::zeros<ftile<TQ, D>>()));
#else
  auto m = ct::full<ftile<TQ, 1>>(-INFINITY);
  auto l = ct::zeros<ftile<TQ, 1>>();
  auto acc = ct::zeros<ftile<TQ, D>>();
  for (int j : ct::irange(0, STAGE == 4 ? 1 : S / TK)) {  // S is a multiple of TK: no mask
    auto s = ct::mma(qt, ct::transpose(ld<TK, true>(pk, bh, j)), ct::zeros<ftile<TQ, TK>>()) * scale_log2;
    auto m_new = ct::max(m, ct::reduce_max(s, 1_ic));
    auto p = ct::exp2(s - m_new);
    auto alpha = ct::exp2(m - m_new);
    l = l * alpha + ct::sum(p, 1_ic);
    acc = ct::mma(ct::element_cast<T>(p), ld<TK>(pv, bh, j), acc * alpha);
    m = m_new;
  }
  auto o = ct::element_cast<T>(acc / l);
#endif
  auto o3 = ct::reshape(o, ct::shape<1, TQ, D>{});
  if constexpr (TMA == 0) { NO_TMA po.store_masked(o3, bh, bx, 0); } else { po.store_masked(o3, bh, bx, 0); }
}

// softmax over the last dim of (M, N). Block i owns rows [i*TM, (i+1)*TM). When one TN chunk covers
// the row (N <= TN) it is loaded once, kept in registers and written back; otherwise N is walked in
// chunks of TN twice: an online pass keeps the running max m and the running sum s of exp(x - m)
// (rescaled when m grows), then a second pass writes exp(x - m) / s. Columns past N load as -inf, so
// they add exp(-inf) = 0 to the sum; rows past M are computed but never stored. A: see common.cuh.
#include "common.cuh"

template <bool A, typename T, int TM, int TN>
__tile__ void softmax_tile(T* x, T* out, int M, int N) {
  x = tr::al<A>(x), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);  // A: the row stride is a multiple of 16 bytes (common.cuh)
  auto shp = ct::shape<TM, TN>{};
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, shp};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, shp};
  unsigned i = ct::bid().x;
  int nc = tr::ceil_div(N, TN);
  if (nc == 1) {  // the whole row in one tile: one read, one write
    auto t = ct::element_cast<float>(px.load_masked(ct::view_padding_negative_inf_t{}, i, 0));
    auto e = ct::exp(t - ct::reduce_max(t, 1_ic));
    po.store_masked(ct::element_cast<T>(e * (1.0f / ct::sum(e, 1_ic))), i, 0);
    return;
  }
  using Col = tr::ftile<TM, 1>;
  Col m = ct::full<Col>(-INFINITY);
  Col s = ct::zeros<Col>();
  for (int j = 0; j < nc; ++j) {
    auto t = ct::element_cast<float>(px.load_masked(ct::view_padding_negative_inf_t{}, i, j));
    auto m_new = ct::max(m, ct::reduce_max(t, 1_ic));
    s = s * ct::exp(m - m_new) + ct::sum(ct::exp(t - m_new), 1_ic);
    m = m_new;
  }
  auto inv = 1.0f / s;
  for (int j = 0; j < nc; ++j) {
    auto t = ct::element_cast<float>(px.load_masked(ct::view_padding_negative_inf_t{}, i, j));
    po.store_masked(ct::element_cast<T>(ct::exp(t - m) * inv), i, j);
  }
}

// OCC: the occupancy hint (CTAs per SM the register budget is cut for; 0 = the compiler's choice).
#define X(op, dt, CT, TM, TN, OCC)                                                                 \
  extern "C" TR_HINT_OCC_##OCC __tile_global__ void op##_##dt##_##TM##_##TN##_##OCC(              \
      CT* x, CT* out, int M, int N) {                                                              \
    softmax_tile<false, CT, TM, TN>(x, out, M, N);                                                 \
  }                                                                                                \
  extern "C" TR_HINT_OCC_##OCC __tile_global__ void op##_##dt##_##TM##_##TN##_##OCC##_a16(        \
      CT* x, CT* out, int M, int N) {                                                              \
    softmax_tile<true, CT, TM, TN>(x, out, M, N);                                                  \
  }
TR_SOFTMAX_KERNELS(X)

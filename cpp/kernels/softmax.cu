// softmax over the last dim of (M, N). Block i owns rows [i*TM, (i+1)*TM). Two entry points per config
// (the module picks one per call by N, cpp/src/ops.cpp; common.cuh's TR_ROW_ENTRIES says why):
//  * `<name>` (N <= TN): the row in one tile, loaded once, kept in registers and written back;
//  * `<name>_loop` (any N, launched for N > TN): N walked in chunks of TN twice: an online pass keeps
//    the running max m and the running sum s of exp(x - m) (rescaled when m grows), then a second pass
//    writes exp(x - m) / s.
// Columns past N load as -inf, so they add exp(-inf) = 0 to the sum; rows past M are computed but never
// stored. A: see common.cuh.
#include "common.cuh"

template <int A, typename T, int TM, int TN>
__tile__ void softmax_one_tile(T* x, T* out, int M, int N) {
  x = tr::al<A>(x), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);  // A: the row stride is a multiple of 16 bytes (common.cuh)
  auto px = tr::row_tiles<A, TM, TN>(x, M, N, ct::bid().x), po = tr::row_tiles<A, TM, TN>(out, M, N, ct::bid().x);
  unsigned i = tr::row_at<A>(ct::bid().x);
  auto t = ct::element_cast<float>(tr::load_no_tma(px, ct::view_padding_negative_inf_t{}, i, 0));
  auto e = ct::exp(t - ct::reduce_max(t, 1_ic));
  tr::store_no_tma(po, ct::element_cast<T>(e * (1.0f / ct::sum(e, 1_ic))), i, 0);
}

template <bool A, typename T, int TM, int TN>
__tile__ void softmax_chunks(T* x, T* out, int M, int N) {
  x = tr::al<A>(x), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  unsigned i = ct::bid().x;
  int nc = tr::ceil_div(N, TN);
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

// OCC, W: the occupancy and worker-warps hints (common.cuh; 0 = the compiler's choice), HINTS both as attributes.
// ENTRY: one of the symbols of a config (TR_ROW_ENTRIES).
#define ENTRY(name, HINTS, body, A, CT, TM, TN)                                                    \
  extern "C" HINTS __tile_global__ void name(CT* x, CT* out, int M, int N) {         \
    body<A, CT, TM, TN>(x, out, M, N);                                                             \
  }
#define X(op, dt, CT, TM, TN, OCC, W) \
  TR_ROW_ENTRIES(ENTRY, op##_##dt##_##TM##_##TN##_##OCC##_##W, OCC, W, softmax_one_tile, softmax_chunks, CT, TM, TN)
TR_SOFTMAX_KERNELS(X)

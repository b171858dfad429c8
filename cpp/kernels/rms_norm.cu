// rms_norm: out = x * rsqrt(mean(x^2) + eps) * w over rows of (M, N). Block i owns TM rows.
// Two entry points per config (the module picks one per call by N, cpp/src/ops.cpp; common.cuh's
// TR_ROW_ENTRIES says why they are separate kernels):
//  * `<name>` (N <= TN): the row in one tile, loaded once and kept in registers;
//  * `<name>_loop` (any N, launched for N > TN): pass 1 sums x^2 over N in TN chunks (padding is 0, so it
//    adds nothing), pass 2 reloads, scales and writes.
// A: see common.cuh.
#include "common.cuh"

template <int A, typename T, int TM, int TN>
__tile__ void rms_norm_one_tile(T* x, T* w, T* out, int M, int N, float eps) {
  x = tr::al<A>(x), w = tr::al<A>(w), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);  // A: the row stride is a multiple of 16 bytes (common.cuh)
  auto px = tr::row_tiles<A, TM, TN>(x, M, N, ct::bid().x), po = tr::row_tiles<A, TM, TN>(out, M, N, ct::bid().x);
  auto pw = tr::col_tiles<A, TN>(w, N);
  unsigned i = tr::row_at<A>(ct::bid().x);
  auto t = ct::element_cast<float>(tr::load_no_tma(px, i, 0));
  auto rstd = ct::rsqrt(ct::sum(t * t, 1_ic) / (float)N + eps);
  auto wt = ct::reshape(ct::element_cast<float>(tr::load_no_tma(pw, 0)), ct::shape<1, TN>{});
  tr::store_no_tma(po, ct::element_cast<T>(t * rstd * wt), i, 0);
}

template <bool A, typename T, int TM, int TN>
__tile__ void rms_norm_chunks(T* x, T* w, T* out, int M, int N, float eps) {
  x = tr::al<A>(x), w = tr::al<A>(w), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  ct::partition_view pw{ct::tensor_span{w, ct::extents{N}}, ct::shape<TN>{}};
  unsigned i = ct::bid().x;
  int nc = tr::ceil_div(N, TN);
  using Col = tr::ftile<TM, 1>;
  Col ss = ct::zeros<Col>();
  for (int j = 0; j < nc; ++j) {
    auto t = ct::element_cast<float>(px.load_masked(i, j));
    ss = ss + ct::sum(t * t, 1_ic);
  }
  auto rstd = ct::rsqrt(ss / (float)N + eps);
  for (int j = 0; j < nc; ++j) {
    auto t = ct::element_cast<float>(px.load_masked(i, j));
    auto wt = ct::reshape(ct::element_cast<float>(pw.load_masked(j)), ct::shape<1, TN>{});
    po.store_masked(ct::element_cast<T>(t * rstd * wt), i, j);
  }
}

// OCC, W: the occupancy and worker-warps hints (common.cuh), HINTS both as attributes. ENTRY: one of the symbols
// of a config (TR_ROW_ENTRIES).
#define ENTRY(name, HINTS, body, A, CT, TM, TN)                                                    \
  extern "C" HINTS __tile_global__ void name(CT* x, CT* w, CT* out, int M, int N, float eps) { \
    body<A, CT, TM, TN>(x, w, out, M, N, eps);                                                     \
  }
#define X(op, dt, CT, TM, TN, OCC, W) \
  TR_ROW_ENTRIES(ENTRY, op##_##dt##_##TM##_##TN##_##OCC##_##W, OCC, W, rms_norm_one_tile, rms_norm_chunks, CT, TM, TN)
TR_RMS_NORM_KERNELS(X)

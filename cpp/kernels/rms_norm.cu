// rms_norm: out = x * rsqrt(mean(x^2) + eps) * w over rows of (M, N). Block i owns TM rows. When one
// TN chunk covers the row (N <= TN) it is loaded once and kept in registers; otherwise pass 1 sums x^2
// over N in TN chunks (padding is 0, so it adds nothing) and pass 2 reloads, scales and writes.
// A: see common.cuh.
#include "common.cuh"

template <bool A, typename T, int TM, int TN>
__tile__ void rms_norm_tile(T* x, T* w, T* out, int M, int N, float eps) {
  x = tr::al<A>(x), w = tr::al<A>(w), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);  // A: the row stride is a multiple of 16 bytes (common.cuh)
  auto shp = ct::shape<TM, TN>{};
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, shp};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, shp};
  ct::partition_view pw{ct::tensor_span{w, ct::extents{N}}, ct::shape<TN>{}};
  unsigned i = ct::bid().x;
  int nc = tr::ceil_div(N, TN);
  if (nc == 1) {  // the whole row in one tile: one read, one write
    auto t = ct::element_cast<float>(px.load_masked(i, 0));
    auto rstd = ct::rsqrt(ct::sum(t * t, 1_ic) / (float)N + eps);
    auto wt = ct::reshape(ct::element_cast<float>(pw.load_masked(0)), ct::shape<1, TN>{});
    po.store_masked(ct::element_cast<T>(t * rstd * wt), i, 0);
    return;
  }
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

// OCC: the occupancy hint (common.cuh).
#define X(op, dt, CT, TM, TN, OCC)                                                                 \
  extern "C" TR_HINT_OCC_##OCC __tile_global__ void op##_##dt##_##TM##_##TN##_##OCC(              \
      CT* x, CT* w, CT* out, int M, int N, float eps) {                                            \
    rms_norm_tile<false, CT, TM, TN>(x, w, out, M, N, eps);                                        \
  }                                                                                                \
  extern "C" TR_HINT_OCC_##OCC __tile_global__ void op##_##dt##_##TM##_##TN##_##OCC##_a16(        \
      CT* x, CT* w, CT* out, int M, int N, float eps) {                                            \
    rms_norm_tile<true, CT, TM, TN>(x, w, out, M, N, eps);                                         \
  }
TR_RMS_NORM_KERNELS(X)

// rms_norm: out = x * rsqrt(mean(x^2) + eps) * w over rows of (M, N). Block i owns TM rows; pass 1
// sums x^2 over N in TN chunks (padding is 0, so it adds nothing), pass 2 scales and writes.
#include "common.cuh"

template <typename T, int TM, int TN>
__tile__ void rms_norm_tile(T* x, T* w, T* out, int M, int N, float eps) {
  auto shp = ct::shape<TM, TN>{};
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, shp};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, shp};
  ct::partition_view pw{ct::tensor_span{w, ct::extents{N}}, ct::shape<TN>{}};
  unsigned i = ct::bid().x;
  using Col = tr::ftile<TM, 1>;
  Col ss = ct::zeros<Col>();
  int nc = tr::ceil_div(N, TN);
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

#define X(op, dt, CT, TM, TN)                                                                     \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN(CT* x, CT* w, CT* out, int M, int N,    \
                                                          float eps) {                            \
    rms_norm_tile<CT, TM, TN>(x, w, out, M, N, eps);                                              \
  }
TR_RMS_NORM_KERNELS(X)

// add_rms_norm: sum = x + residual; out = sum * rsqrt(mean(sum^2) + eps) * w over rows of (M, N): the
// rms_norm kernel (rms_norm.cu) with the residual add in front. x and residual are added in fp32, sum
// is stored once in T and the norm uses the fp32 sum. Block i owns TM rows. Two entry points per config
// (the module picks one per call by N, cpp/src/ops.cpp; common.cuh's TR_ROW_ENTRIES says why):
//  * `<name>` (N <= TN): x and residual loaded once, each output written once;
//  * `<name>_loop` (any N, launched for N > TN): pass 1 adds, stores sum and sums squares over TN chunks
//    (padding is 0) and pass 2 re-adds x + residual (not a re-read of sum: its fp32 value, no
//    read-after-write of global memory) to scale and write out.
// A: see common.cuh.
#include "common.cuh"

template <int A, typename T, int TM, int TN>
__tile__ void add_rms_norm_one_tile(T* x, T* r, T* w, T* s, T* out, int M, int N, float eps) {
  x = tr::al<A>(x), r = tr::al<A>(r), w = tr::al<A>(w), s = tr::al<A>(s), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);  // A: the row stride is a multiple of 16 bytes (common.cuh)
  const unsigned b = ct::bid().x;
  auto px = tr::row_tiles<A, TM, TN>(x, M, N, b), pr = tr::row_tiles<A, TM, TN>(r, M, N, b);
  auto ps = tr::row_tiles<A, TM, TN>(s, M, N, b), po = tr::row_tiles<A, TM, TN>(out, M, N, b);
  auto pw = tr::col_tiles<A, TN>(w, N);
  unsigned i = tr::row_at<A>(b);
  // TMA here (load_any / store_any), unlike rms_norm and layer_norm: without it (tr::load_no_tma /
  // store_no_tma) 16384 x 4096 fell from 81% to 74% of copy on the H200 (4096 x 8192: 81% -> 84%),
  // 2026-12-01; the exact twin has no TMA (its views are built in the kernel).
  auto t = ct::element_cast<float>(tr::load_any<A>(px, i, 0)) + ct::element_cast<float>(tr::load_any<A>(pr, i, 0));
  tr::store_any<A>(ps, ct::element_cast<T>(t), i, 0);
  auto rstd = ct::rsqrt(ct::sum(t * t, 1_ic) / (float)N + eps);
  auto wt = ct::reshape(ct::element_cast<float>(tr::load_any<A>(pw, 0)), ct::shape<1, TN>{});
  tr::store_any<A>(po, ct::element_cast<T>(t * rstd * wt), i, 0);
}

template <bool A, typename T, int TM, int TN>
__tile__ void add_rms_norm_chunks(T* x, T* r, T* w, T* s, T* out, int M, int N, float eps) {
  x = tr::al<A>(x), r = tr::al<A>(r), w = tr::al<A>(w), s = tr::al<A>(s), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);
  auto shp = ct::shape<TM, TN>{};
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, shp};
  ct::partition_view pr{ct::tensor_span{r, ct::extents{M, N}}, shp};
  ct::partition_view ps{ct::tensor_span{s, ct::extents{M, N}}, shp};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, shp};
  ct::partition_view pw{ct::tensor_span{w, ct::extents{N}}, ct::shape<TN>{}};
  unsigned i = ct::bid().x;
  int nc = tr::ceil_div(N, TN);
  using Col = tr::ftile<TM, 1>;
  Col ss = ct::zeros<Col>();
  for (int j = 0; j < nc; ++j) {
    auto t = ct::element_cast<float>(px.load_masked(i, j)) + ct::element_cast<float>(pr.load_masked(i, j));
    ps.store_masked(ct::element_cast<T>(t), i, j);
    ss = ss + ct::sum(t * t, 1_ic);
  }
  auto rstd = ct::rsqrt(ss / (float)N + eps);
  for (int j = 0; j < nc; ++j) {
    auto t = ct::element_cast<float>(px.load_masked(i, j)) + ct::element_cast<float>(pr.load_masked(i, j));
    auto wt = ct::reshape(ct::element_cast<float>(pw.load_masked(j)), ct::shape<1, TN>{});
    po.store_masked(ct::element_cast<T>(t * rstd * wt), i, j);
  }
}

// OCC, W: the occupancy and worker-warps hints (common.cuh), HINTS both as attributes. ENTRY: one of the symbols
// of a config (TR_ROW_ENTRIES).
#define ENTRY(name, HINTS, body, A, CT, TM, TN)                                                    \
  extern "C" HINTS __tile_global__ void name(CT* x, CT* r, CT* w, CT* s, CT* out, int M, int N, \
                                                         float eps) {                              \
    body<A, CT, TM, TN>(x, r, w, s, out, M, N, eps);                                               \
  }
#define X(op, dt, CT, TM, TN, OCC, W) \
  TR_ROW_ENTRIES(ENTRY, op##_##dt##_##TM##_##TN##_##OCC##_##W, OCC, W, add_rms_norm_one_tile, add_rms_norm_chunks, CT, TM, TN)
TR_ADD_RMS_NORM_KERNELS(X)

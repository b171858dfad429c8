// layer_norm: out = (x - mean) * rsqrt(var + eps) * w + b over rows of (M, N), biased variance.
// Two entry points per config (the module picks one per call by N, cpp/src/ops.cpp):
//  * `<name>` (N <= TN): the row in one tile, loaded once and kept in registers;
//  * `<name>_loop` (any N, launched for N > TN): three passes over N in TN chunks: the mean, then the
//    variance around that mean (not E[x^2] - E[x]^2, which cancels catastrophically for inputs with a
//    large common offset), then the output.
// They are separate kernels because tileiras 13.4 drops the occupancy hint of a kernel that holds both
// paths (4096x8192 bf16: 384 threads x 168 registers, 231 KB of shared memory, 1 CTA/SM instead of 4;
// docs/upstream/cuda-tile-cpp-occupancy-hint.md). In the variance the padded columns would contribute
// (0 - mean)^2, so they are masked out by index. A: see common.cuh.
#include "common.cuh"

template <int A, typename T, int TM, int TN>
__tile__ void layer_norm_one_tile(T* x, T* w, T* b, T* out, int M, int N, float eps) {
  x = tr::al<A>(x), w = tr::al<A>(w), b = tr::al<A>(b), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);  // A: the row stride is a multiple of 16 bytes (common.cuh)
  auto px = tr::row_tiles<A, TM, TN>(x, M, N, ct::bid().x), po = tr::row_tiles<A, TM, TN>(out, M, N, ct::bid().x);
  auto pw = tr::col_tiles<A, TN>(w, N), pb = tr::col_tiles<A, TN>(b, N);
  unsigned i = tr::row_at<A>(ct::bid().x);
  float inv_n = 1.0f / (float)N;
  auto lane = ct::iota<ct::tile<int, ct::shape<1, TN>>>();
  auto t = ct::element_cast<float>(tr::load_no_tma(px, i, 0));
  auto mean = ct::sum(t, 1_ic) * inv_n;
  auto d = ct::select(lane < N, t - mean, ct::zeros<tr::ftile<TM, TN>>());
  auto rstd = ct::rsqrt(ct::sum(d * d, 1_ic) * inv_n + eps);
  auto wt = ct::reshape(ct::element_cast<float>(tr::load_no_tma(pw, 0)), ct::shape<1, TN>{});
  auto bt = ct::reshape(ct::element_cast<float>(tr::load_no_tma(pb, 0)), ct::shape<1, TN>{});
  tr::store_no_tma(po, ct::element_cast<T>(d * rstd * wt + bt), i, 0);
}

template <bool A, typename T, int TM, int TN>
__tile__ void layer_norm_chunks(T* x, T* w, T* b, T* out, int M, int N, float eps) {
  x = tr::al<A>(x), w = tr::al<A>(w), b = tr::al<A>(b), out = tr::al<A>(out);
  N = tr::dv<A, T>(N);
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  ct::partition_view pw{ct::tensor_span{w, ct::extents{N}}, ct::shape<TN>{}};
  ct::partition_view pb{ct::tensor_span{b, ct::extents{N}}, ct::shape<TN>{}};
  unsigned i = ct::bid().x;
  using Col = tr::ftile<TM, 1>;
  int nc = tr::ceil_div(N, TN);
  float inv_n = 1.0f / (float)N;
  auto lane = ct::iota<ct::tile<int, ct::shape<1, TN>>>();
  Col acc = ct::zeros<Col>();
  for (int j = 0; j < nc; ++j) {
    acc = acc + ct::sum(ct::element_cast<float>(px.load_masked(i, j)), 1_ic);
  }
  auto mean = acc * inv_n;
  Col var_acc = ct::zeros<Col>();
  for (int j = 0; j < nc; ++j) {
    auto d = ct::element_cast<float>(px.load_masked(i, j)) - mean;
    auto valid = (lane + j * TN) < N;
    d = ct::select(valid, d, ct::zeros<tr::ftile<TM, TN>>());
    var_acc = var_acc + ct::sum(d * d, 1_ic);
  }
  auto rstd = ct::rsqrt(var_acc * inv_n + eps);
  for (int j = 0; j < nc; ++j) {
    auto t = ct::element_cast<float>(px.load_masked(i, j));
    auto wt = ct::reshape(ct::element_cast<float>(pw.load_masked(j)), ct::shape<1, TN>{});
    auto bt = ct::reshape(ct::element_cast<float>(pb.load_masked(j)), ct::shape<1, TN>{});
    po.store_masked(ct::element_cast<T>((t - mean) * rstd * wt + bt), i, j);
  }
}

// OCC, W: the occupancy and worker-warps hints (common.cuh), HINTS both as attributes. ENTRY: one of the symbols
// of a config (TR_ROW_ENTRIES).
#define ENTRY(name, HINTS, body, A, CT, TM, TN)                                                    \
  extern "C" HINTS __tile_global__ void name(CT* x, CT* w, CT* b, CT* out, int M, int N, \
                                                         float eps) {                              \
    body<A, CT, TM, TN>(x, w, b, out, M, N, eps);                                                  \
  }
#define X(op, dt, CT, TM, TN, OCC, W) \
  TR_ROW_ENTRIES(ENTRY, op##_##dt##_##TM##_##TN##_##OCC##_##W, OCC, W, layer_norm_one_tile, layer_norm_chunks, CT, TM, TN)
TR_LAYER_NORM_KERNELS(X)

// transpose: out (N, M) = x (M, N)^T. Block (bx, by) (one flat grid index, bx fastest) loads the TM x TN tile (bx, by) of x, transposes
// it in registers and stores it as the TN x TM tile (by, bx) of out. A: pointers 16-byte aligned and
// M, N multiples of 16 bytes of T (both are row strides), checked by the module; see common.cuh.
#include "common.cuh"

template <bool A, typename T, int TM, int TN>
__tile__ void transpose_tile(T* x, T* out, int M, int N) {
  x = tr::al<A>(x), out = tr::al<A>(out);
  M = tr::dv<A, T>(M), N = tr::dv<A, T>(N);
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{N, M}}, ct::shape<TN, TM>{}};
  // One flat grid axis (cpp/src/ops.cpp), M tiles fastest: ceil(N/TN) may exceed grid y's 65535.
  unsigned tiles_m = tr::ceil_div(M, TM);
  unsigned bx = ct::bid().x % tiles_m, by = ct::bid().x / tiles_m;
  po.store_masked(ct::transpose(px.load_masked(bx, by)), by, bx);
}

#define X(op, dt, CT, TM, TN)                                                                  \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN(CT* x, CT* out, int M, int N) {      \
    transpose_tile<false, CT, TM, TN>(x, out, M, N);                                           \
  }                                                                                            \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN##_a16(CT* x, CT* out, int M, int N) { \
    transpose_tile<true, CT, TM, TN>(x, out, M, N);                                            \
  }
TR_TRANSPOSE_KERNELS(X)

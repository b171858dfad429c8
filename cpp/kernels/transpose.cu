// transpose: out (N, M) = x (M, N)^T. Block (bx, by) loads the TM x TN tile (bx, by) of x, transposes
// it in registers and stores it as the TN x TM tile (by, bx) of out.
#include "common.cuh"

template <typename T, int TM, int TN>
__tile__ void transpose_tile(T* x, T* out, int M, int N) {
  ct::partition_view px{ct::tensor_span{x, ct::extents{M, N}}, ct::shape<TM, TN>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{N, M}}, ct::shape<TN, TM>{}};
  unsigned bx = ct::bid().x, by = ct::bid().y;
  po.store_masked(ct::transpose(px.load_masked(bx, by)), by, bx);
}

#define X(op, dt, CT, TM, TN)                                                              \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN(CT* x, CT* out, int M, int N) {  \
    transpose_tile<CT, TM, TN>(x, out, M, N);                                              \
  }
TR_TRANSPOSE_KERNELS(X)

// silu_and_mul: out (M, H) = silu(x[:, :H]) * x[:, H:] for x (M, 2H). The two halves are viewed as
// (M, H) spans with row stride 2H (the second starting H elements in), so each has its own bounds and
// the tail masking at column H is exact even when H is not a multiple of TN.
#include "common.cuh"

template <bool A, typename T, int TM, int TN>
__tile__ void silu_and_mul_tile(T* x, T* out, int M, int H) {
  x = tr::al<A>(x), out = tr::al<A>(out);
  H = tr::dv<A, T>(H);  // A: H (so 2H and the second half's offset) is a multiple of 16 bytes
  auto shp = ct::shape<TM, TN>{};
  ct::partition_view pg{tr::strided_rows(x, M, H, 2 * H), shp};
  ct::partition_view pu{tr::strided_rows(tr::al<A>(x + H), M, H, 2 * H), shp};
  ct::partition_view po{ct::tensor_span{out, ct::extents{M, H}}, shp};
  // One flat grid axis (cpp/src/ops.cpp), M tiles fastest: ceil(H/TN) may exceed grid y's 65535.
  unsigned tiles_m = tr::ceil_div(M, TM);
  unsigned bx = ct::bid().x % tiles_m, by = ct::bid().x / tiles_m;
  auto g = ct::element_cast<float>(pg.load_masked(bx, by));
  auto u = ct::element_cast<float>(pu.load_masked(bx, by));
  auto silu = g / (1.0f + ct::exp(-g));
  po.store_masked(ct::element_cast<T>(silu * u), bx, by);
}

#define X(op, dt, CT, TM, TN)                                                                        \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN(CT* x, CT* out, int M, int H) {            \
    silu_and_mul_tile<false, CT, TM, TN>(x, out, M, H);                                              \
  }                                                                                                  \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN##_a16(CT* x, CT* out, int M, int H) {      \
    silu_and_mul_tile<true, CT, TM, TN>(x, out, M, H);                                               \
  }
TR_SILU_AND_MUL_KERNELS(X)

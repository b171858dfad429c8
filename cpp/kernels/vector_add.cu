// vector_add: out = a + b over a 1-D tensor of any length. One block per TILE elements; the last
// block's tail is masked by the view. A: the three pointers are 16-byte aligned and n is a multiple of
// 16 bytes of T (see common.cuh): without the second fact the masks are per element and so are the loads.
#include "common.cuh"

template <bool A, typename T, int TILE>
__tile__ void vector_add_tile(T* a, T* b, T* out, int n) {
  a = tr::al<A>(a), b = tr::al<A>(b), out = tr::al<A>(out);
  n = tr::dv<A, T>(n);
  auto shp = ct::shape<TILE>{};
  ct::partition_view pa{ct::tensor_span{a, ct::extents{n}}, shp};
  ct::partition_view pb{ct::tensor_span{b, ct::extents{n}}, shp};
  ct::partition_view po{ct::tensor_span{out, ct::extents{n}}, shp};
  unsigned i = ct::bid().x;
  auto sum = ct::element_cast<float>(pa.load_masked(i)) + ct::element_cast<float>(pb.load_masked(i));
  po.store_masked(ct::element_cast<T>(sum), i);
}

#define X(op, dt, CT, TILE)                                                                  \
  extern "C" __tile_global__ void op##_##dt##_##TILE(CT* a, CT* b, CT* out, int n) {         \
    vector_add_tile<false, CT, TILE>(a, b, out, n);                                          \
  }                                                                                          \
  extern "C" __tile_global__ void op##_##dt##_##TILE##_a16(CT* a, CT* b, CT* out, int n) {   \
    vector_add_tile<true, CT, TILE>(a, b, out, n);                                           \
  }
TR_VECTOR_ADD_KERNELS(X)

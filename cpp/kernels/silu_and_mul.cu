// silu_and_mul: out (M, H) = silu(x[:, :H]) * x[:, H:] for x (M, 2H). The two halves are viewed as
// (M, H) spans with row stride 2H (the second starting H elements in), so each has its own bounds and
// the tail masking at column H is exact even when H is not a multiple of TN. Three entry points per config:
// generic, `_a16` (aligned) and `_exact` (aligned, TM divides M and TN divides H: each block views its own
// three tiles with compile-time extents, no bounds checks; common.cuh, tr::tile_at).
// AX 1: exp(-g) as exp2(-g log2 e) with subnormals flushed, a bare MUFU.EX2 (ct::exp is a range-reduced expansion
// around it: 16 FFMA.SAT, 16 FFMA.RM and their FFMAs in the 2 x 1024 `_exact` SASS, 67 registers); a sweep option.
#include "common.cuh"

template <int A, typename T, int TM, int TN, int AX>
__tile__ void silu_and_mul_tile(T* x, T* out, int M, int H) {
  x = tr::al<A>(x), out = tr::al<A>(out);
  H = tr::dv<A, T>(H);  // A: H (so 2H and the second half's offset) is a multiple of 16 bytes
  // One flat grid axis (cpp/src/ops.cpp), M tiles fastest: ceil(H/TN) may exceed grid y's 65535.
  unsigned tiles_m = tr::ceil_div(M, TM);
  unsigned bx = ct::bid().x % tiles_m, by = ct::bid().x / tiles_m;
  auto run = [&](const auto& pg, const auto& pu, const auto& po, unsigned i, unsigned j) {
    auto g = ct::element_cast<float>(tr::load_any<A>(pg, i, j));
    auto u = ct::element_cast<float>(tr::load_any<A>(pu, i, j));
    // The approximate division (MUFU.RCP and a multiply, as Triton's and torch.compile's sigmoid): the IEEE one
    // puts a slow-path branch region around every element (34 BSSY in the 2 x 2048 tile, sm_90 SASS).
    auto e = [&] {
      if constexpr (AX == 1)
        return ct::exp2(g * -1.4426950408889634f, ct::round_subnormals_to_zero_t{});
      else
        return ct::exp(-g);
    }();
    auto silu = ct::div(g, 1.0f + e, ct::round_approximate_t{});
    tr::store_any<A>(po, ct::element_cast<T>(silu * u), i, j);
  };
  if constexpr (A == tr::kExact) {  // every tile whole: this block's own tiles, compile-time extents
    const long long at = static_cast<long long>(bx) * TM * 2 * H + static_cast<long long>(by) * TN;
    const long long at_out = static_cast<long long>(bx) * TM * H + static_cast<long long>(by) * TN;
    run(tr::tile_at<TM, TN>(x, at, 2 * H), tr::tile_at<TM, TN>(x, at + H, 2 * H), tr::tile_at<TM, TN>(out, at_out, H),
        0, 0);
  } else {
    auto shp = ct::shape<TM, TN>{};
    run(ct::partition_view{tr::strided_rows(x, M, H, 2 * H), shp},
        ct::partition_view{tr::strided_rows(tr::al<A>(x + H), M, H, 2 * H), shp},
        ct::partition_view{ct::tensor_span{out, ct::extents{M, H}}, shp}, bx, by);
  }
}

#define X(op, dt, CT, TM, TN, AX)                                                                    \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN##_##AX(CT* x, CT* out, int M, int H) {         \
    silu_and_mul_tile<0, CT, TM, TN, AX>(x, out, M, H);                                                  \
  }                                                                                                      \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN##_##AX##_a16(CT* x, CT* out, int M, int H) {   \
    silu_and_mul_tile<1, CT, TM, TN, AX>(x, out, M, H);                                                  \
  }                                                                                                      \
  extern "C" __tile_global__ void op##_##dt##_##TM##_##TN##_##AX##_exact(CT* x, CT* out, int M, int H) { \
    silu_and_mul_tile<tr::kExact, CT, TM, TN, AX>(x, out, M, H);                                         \
  }
TR_SILU_AND_MUL_KERNELS(X)

// rope (Llama half rotation): out = q * cos + rotate_half(q) * sin, rotate_half(q) = [-q2, q1] for
// q = [q1, q2] split at D/2. Block (bx, by) handles positions [bx*TS, (bx+1)*TS) of batch-head by (one flat grid index, bx fastest).
// The halves of q, cos, sin and out are (S, D/2) views with row stride D, walked in TD-column chunks,
// so any even D works (cos/sin are read as given: both halves, not assumed equal).
// Safe in place (out == q, OpSpec.inplace_ok; ops.cpp check_no_overlap lets exactly that pair through):
// block (bx, bh) reads and writes only positions [bx*TS, (bx+1)*TS) of head bh, no other block touches
// them, and in each column chunk j both stores take both loaded halves (a, b) as operands, so neither
// can be issued before the loads of the elements it overwrites; chunk j+1 reads columns chunk j did not
// write.
#include "common.cuh"

// A: 0 generic, 1 `_a16`, tr::kExact `_exact` (aligned, TS divides S and TD divides D/2: every chunk of every
// block whole, so each is viewed at a base computed here with compile-time extents, no bounds branches;
// common.cuh, tr::tile_at).
template <int A, typename T, int TS, int TD>
__tile__ void rope_tile(T* q, T* cos, T* sin, T* out, int S, int D) {
  q = tr::al<A>(q), cos = tr::al<A>(cos), sin = tr::al<A>(sin), out = tr::al<A>(out);
  // One flat grid axis (cpp/src/ops.cpp), position blocks fastest: B*H may exceed grid y's 65535.
  unsigned tiles_s = tr::ceil_div(S, TS);
  long long bh = ct::bid().x / tiles_s;
  unsigned bx = ct::bid().x % tiles_s;
  int h = tr::dv<A, T>(D / 2);  // A: D/2 (the halves' offset) is a multiple of 16 bytes of T
  D = 2 * h;
  T* qb = tr::al<A>(q + bh * S * D);
  T* ob = tr::al<A>(out + bh * S * D);
  // One TD-column chunk: the first halves' views (q, cos, sin, out), the second halves' ones, the tile index.
  auto chunk = [&](const auto& q1, const auto& q2, const auto& c1, const auto& c2, const auto& s1, const auto& s2,
                   const auto& o1, const auto& o2, unsigned i, unsigned j) {
    auto a = ct::element_cast<float>(tr::load_any<A>(q1, i, j));
    auto b = ct::element_cast<float>(tr::load_any<A>(q2, i, j));
    auto ca = ct::element_cast<float>(tr::load_any<A>(c1, i, j));
    auto cb = ct::element_cast<float>(tr::load_any<A>(c2, i, j));
    auto sa = ct::element_cast<float>(tr::load_any<A>(s1, i, j));
    auto sb = ct::element_cast<float>(tr::load_any<A>(s2, i, j));
    tr::store_any<A>(o1, ct::element_cast<T>(a * ca - b * sa), i, j);
    tr::store_any<A>(o2, ct::element_cast<T>(b * cb + a * sb), i, j);
  };
  int nc = tr::ceil_div(h, TD);
  if constexpr (A == tr::kExact) {
    const long long row = static_cast<long long>(bx) * TS * D;  // this block's first position, in q's head and cos
    for (int j = 0; j < nc; ++j) {
      const long long at = row + static_cast<long long>(j) * TD;
      chunk(tr::tile_at<TS, TD>(qb, at, D), tr::tile_at<TS, TD>(qb, at + h, D), tr::tile_at<TS, TD>(cos, at, D),
            tr::tile_at<TS, TD>(cos, at + h, D), tr::tile_at<TS, TD>(sin, at, D), tr::tile_at<TS, TD>(sin, at + h, D),
            tr::tile_at<TS, TD>(ob, at, D), tr::tile_at<TS, TD>(ob, at + h, D), 0, 0);
    }
  } else {
    auto shp = ct::shape<TS, TD>{};
    ct::partition_view q1{tr::strided_rows(qb, S, h, D), shp}, q2{tr::strided_rows(tr::al<A>(qb + h), S, h, D), shp};
    ct::partition_view c1{tr::strided_rows(cos, S, h, D), shp}, c2{tr::strided_rows(tr::al<A>(cos + h), S, h, D), shp};
    ct::partition_view s1{tr::strided_rows(sin, S, h, D), shp}, s2{tr::strided_rows(tr::al<A>(sin + h), S, h, D), shp};
    ct::partition_view o1{tr::strided_rows(ob, S, h, D), shp}, o2{tr::strided_rows(tr::al<A>(ob + h), S, h, D), shp};
    for (int j = 0; j < nc; ++j) chunk(q1, q2, c1, c2, s1, s2, o1, o2, bx, j);
  }
}

// OCC: the occupancy hint (common.cuh).
#define X(op, dt, CT, TS, TD, OCC)                                                                 \
  extern "C" TR_HINT_OCC_##OCC __tile_global__ void op##_##dt##_##TS##_##TD##_##OCC(              \
      CT* q, CT* cos, CT* sin, CT* out, int S, int D) {                                            \
    rope_tile<0, CT, TS, TD>(q, cos, sin, out, S, D);                                              \
  }                                                                                                \
  extern "C" TR_HINT_OCC_##OCC __tile_global__ void op##_##dt##_##TS##_##TD##_##OCC##_a16(        \
      CT* q, CT* cos, CT* sin, CT* out, int S, int D) {                                            \
    rope_tile<1, CT, TS, TD>(q, cos, sin, out, S, D);                                              \
  }                                                                                                \
  extern "C" TR_HINT_OCC_##OCC __tile_global__ void op##_##dt##_##TS##_##TD##_##OCC##_exact(      \
      CT* q, CT* cos, CT* sin, CT* out, int S, int D) {                                            \
    rope_tile<tr::kExact, CT, TS, TD>(q, cos, sin, out, S, D);                                     \
  }
TR_ROPE_KERNELS(X)

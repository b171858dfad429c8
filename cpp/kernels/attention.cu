// attention: flash-attention forward, out = softmax(q k^T * scale [+ causal mask]) v, q/out (B, H, S, D),
// k/v (B, Hkv, Sk, D) with Hkv | H (grouped-query: query head h reads K/V head h / G, G = H / Hkv) and D a
// compile-time head dim. Scores are kept in log2 units (the module passes scale * log2(e)), so exp2 is used
// throughout; each block walks its keys in TK chunks with an online softmax (running max m, running sum l,
// fp32 accumulator rescaled by exp2(m_old - m_new)).
//
// Rows (python/tilerosetta/kernels/attention_split.py; the module plans them, cpp/src/ops.cpp): q and out are
// NR row sets of R rows read against K/V row set n / GQ of NR / GQ: (B*H, S, D) with GQ = G, or, when the G
// heads of a group fit one query tile (decode: G*S <= TQ), the packed (B*Hkv, G*S, D) with GQ = 1, where row
// r is head r / S of the group. Either way row r is query r % S.
//
// Split-KV (flash-decoding), when the row tiles are too few to fill the GPU: block (split, row block, row set)
// walks key tiles [split*CT, (split+1)*CT) and writes its row max m, row sum l and unnormalised accumulator
// to fp32 workspaces of Rp = ceil(R / TQ) * TQ rows per (row set, split); the `_combine` kernel merges them.
// With one split the block stores its normalised rows straight to out.
//
// Masking: key columns >= Sk, and for causal also key columns > (r % S) + Sk - S (the mask is aligned to the
// end of the keys; the module refuses causal with S > Sk), are set to -inf. A row that sees no key of a
// split's chunk keeps m = -inf, l = 0, acc = 0 (the max is taken as 0 for the exponents, so no
// exp2(-inf - -inf) = NaN), which gives it weight 0 in the combine; split 0 holds key 0, which every row sees,
// so the merged max is finite. Rows past R compute on zero queries and are never stored to out. For causal,
// chunks entirely right of the block's last row's limit are skipped.
#include "common.cuh"

// Key/value tile j: of K/V row set bkv of a 3-D view by TMA, or of a 2-D view at the row set without TMA.
template <int R, int C, bool TMA, typename V>
__tile__ auto kv_tile(const V& view, int bkv, int j) {
  if constexpr (TMA) return ct::reshape(view.load_masked(bkv, j, 0), ct::shape<R, C>{});
  else return tr::load_no_tma(view, j, 0);
}

// The block's result: with one split the normalised (TQ, D) rows, to out; else m, l and acc, to the split's
// workspace rows (plain stores: one (TQ, D) fp32 tile per block, and the workspace views have computed bases).
template <typename T, int D, int TQ>
struct Partial {
  tr::ftile<TQ, 1> m, l;
  tr::ftile<TQ, D> acc;
};

// The online-softmax walk over key tiles [j0, j1) of one block of TQ query rows, shared by both bodies. TMA:
// pk, pv are 3-D views read at K/V row set bkv by TMA (reshaped to (TK, D)); else 2-D views at the row set,
// read without TMA. No lambdas: with the tile loads passed in as lambdas capturing the views, tileiras 13.4
// compiled the aligned body to 512 threads with 600-1776 B of spills per thread and most tiles on LDG instead
// of TMA (sm_90); read here, it is 256 threads, no spills, all TMA. __restrict__ and ct::irange for the key
// loop: see gemm.cuh (without them the loop is a while-form Tile IR `loop` that tileiras does not pipeline,
// and every load is ordered before the final store).
template <typename T, int D, int TQ, int TK, bool TMA, typename Q, typename V>
__tile__ Partial<T, D, TQ> flash_rows(const Q& qt, const V& pk, const V& pv, int bkv, int bx, int S, int Sk,
                                      int split, int CT, float qk_scale_log2, int causal) {
  using Col = tr::ftile<TQ, 1>;
  using Scores = tr::ftile<TQ, TK>;
  // exp2 with subnormals flushed to zero: a bare MUFU.EX2 per score (p < 2^-126 becomes 0); preserving them
  // costs a compare and two multiplies per score around it (sm_90 SASS: 4080 -> 3920 instructions at TQ 16).
  constexpr ct::round_subnormals_to_zero_t ftz{};
  Col m = ct::full<Col>(-INFINITY);
  Col l = ct::zeros<Col>();
  auto acc = ct::zeros<tr::ftile<TQ, D>>();

  // Last visible key + 1, per query row r (query r % S): Sk, or min(r % S + 1 + Sk - S, Sk) when causal
  // (integer blend, no branch).
  auto rows = ct::iota<ct::tile<int, ct::shape<TQ, 1>>>() + bx * TQ;
  auto limit = Sk + causal * (ct::min(rows % S + (1 + Sk - S), Sk) - Sk);
  auto lane = ct::iota<ct::tile<int, ct::shape<1, TK>>>();

  // The block's last row r < (bx + 1) * TQ sees at most r + 1 + Sk - S keys (r % S <= r).
  int kv_end = causal ? ((bx + 1) * TQ + Sk - S < Sk ? (bx + 1) * TQ + Sk - S : Sk) : Sk;
  int nk = tr::ceil_div(kv_end, TK);
  int j0 = split * CT, j1 = j0 + CT < nk ? j0 + CT : nk;
  for (int j : ct::irange(j0, j1)) {
    auto kt = kv_tile<TK, D, TMA>(pk, bkv, j);
    auto s = ct::mma(qt, ct::transpose(kt), ct::zeros<Scores>()) * qk_scale_log2;
    auto visible = (lane + j * TK) < limit;
    s = ct::select(visible, s, ct::full<Scores>(-INFINITY));
    auto m_new = ct::max(m, ct::reduce_max(s, 1_ic));
    // No key of the chunk visible to the row yet: exponents against 0, so p = alpha = 0, not NaN.
    auto m_exp = ct::select(m_new == ct::full<Col>(-INFINITY), ct::zeros<Col>(), m_new);
    auto p = ct::exp2(s - m_exp, ftz);
    auto alpha = ct::exp2(m - m_exp, ftz);
    l = l * alpha + ct::sum(p, 1_ic);
    acc = ct::mma(ct::element_cast<T>(p), kv_tile<TK, D, TMA>(pv, bkv, j), acc * alpha);
    m = m_new;
  }
  return {m, l, acc};
}

// Writes a block's partial (several splits) to the workspaces at (row set n, split, row block bx).
template <int D, int TQ, typename P>
__tile__ void store_partial(const P& r, float* m_ws, float* l_ws, float* acc_ws, int n, int split, int n_split,
                            int Rp, int bx) {
  long long w = (long long)n * n_split + split;
  ct::partition_view pm{ct::tensor_span{m_ws + w * Rp, ct::extents{Rp, 1}}, ct::shape<TQ, 1>{}};
  ct::partition_view pl{ct::tensor_span{l_ws + w * Rp, ct::extents{Rp, 1}}, ct::shape<TQ, 1>{}};
  ct::partition_view pa{ct::tensor_span{acc_ws + w * Rp * D, ct::extents{Rp, D}}, ct::shape<TQ, D>{}};
  tr::store_no_tma(pm, r.m, bx, 0);
  tr::store_no_tma(pl, r.l, bx, 0);
  tr::store_no_tma(pa, r.acc, bx, 0);
}

// One flat grid axis (cpp/src/ops.cpp): split fastest, then the row block, then the row set (NR may exceed
// grid y's 65535).
struct BlockIndex {
  int split, bx, n;
};
template <int TQ>
__tile__ BlockIndex block_index(int R, int n_split) {
  int nq = tr::ceil_div(R, TQ);
  int b = ct::bid().x;
  return {b % n_split, b / n_split % nq, b / n_split / nq};
}

// The generic body (no alignment assumed): 2-D (R, D) views at the row set's offset, every load a 2-byte
// element load (correct and slow).
template <typename T, int D, int TQ, int TK>
__tile__ void attention_any(T* __restrict__ q, T* __restrict__ k, T* __restrict__ v, T* __restrict__ out,
                            float* __restrict__ m_ws, float* __restrict__ l_ws, float* __restrict__ acc_ws, int R,
                            int S, int Sk, int GQ, int n_split, int CT, float qk_scale_log2, int causal) {
  BlockIndex b = block_index<TQ>(R, n_split);
  long long off = (long long)b.n * R * D;
  long long kv_off = (long long)(b.n / GQ) * Sk * D;
  ct::partition_view pq{ct::tensor_span{q + off, ct::extents{R, D}}, ct::shape<TQ, D>{}};
  ct::partition_view pk{ct::tensor_span{k + kv_off, ct::extents{Sk, D}}, ct::shape<TK, D>{}};
  ct::partition_view pv{ct::tensor_span{v + kv_off, ct::extents{Sk, D}}, ct::shape<TK, D>{}};
  auto r = flash_rows<T, D, TQ, TK, false>(tr::load_no_tma(pq, b.bx, 0), pk, pv, 0, b.bx, S, Sk, b.split, CT,
                                           qk_scale_log2, causal);
  if (n_split > 1) {
    store_partial<D, TQ>(r, m_ws, l_ws, acc_ws, b.n, b.split, n_split, tr::ceil_div(R, TQ) * TQ, b.bx);
  } else {
    ct::partition_view po{ct::tensor_span{out + off, ct::extents{R, D}}, ct::shape<TQ, D>{}};
    tr::store_no_tma(po, ct::element_cast<T>(r.acc / r.l), b.bx, 0);
  }
}

// The aligned body (the module checked q, k, v, out 16-byte aligned; D is a compile-time multiple of 8):
// 3-D views (NR, R, D) and (NR / GQ, Sk, D) of the kernel's own pointer arguments, so every tile loads and
// stores by TMA with a descriptor encoded on the host (a view of a computed base would get one built on the
// device, in a workspace the launch never provides: gemm.cuh). A tile past R or Sk reads zeros inside its
// own row set (the view's bounds are per dimension) and the store drops its rows past R.
// repro/tile_cpp/attention_tma.cu checks this body's pieces against torch on a GPU.
template <typename T, int D, int TQ, int TK>
__tile__ void attention_tma(T* __restrict__ q, T* __restrict__ k, T* __restrict__ v, T* __restrict__ out,
                            float* __restrict__ m_ws, float* __restrict__ l_ws, float* __restrict__ acc_ws, int NR,
                            int R, int S, int Sk, int GQ, int n_split, int CT, float qk_scale_log2, int causal) {
  q = tr::al<true>(q), k = tr::al<true>(k), v = tr::al<true>(v), out = tr::al<true>(out);
  BlockIndex b = block_index<TQ>(R, n_split);
  ct::partition_view pq{ct::tensor_span{q, ct::extents{NR, R, D}}, ct::shape<1, TQ, D>{}};
  ct::partition_view pk{ct::tensor_span{k, ct::extents{NR / GQ, Sk, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view pv{ct::tensor_span{v, ct::extents{NR / GQ, Sk, D}}, ct::shape<1, TK, D>{}};
  auto qt = ct::reshape(pq.load_masked(b.n, b.bx, 0), ct::shape<TQ, D>{});
  auto r = flash_rows<T, D, TQ, TK, true>(qt, pk, pv, b.n / GQ, b.bx, S, Sk, b.split, CT, qk_scale_log2, causal);
  if (n_split > 1) {
    store_partial<D, TQ>(r, m_ws, l_ws, acc_ws, b.n, b.split, n_split, tr::ceil_div(R, TQ) * TQ, b.bx);
  } else {
    ct::partition_view po{ct::tensor_span{out, ct::extents{NR, R, D}}, ct::shape<1, TQ, D>{}};
    po.store_masked(ct::reshape(ct::element_cast<T>(r.acc / r.l), ct::shape<1, TQ, D>{}), b.n, b.bx, 0);
  }
}

// The split-KV combine: one block per output row (row set n, row r < R; grid NR * R), which loads its row's
// n_split partials NS at a time as one (NS, 1) / (NS, D) tile (the rows are Rp apart in the workspaces) and
// merges them: out = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s with M = max_s m_s, a running max across
// chunks. A block per 16-row block walking the splits one load after another took 8.4 us at B1 (8 blocks x 8
// splits, H200 profile in bench/GAPS.md) against 2.0 us for Triton's one-program-per-row form. Splits past
// n_split read as m = -inf (weight 0; the padded l and acc are zeros); split 0 sees key 0, so M is finite.
template <typename T, int D, int TQ>
__tile__ void attention_combine(float* __restrict__ m_ws, float* __restrict__ l_ws, float* __restrict__ acc_ws,
                                T* __restrict__ out, int R, int n_split) {
  constexpr int NS = 16;
  using Col = tr::ftile<NS, 1>;
  int Rp = tr::ceil_div(R, TQ) * TQ;
  int n = ct::bid().x / R, r = ct::bid().x % R;
  long long row0 = (long long)n * n_split * Rp + r;  // (row set n, split 0, row r)
  ct::partition_view pm{tr::strided_rows(m_ws + row0, n_split, 1, Rp), ct::shape<NS, 1>{}};
  ct::partition_view pl{tr::strided_rows(l_ws + row0, n_split, 1, Rp), ct::shape<NS, 1>{}};
  ct::partition_view pa{tr::strided_rows(acc_ws + row0 * D, n_split, D, Rp * D), ct::shape<NS, D>{}};
  auto big_m = ct::full<tr::ftile<1, 1>>(-INFINITY);
  auto l = ct::zeros<tr::ftile<1, 1>>();
  auto acc = ct::zeros<tr::ftile<1, D>>();
  auto lane = ct::iota<ct::tile<int, ct::shape<NS, 1>>>();
  for (int c : ct::irange(0, tr::ceil_div(n_split, NS))) {
    Col m_c = ct::select(lane + c * NS < n_split, tr::load_no_tma(pm, c, 0), ct::full<Col>(-INFINITY));
    auto m_new = ct::max(big_m, ct::reduce_max(m_c, 0_ic));
    auto w = ct::exp2(m_c - m_new);       // (NS, 1): 0 for padded or unseen splits
    auto alpha = ct::exp2(big_m - m_new);  // 0 on the first chunk (big_m = -inf, m_new finite)
    l = l * alpha + ct::sum(tr::load_no_tma(pl, c, 0) * w, 0_ic);
    acc = acc * alpha + ct::sum(tr::load_no_tma(pa, c, 0) * w, 0_ic);
    big_m = m_new;
  }
  ct::partition_view po{ct::tensor_span{out + ((long long)n * R + r) * D, ct::extents{1, D}}, ct::shape<1, D>{}};
  tr::store_no_tma(po, ct::element_cast<T>(acc / l), 0, 0);
}

// NR row sets of R rows (query r % S), Sk keys, K/V row set n / GQ; n_split splits of CT key tiles each, with
// fp32 workspaces m_ws, l_ws (NR * n_split, Rp) and acc_ws (NR * n_split, Rp, D) (unused with one split).
#define TR_ATTENTION_PARAMS(CT)                                                                           \
  CT *__restrict__ q, CT *__restrict__ k, CT *__restrict__ v, CT *__restrict__ out, float *__restrict__ m_ws, \
      float *__restrict__ l_ws, float *__restrict__ acc_ws, int NR, int R, int S, int Sk, int GQ, int n_split, \
      int CT_, float qk_scale_log2, int causal
// A config's three entries (HINTS: its worker-warps and occupancy hints; the combine takes neither).
#define TR_ATTENTION_ENTRIES(name, HINTS, CT, D, TQ, TK)                                                        \
  extern "C" HINTS __tile_global__ void name(TR_ATTENTION_PARAMS(CT)) {                                          \
    attention_any<CT, D, TQ, TK>(q, k, v, out, m_ws, l_ws, acc_ws, R, S, Sk, GQ, n_split, CT_, qk_scale_log2,   \
                                 causal);                                                                    \
  }                                                                                                          \
  extern "C" HINTS __tile_global__ void name##_a16(TR_ATTENTION_PARAMS(CT)) {                                    \
    attention_tma<CT, D, TQ, TK>(q, k, v, out, m_ws, l_ws, acc_ws, NR, R, S, Sk, GQ, n_split, CT_,            \
                                 qk_scale_log2, causal);                                                     \
  }                                                                                                          \
  extern "C" __tile_global__ void name##_combine(float* __restrict__ m_ws, float* __restrict__ l_ws,            \
                                                 float* __restrict__ acc_ws, CT* __restrict__ out, int R,      \
                                                 int n_split) {                                              \
    attention_combine<CT, D, TQ>(m_ws, l_ws, acc_ws, out, R, n_split);                                       \
  }
#define X(op, dt, CT, D, TQ, TK, W, OCC) \
  TR_ATTENTION_ENTRIES(op##_##dt##_##D##_##TQ##_##TK##_##W##_##OCC, TR_HINT_W_##W TR_HINT_OCC_##OCC, CT, D, TQ, TK)
TR_ATTENTION_KERNELS(X)

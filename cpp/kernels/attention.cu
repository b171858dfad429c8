// attention: flash-attention forward, out = softmax(q k^T * scale [+ causal mask]) v, q/out (B, H, S, D),
// k/v (B, Hkv, Sk, D) with Hkv | H (grouped-query: query head h reads K/V head h / G, G = H / Hkv) and D a
// compile-time head dim. Block (bx, by) (one flat grid index, bx fastest) owns query rows [bx*TQ, (bx+1)*TQ)
// of batch-head by, reads K/V of batch-kv-head by / G ((b*H + h) / G = b*Hkv + h/G), and walks the keys in
// TK chunks with an online softmax (running max m, running sum l, fp32 accumulator rescaled by
// exp2(m_old - m_new)). Scores are kept in log2 units (the module passes scale * log2(e)), so exp2 is used
// throughout.
//
// Masking: key columns >= Sk, and for causal also key columns > query row + Sk - S (the mask is aligned to
// the end of the keys; the module refuses causal with S > Sk), are set to -inf. Column 0 is always
// visible, so every row's max is finite after the first chunk and no NaN is formed (rows past S see real
// keys and are never stored). For causal, chunks entirely right of the block's last row's limit are skipped.
// No split-KV (flash-decoding) schedule here: bench/GAPS.md says why.
#include "common.cuh"

// Key/value tile j: of K/V head bkv of a 3-D view by TMA, or of a 2-D view at the head without TMA.
template <int R, int C, bool TMA, typename V>
__tile__ auto kv_tile(const V& view, int bkv, int j) {
  if constexpr (TMA) return ct::reshape(view.load_masked(bkv, j, 0), ct::shape<R, C>{});
  else return tr::load_no_tma(view, j, 0);
}

// The online-softmax walk over the key tiles of one block of TQ query rows, shared by both bodies. TMA: pk, pv
// are 3-D views read at K/V head bkv by TMA (reshaped to (TK, D)); else 2-D views at the head, read without
// TMA. Returns the normalised (TQ, D) output in T. No lambdas: with the tile loads passed in as lambdas
// capturing the views, tileiras 13.4 compiled the aligned body to 512 threads with 600-1776 B of spills per
// thread and most tiles on LDG instead of TMA (sm_90); read here, it is 256 threads, no spills, all TMA.
// __restrict__ and ct::irange for the key loop: see gemm.cuh (without them the loop is a while-form Tile IR
// `loop` that tileiras does not pipeline, and every load is ordered before the final store).
template <typename T, int D, int TQ, int TK, bool TMA, typename Q, typename V>
__tile__ auto flash_rows(const Q& qt, const V& pk, const V& pv, int bkv, int bx, int S, int Sk,
                         float qk_scale_log2, int causal) {
  using Col = tr::ftile<TQ, 1>;
  using Scores = tr::ftile<TQ, TK>;
  Col m = ct::full<Col>(-INFINITY);
  Col l = ct::zeros<Col>();
  auto acc = ct::zeros<tr::ftile<TQ, D>>();

  // Last visible key + 1, per query row: Sk, or min(row + 1 + Sk - S, Sk) when causal (integer blend, no
  // branch).
  auto rows = ct::iota<ct::tile<int, ct::shape<TQ, 1>>>() + bx * TQ;
  auto limit = Sk + causal * (ct::min(rows + (1 + Sk - S), Sk) - Sk);
  auto lane = ct::iota<ct::tile<int, ct::shape<1, TK>>>();

  int kv_end = causal ? ((bx + 1) * TQ + Sk - S < Sk ? (bx + 1) * TQ + Sk - S : Sk) : Sk;
  int nk = tr::ceil_div(kv_end, TK);
  for (int j : ct::irange(0, nk)) {
    auto kt = kv_tile<TK, D, TMA>(pk, bkv, j);
    auto s = ct::mma(qt, ct::transpose(kt), ct::zeros<Scores>()) * qk_scale_log2;
    auto visible = (lane + j * TK) < limit;
    s = ct::select(visible, s, ct::full<Scores>(-INFINITY));
    auto m_new = ct::max(m, ct::reduce_max(s, 1_ic));
    auto p = ct::exp2(s - m_new);
    auto alpha = ct::exp2(m - m_new);
    l = l * alpha + ct::sum(p, 1_ic);
    acc = ct::mma(ct::element_cast<T>(p), kv_tile<TK, D, TMA>(pv, bkv, j), acc * alpha);
    m = m_new;
  }
  return ct::element_cast<T>(acc / l);
}

// The generic body (no alignment assumed): 2-D (S, D) views at the head's offset, every load a 2-byte
// element load (correct and slow).
template <typename T, int D, int TQ, int TK>
__tile__ void attention_any(T* __restrict__ q, T* __restrict__ k, T* __restrict__ v, T* __restrict__ out,
                            int S, int Sk, int G, float qk_scale_log2, int causal) {
  // One flat grid axis (cpp/src/ops.cpp), query blocks fastest: B*H may exceed grid y's 65535.
  int nq = tr::ceil_div(S, TQ);
  int bh = ct::bid().x / nq, bx = ct::bid().x % nq;
  long long off = (long long)bh * S * D;
  long long kv_off = (long long)(bh / G) * Sk * D;
  ct::partition_view pq{ct::tensor_span{q + off, ct::extents{S, D}}, ct::shape<TQ, D>{}};
  ct::partition_view pk{ct::tensor_span{k + kv_off, ct::extents{Sk, D}}, ct::shape<TK, D>{}};
  ct::partition_view pv{ct::tensor_span{v + kv_off, ct::extents{Sk, D}}, ct::shape<TK, D>{}};
  ct::partition_view po{ct::tensor_span{out + off, ct::extents{S, D}}, ct::shape<TQ, D>{}};
  auto o = flash_rows<T, D, TQ, TK, false>(tr::load_no_tma(pq, bx, 0), pk, pv, 0, bx, S, Sk, qk_scale_log2, causal);
  tr::store_no_tma(po, o, bx, 0);
}

// The aligned body (the module checked q, k, v, out 16-byte aligned; D is a compile-time multiple of 8):
// 3-D views (B*H, S, D) and (B*Hkv, Sk, D) of the kernel's own pointer arguments, so every tile loads and
// stores by TMA with a descriptor encoded on the host (a view of a computed base would get one built on the
// device, in a workspace the launch never provides: gemm.cuh). A tile past S or Sk reads zeros inside its
// own head (the view's bounds are per dimension) and the store drops its rows past S.
// repro/tile_cpp/attention_tma.cu checks this body's pieces against torch on a GPU.
template <typename T, int D, int TQ, int TK>
__tile__ void attention_tma(T* __restrict__ q, T* __restrict__ k, T* __restrict__ v, T* __restrict__ out,
                            int BH, int S, int Sk, int G, float qk_scale_log2, int causal) {
  q = tr::al<true>(q), k = tr::al<true>(k), v = tr::al<true>(v), out = tr::al<true>(out);
  int nq = tr::ceil_div(S, TQ);
  int bh = ct::bid().x / nq, bx = ct::bid().x % nq, bkv = bh / G;
  ct::partition_view pq{ct::tensor_span{q, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  ct::partition_view pk{ct::tensor_span{k, ct::extents{BH / G, Sk, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view pv{ct::tensor_span{v, ct::extents{BH / G, Sk, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  auto qt = ct::reshape(pq.load_masked(bh, bx, 0), ct::shape<TQ, D>{});
  auto o = flash_rows<T, D, TQ, TK, true>(qt, pk, pv, bkv, bx, S, Sk, qk_scale_log2, causal);
  po.store_masked(ct::reshape(o, ct::shape<1, TQ, D>{}), bh, bx, 0);
}

// S: query rows, Sk: keys, G = H / Hkv; BH = B * H (the aligned body's view extent).
#define X(op, dt, CT, D, TQ, TK, W)                                                                \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##D##_##TQ##_##TK##_##W(               \
      CT* __restrict__ q, CT* __restrict__ k, CT* __restrict__ v, CT* __restrict__ out, int BH,    \
      int S, int Sk, int G, float qk_scale_log2, int causal) {                                     \
    attention_any<CT, D, TQ, TK>(q, k, v, out, S, Sk, G, qk_scale_log2, causal);                   \
  }                                                                                                \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##D##_##TQ##_##TK##_##W##_a16(         \
      CT* __restrict__ q, CT* __restrict__ k, CT* __restrict__ v, CT* __restrict__ out, int BH,    \
      int S, int Sk, int G, float qk_scale_log2, int causal) {                                     \
    attention_tma<CT, D, TQ, TK>(q, k, v, out, BH, S, Sk, G, qk_scale_log2, causal);               \
  }
TR_ATTENTION_KERNELS(X)

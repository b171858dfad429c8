// attention: flash-attention forward, out = softmax(q k^T * scale [+ causal mask]) v, q/k/v/out
// (B, H, S, D) with D a compile-time head dim. Block (bx, by) owns query rows [bx*TQ, (bx+1)*TQ) of
// batch-head by and walks the keys in TK chunks with an online softmax (running max m, running sum l,
// fp32 accumulator rescaled by exp2(m_old - m_new)). Scores are kept in log2 units (the module passes
// scale * log2(e)), so exp2 is used throughout.
//
// Masking: key columns >= S, and for causal also key columns > query row, are set to -inf. Column 0 is
// always visible, so every row's max is finite after the first chunk and no NaN is formed (rows past S
// see the S real keys and are never stored). For causal, chunks entirely right of the block's last row
// are skipped.
#include "common.cuh"

// Every view is 3-D, (B*H, S, D), over the kernel's own pointer arguments, with (1, TQ|TK, D) tiles
// reshaped to 2-D: a base computed in the kernel (q + bh * S * D) makes tileiras build the TMA
// descriptors on the device in a workspace that cuLaunchKernel does not provide (gemm.cuh says more);
// that faulted on the H200.
template <bool A, typename T, int D, int TQ, int TK>
__tile__ void attention_tile(T* q, T* k, T* v, T* out, int BH, int S, float qk_scale_log2, int causal) {
  // A: the four pointers are 16-byte aligned (D is a compile-time multiple of 16 bytes), so every
  // (b, h) slice is too and the loads become TMA (common.cuh).
  q = tr::al<A>(q), k = tr::al<A>(k), v = tr::al<A>(v), out = tr::al<A>(out);
  int bx = ct::bid().x, bh = ct::bid().y;
  ct::partition_view pq{ct::tensor_span{q, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  // K is loaded as (1, TK, D) row-major tiles (TMA) and transposed in registers for q k^T: a strided
  // or column-major 3-D K^T view compiles to 2-byte LDGs (cuobjdump, sm_90).
  ct::partition_view pk{ct::tensor_span{k, ct::extents{BH, S, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view pv{ct::tensor_span{v, ct::extents{BH, S, D}}, ct::shape<1, TK, D>{}};
  ct::partition_view po{ct::tensor_span{out, ct::extents{BH, S, D}}, ct::shape<1, TQ, D>{}};
  auto kt = [&](int j) { return ct::transpose(ct::reshape(pk.load_masked(bh, j, 0), ct::shape<TK, D>{})); };
  auto vt = [&](int j) { return ct::reshape(pv.load_masked(bh, j, 0), ct::shape<TK, D>{}); };

  auto qt = ct::reshape(pq.load_masked(bh, bx, 0), ct::shape<TQ, D>{});
  using Col = tr::ftile<TQ, 1>;
  using Scores = tr::ftile<TQ, TK>;
  Col m = ct::full<Col>(-INFINITY);
  Col l = ct::zeros<Col>();
  auto acc = ct::zeros<tr::ftile<TQ, D>>();

  // Last visible key + 1, per query row: S, or min(row + 1, S) when causal (integer blend, no branch).
  auto rows = ct::iota<ct::tile<int, ct::shape<TQ, 1>>>() + bx * TQ;
  auto limit = S + causal * (ct::min(rows + 1, S) - S);
  auto lane = ct::iota<ct::tile<int, ct::shape<1, TK>>>();

  int kv_end = causal ? ((bx + 1) * TQ < S ? (bx + 1) * TQ : S) : S;
  int nk = tr::ceil_div(kv_end, TK);
  // Chunks [0, n_full) hold only real keys visible to every row of the block (key (j+1)*TK - 1 <= first
  // row bx*TQ when causal, < S always): they skip the mask. The rest [n_full, nk) apply it.
  int first_row_plus1 = bx * TQ + 1 < S ? bx * TQ + 1 : S;
  int n_full = (causal ? first_row_plus1 : S) / TK;
  for (int j = 0; j < n_full; ++j) {
    auto s = ct::mma(qt, kt(j), ct::zeros<Scores>()) * qk_scale_log2;
    auto m_new = ct::max(m, ct::reduce_max(s, 1_ic));
    auto p = ct::exp2(s - m_new);
    auto alpha = ct::exp2(m - m_new);
    l = l * alpha + ct::sum(p, 1_ic);
    acc = ct::mma(ct::element_cast<T>(p), vt(j), acc * alpha);
    m = m_new;
  }
  for (int j = n_full; j < nk; ++j) {
    auto s = ct::mma(qt, kt(j), ct::zeros<Scores>()) * qk_scale_log2;
    auto visible = (lane + j * TK) < limit;
    s = ct::select(visible, s, ct::full<Scores>(-INFINITY));
    auto m_new = ct::max(m, ct::reduce_max(s, 1_ic));
    auto p = ct::exp2(s - m_new);
    auto alpha = ct::exp2(m - m_new);
    l = l * alpha + ct::sum(p, 1_ic);
    acc = ct::mma(ct::element_cast<T>(p), vt(j), acc * alpha);
    m = m_new;
  }
  po.store_masked(ct::reshape(ct::element_cast<T>(acc / l), ct::shape<1, TQ, D>{}), bh, bx, 0);
}

// W: the num_worker_warps_per_cta hint (common.cuh); D = 128 with TQ = 128 spills without 8.
#define X(op, dt, CT, D, TQ, TK, W)                                                                \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##D##_##TQ##_##TK##_##W(               \
      CT* q, CT* k, CT* v, CT* out, int BH, int S, float qk_scale_log2, int causal) {                      \
    attention_tile<false, CT, D, TQ, TK>(q, k, v, out, BH, S, qk_scale_log2, causal);                  \
  }                                                                                                \
  extern "C" TR_HINT_W_##W __tile_global__ void op##_##dt##_##D##_##TQ##_##TK##_##W##_a16(         \
      CT* q, CT* k, CT* v, CT* out, int BH, int S, float qk_scale_log2, int causal) {                      \
    attention_tile<true, CT, D, TQ, TK>(q, k, v, out, BH, S, qk_scale_log2, causal);                   \
  }
TR_ATTENTION_KERNELS(X)

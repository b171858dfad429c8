//! attention: out = softmax(q k^T * scale [causal]) v, q/out (B, H, S, D), k/v (B, Hkv, Sk, D) with
//! Hkv | H (grouped-query: query head h reads K/V head h / G, G = H / Hkv), D in {64, 128}, fp16/bf16
//! with fp32 accumulation. The causal mask is aligned to the end of the keys: query i sees keys
//! j <= i + Sk - S (plan refuses causal with S > Sk).
//!
//! Flash-attention forward: one tile block per (row set, BM query rows); it streams BN keys at a
//! time, keeping a running max m, running sum l and an un-normalised BM x D accumulator (online
//! softmax, base-2 exponentials with log2(e) folded into the scale). Keys past Sk are masked to -inf;
//! with `CAUSAL` the loop also stops at the block's last query row and masks keys after each row.
//! Only the key tiles that hold such keys pay for the mask. Key tile 0 always holds a visible key for
//! every row (key 0), so m is finite from the first step and no row ever divides by zero.
//!
//! The schedule (`schedule`; the same choices as the other backends, python/tilerosetta/kernels/
//! attention_split.py, whose `split_plan` / `packed_rows` arithmetic is ported here exactly):
//! * Rows. Per head, q and out are the (B*H, S, D) view and row set n reads K/V head n / G. When the G
//!   query heads of one K/V head fit one query tile together (G > 1, G * S <= BM: decode), q and out are
//!   seen as (B*Hkv, G*S, D) instead, the same row-major memory: row r of row set n is head n*G + r / S,
//!   query r % S, and the row set reads K/V head n (group divisor 1). Why: a decode tile then holds G
//!   real rows instead of 1, and K/V are read once per group instead of once per query head. The causal
//!   limit of row r is (r % S) + Sk - S. Tiles shrink to the work: BM = max(16, min(BM, next_pow2(rows
//!   per set))) (a G=4 decode tile is 16 rows, not 64), BN = max(16, min(BN, next_pow2(Sk))).
//! * Split-KV (flash-decoding). When the row tiles (row sets x row blocks) are fewer than the SMs (decode
//!   at small batch: B=1, Hkv=8 is 8 tiles for 132 SMs), the keys are cut into n_split chunks of `chunk`
//!   keys (a multiple of BN). Block (row set, split, row block) of `attention_split` walks only its chunk
//!   and writes its row max m (log2 units), row sum l and fp32 accumulator to fp32 workspaces;
//!   `attention_combine` then merges each output row's splits (one block per row, 16 splits per load):
//!   M = max_s m_s, out = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s.
//!   A split in which a row sees no key (causal) leaves m = -inf, l = 0, acc = 0: weight 0. Its masked
//!   tiles guard the max (the exp2 offsets use 0 where m is still -inf, so -inf - -inf never makes NaN).
//!   Split 0 holds key 0, which every row sees, so M is finite. The workspaces are Rust's own scratch
//!   memory (runtime::with_scratch), never seen by Python. The SM count is the device's (runtime::
//!   sm_count); compile-only specs and plan-time grid checks assume the H200's 132, as Python does
//!   without a GPU.
//! * Kernels: `attention` / `attention_folded` (per-head rows, no split: the prefill path, unchanged by
//!   the decode schedule; `attention_by_query` is `attention` in query-block order, config QO), `attention_rows` (packed rows, no split), `attention_split` + `attention_combine`.
//!   Every grid is the output partition's tile counts (grid x = row sets [x splits], y = row blocks; the
//!   combine's y = rows). Only the per-head path can have more than 65535 row blocks on y (it then folds
//!   into grid x, issue 16): a packed row set is one row block, and a split schedule has fewer row tiles
//!   than SMs (so at most 131 * BM rows).

use crate::args::{check_no_alias, check_tensor, expect_dim, ArgError, DType, Request};
use crate::config::{self, Config};
use crate::ops::{self, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_3D};
use cutile::tile_kernel::CompileOptions;
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// One BM x D block of queries (head `bh`, query block `mb`), normalised and in T: the body of both
    /// per-head entries (inlined by the cuTile compiler).
    fn attend<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
    >(
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        qk_scale_log2: f32,
        bh: i32,
        mb: i32,
    ) -> Tile<T, { [BM, D] }> {
        let q_len: i32 = get_shape_dim(q.shape(), 1i32);
        let (tq, kvh, s_len, off) = query_block::<T, BM, D>(q, k, bh, mb, q_len);
        let (scale, scale_m, offs_n) = step_tiles::<BM, BN>(qk_scale_log2);
        // Row i of the block is query mb*BM + i.
        let offs_m: Tile<i32, { [BM] }> = iota(shape![BM]);
        let offs_m: Tile<i32, { [BM, 1] }> = offs_m.reshape(shape![BM, 1]) + broadcast_scalar(mb * BM, shape![BM, 1]);
        let offs_m: Tile<i32, { [BM, BN] }> = offs_m.broadcast(shape![BM, BN]);
        let limit: Tile<i32, { [BM, BN] }> = offs_m + broadcast_scalar(off, shape![BM, BN]);
        let s_tile: Tile<i32, { [BM, BN] }> = broadcast_scalar(s_len, shape![BM, BN]);

        // Key tiles [0, n_full) are inside Sk and (CAUSAL) visible to every row of the block: their last
        // key (j+1)*BN - 1 is <= the first row's limit mb*BM + off and < Sk. They run without the mask;
        // the tiles [n_full, n_kv) (the Sk tail, the causal diagonal) pay for it. n_full <= n_kv always.
        let mut kv_end: i32 = s_len;
        let mut n_full: i32 = s_len / BN;
        if CAUSAL == 1i32 {
            kv_end = min((mb + 1i32) * BM + off, s_len);
            n_full = min(mb * BM + 1i32 + off, s_len) / BN;
        }
        let n_kv: i32 = ceil_div(kv_end, BN);
        // Tile 0 holds key 0, visible to every row (rows >= S included), so m is finite after it; a row
        // with every key of a later tile masked keeps m and gets p = exp2(-inf) = 0 there: no guard.
        let (_m_i, l_i, acc) = kv_tiles::<T, BM, BN, D, CAUSAL, FOLD, 0i32>(
            tq, k, v, kvh, scale, scale_m, offs_n, limit, s_tile, 0i32, n_full, n_kv,
        );
        let y: Tile<f32, { [BM, D] }> = true_div(acc, l_i.broadcast(shape![BM, D]));
        let yt: Tile<T, { [BM, D] }> = convert_tile(y);
        yt
    }

    /// Grid (B*H, S/BM), from the output partition (head fastest). B*H is on grid x (no 65535 limit);
    /// S/BM on grid y: past 65535 query blocks the launch takes `attention_folded`.
    #[cutile::entry()]
    pub fn attention<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
    >(
        out: &mut Tensor<T, { [1, BM, D] }>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        qk_scale_log2: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let yt: Tile<T, { [BM, D] }> = attend::<T, BM, BN, D, CAUSAL, FOLD>(q, k, v, qk_scale_log2, pid.0, pid.1);
        // Rows past S fall outside the (B*H, S, D) view and are not written (clipped tile store).
        out.store(yt.reshape(shape![1, BM, D]));
    }

    /// `attention` with the query blocks fastest (config QO = 1): launch block p (x fastest over the same
    /// (B*H, S/BM) grid) takes head p / tq and query block p % tq, causal ones counted from the last (its
    /// rows see the most keys, so the long blocks start first and short ones fill the tail). A wave of CTAs
    /// then reads a few heads' K/V, which the L2 keeps, instead of one or two blocks of every head. Exact
    /// query blocks only (BM | S: the launch checks), so every store is in bounds.
    #[cutile::entry()]
    pub fn attention_by_query<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
    >(
        out: &mut Tensor<T, { [1, BM, D] }>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        qk_scale_log2: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let heads: i32 = get_shape_dim(q.shape(), 0i32);
        let tq: i32 = get_shape_dim(q.shape(), 1i32) / BM;
        let p: i32 = pid.0 + heads * pid.1;
        let bh: i32 = p / tq;
        let mut mb: i32 = p % tq;
        if CAUSAL == 1i32 {
            mb = tq - 1i32 - mb;
        }
        let yt: Tile<T, { [BM, D] }> = attend::<T, BM, BN, D, CAUSAL, FOLD>(q, k, v, qk_scale_log2, bh, mb);
        // SAFETY: a view of out as it is at entry (its token); p -> (bh, mb) is a bijection of the grid onto
        // out's tiles, so each tile is written by one block, and BM | S keeps every tile in bounds.
        let part_out: PartitionMut<T, { [1, BM, D] }> =
            unsafe { make_partition_view_mut(out, shape![1, BM, D], padding::None, out.token()) };
        let _done: Token = unsafe {
            store_view_raw(&part_out, yt.reshape(shape![1, BM, D]), [bh, mb, 0i32], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true, true])
        };
    }

    /// The same blocks on a 1-D grid (issue 16): out tile (bh, mb, 0) comes from the mapped index.
    #[cutile::entry()]
    pub fn attention_folded<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
        const MAP: [i32; 3],
    >(
        mut out: MappedPartitionMut<T, { [1, BM, D] }, MAP>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        qk_scale_log2: f32,
    ) {
        for index in out.iter_indices() {
            let (bh, mb, _col) = index.components();
            let yt: Tile<T, { [BM, D] }> = attend::<T, BM, BN, D, CAUSAL, FOLD>(q, k, v, qk_scale_log2, bh, mb);
            out.store(yt.reshape(shape![1, BM, D]), index);
        }
    }

    // ---- shared by both bodies (`attend`, `attend_rows`) ----------------------------------------------
    // Each body calls query_block, then step_tiles, builds its row limits and s_tile, then calls kv_tiles:
    // the ops reach tileiras in that order, and its register allocation follows the order (with the step
    // tiles made after the limits, a split kernel gets other registers), so a body keeps it.

    /// The start of both bodies: row block `rb` (BM x D) of row set `n` of the (NQ, M, D) query view `q`,
    /// the K/V row set it reads (n / G, G = NQ / (B*Hkv) from the views' shapes: H / Hkv per head, 1
    /// packed), Sk, and the offset of the end-aligned causal mask for `s_q` queries: query i sees keys
    /// j <= i + off.
    fn query_block<T: ElementType, const BM: i32, const D: i32>(
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        n: i32,
        rb: i32,
        s_q: i32,
    ) -> (Tile<T, { [BM, D] }>, i32, i32, i32) {
        let s_len: i32 = get_shape_dim(k.shape(), 1i32);
        let group: i32 = get_shape_dim(q.shape(), 0i32) / get_shape_dim(k.shape(), 0i32);
        let kvh: i32 = n / group;
        let off: i32 = s_len - s_q;
        let tq: Tile<T, { [1, BM, D] }> = q.load_tile(shape![1, BM, D], [n, rb, 0i32]);
        let tq: Tile<T, { [BM, D] }> = tq.reshape(shape![BM, D]);
        (tq, kvh, s_len, off)
    }

    /// The loop-invariant tiles of `kv_step`: the scale (times log2 e) for the scores and for the row
    /// maxima, and each column's key offset within a key tile.
    fn step_tiles<const BM: i32, const BN: i32>(
        qk_scale_log2: f32,
    ) -> (Tile<f32, { [BM, BN] }>, Tile<f32, { [BM, 1] }>, Tile<i32, { [BM, BN] }>) {
        let scale: Tile<f32, { [BM, BN] }> = broadcast_scalar(qk_scale_log2, shape![BM, BN]);
        let scale_m: Tile<f32, { [BM, 1] }> = broadcast_scalar(qk_scale_log2, shape![BM, 1]);
        let offs_n: Tile<i32, { [BN] }> = iota(shape![BN]);
        let offs_n: Tile<i32, { [BM, BN] }> = offs_n.reshape(shape![1, BN]).broadcast(shape![BM, BN]);
        (scale, scale_m, offs_n)
    }

    /// One key tile `j` of the online softmax for the BM rows `tq` against K/V head `kvh` (inlined).
    /// FOLD == 1 (scale > 0): the scale (times log2 e) is applied to the BM row maxima and folded into
    /// one FFMA per score, exp2(s*c - m*c) with m kept in scaled units; max(s*c) = max(s)*c needs c > 0.
    /// FOLD == 0 (scale <= 0): the scores are scaled first, as the max needs.
    /// MASKED: keys >= Sk and (CAUSAL) keys after a row's `limit` get -inf.
    /// SAFE (a split's masked tiles): a split may hold no key some row can see, so m_new can be -inf;
    /// the exp2 offsets then use 0 instead of m_new (p = exp2(-inf) = 0 and alpha = exp2(-inf) = 0, so l
    /// and acc stay 0 without computing -inf - -inf = NaN) while m itself stays -inf (weight 0 in the
    /// combine). Pinning m at 0 instead would make m a wrong stabiliser for rows whose scores are all far
    /// below 0 (p would flush to 0 and the split would silently vanish).
    fn kv_step<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
        const MASKED: i32,
        const SAFE: i32,
    >(
        tq: Tile<T, { [BM, D] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        kvh: i32,
        j: i32,
        m_i: Tile<f32, { [BM, 1] }>,
        l_i: Tile<f32, { [BM, 1] }>,
        acc: Tile<f32, { [BM, D] }>,
        scale: Tile<f32, { [BM, BN] }>,
        scale_m: Tile<f32, { [BM, 1] }>,
        offs_n: Tile<i32, { [BM, BN] }>,
        limit: Tile<i32, { [BM, BN] }>,
        s_tile: Tile<i32, { [BM, BN] }>,
    ) -> (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, D] }>) {
        let kt: Tile<T, { [1, BN, D] }> = k.load_tile(shape![1, BN, D], [kvh, j, 0i32]);
        let kt: Tile<T, { [BN, D] }> = kt.reshape(shape![BN, D]);
        let kt_t: Tile<T, { [D, BN] }> = kt.transpose();
        let zero: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        let mut qk: Tile<f32, { [BM, BN] }> = mma(tq, kt_t, zero);
        if FOLD == 0i32 {
            qk = qk * scale;
        }
        if MASKED == 1i32 {
            let cols: Tile<i32, { [BM, BN] }> = offs_n + broadcast_scalar(j * BN, shape![BM, BN]);
            let mut keep: Tile<bool, { [BM, BN] }> = lt_tile(cols, s_tile);
            if CAUSAL == 1i32 {
                keep = keep & ge_tile(limit, cols);
            }
            let neg_inf: Tile<f32, { [BM, BN] }> = constant(f32::NEG_INFINITY, shape![BM, BN]);
            qk = select(keep, qk, neg_inf);
        }
        let row_max: Tile<f32, { [BM] }> = reduce_max(qk, 1);
        let mut row_max: Tile<f32, { [BM, 1] }> = row_max.reshape(shape![BM, 1]);
        if FOLD == 1i32 {
            row_max = row_max * scale_m;
        }
        let m_new: Tile<f32, { [BM, 1] }> = max_tile(m_i, row_max);
        let mut m_off: Tile<f32, { [BM, 1] }> = m_new;
        if SAFE == 1i32 {
            let none: Tile<f32, { [BM, 1] }> = constant(f32::NEG_INFINITY, shape![BM, 1]);
            let zero_m: Tile<f32, { [BM, 1] }> = constant(0.0f32, shape![BM, 1]);
            m_off = select(eq_tile(m_new, none), zero_m, m_new);
        }
        let neg_m: Tile<f32, { [BM, BN] }> = negf(m_off).broadcast(shape![BM, BN]);
        let mut x: Tile<f32, { [BM, BN] }> = qk + neg_m;
        if FOLD == 1i32 {
            x = fma(qk, scale, neg_m, rounding::NearestEven, ftz::Enabled);
        }
        // ftz: a bare MUFU.EX2 (without it: FSETP + 2 FMUL per element); p < 2^-126 becomes 0.
        let p: Tile<f32, { [BM, BN] }> = exp2(x, ftz::Enabled);
        let alpha: Tile<f32, { [BM, 1] }> = exp2(m_i - m_off, ftz::Enabled);
        let row_sum: Tile<f32, { [BM] }> = reduce_sum(p, 1);
        let l_new: Tile<f32, { [BM, 1] }> = l_i * alpha + row_sum.reshape(shape![BM, 1]);
        let acc_scaled: Tile<f32, { [BM, D] }> = acc * alpha.broadcast(shape![BM, D]);
        let vt: Tile<T, { [1, BN, D] }> = v.load_tile(shape![1, BN, D], [kvh, j, 0i32]);
        let vt: Tile<T, { [BN, D] }> = vt.reshape(shape![BN, D]);
        let pt: Tile<T, { [BM, BN] }> = convert_tile(p);
        let acc_new: Tile<f32, { [BM, D] }> = mma(pt, vt, acc_scaled);
        (m_new, l_new, acc_new)
    }

    /// The online softmax of the BM rows `tq` over key tiles [j0, n_kv) of K/V head `kvh`, from m = -inf,
    /// l = 0, acc = 0: tiles [j0, n_full) unmasked (every key inside Sk and visible to every row), then
    /// [n_full, n_kv) masked against Sk (`s_tile`) and (CAUSAL) each row's `limit`, the last key it sees;
    /// SAFE as in `kv_step`. Returns m (log2 units), l and the un-normalised acc.
    fn kv_tiles<T: ElementType, const BM: i32, const BN: i32, const D: i32, const CAUSAL: i32, const FOLD: i32, const SAFE: i32>(
        tq: Tile<T, { [BM, D] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        kvh: i32,
        scale: Tile<f32, { [BM, BN] }>,
        scale_m: Tile<f32, { [BM, 1] }>,
        offs_n: Tile<i32, { [BM, BN] }>,
        limit: Tile<i32, { [BM, BN] }>,
        s_tile: Tile<i32, { [BM, BN] }>,
        j0: i32,
        n_full: i32,
        n_kv: i32,
    ) -> (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, D] }>) {
        let mut m_i: Tile<f32, { [BM, 1] }> = constant(f32::NEG_INFINITY, shape![BM, 1]);
        let mut l_i: Tile<f32, { [BM, 1] }> = constant(0.0f32, shape![BM, 1]);
        let mut acc: Tile<f32, { [BM, D] }> = constant(0.0f32, shape![BM, D]);
        // Unmasked tiles come first: after the first, every row's m is finite (no guard needed there).
        for j in j0..n_full {
            let (m_new, l_new, acc_new) = kv_step::<T, BM, BN, D, CAUSAL, FOLD, 0i32, 0i32>(
                tq, k, v, kvh, j, m_i, l_i, acc, scale, scale_m, offs_n, limit, s_tile,
            );
            m_i = m_new;
            l_i = l_new;
            acc = acc_new;
        }
        for j in n_full..n_kv {
            let (m_new, l_new, acc_new) = kv_step::<T, BM, BN, D, CAUSAL, FOLD, 1i32, SAFE>(
                tq, k, v, kvh, j, m_i, l_i, acc, scale, scale_m, offs_n, limit, s_tile,
            );
            m_i = m_new;
            l_i = l_new;
            acc = acc_new;
        }
        (m_i, l_i, acc)
    }

    // ---- decode schedule: packed rows and split-KV (module doc) ----------------------------------------

    /// Row block `qi` (BM rows) of row set `nq` of the (NQ, M, D) view `q`, against keys [0, Sk) or, with
    /// SPLIT, the key tiles [split * ct, split * ct + ct): the running max m (log2 units), the running sum
    /// l and the un-normalised accumulator. Row r of a row set is query r % s_q (s_q = S): in the packed
    /// view (B*Hkv, G*S, D) a row set is the G heads of one K/V head and r // s_q is the head within it;
    /// in the per-head view (B*H, S, D) r < S.
    fn attend_rows<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
        const SPLIT: i32,
    >(
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        qk_scale_log2: f32,
        s_q: i32,
        nq: i32,
        qi: i32,
        split: i32,
        ct: i32,
    ) -> (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, D] }>) {
        let m_len: i32 = get_shape_dim(q.shape(), 1i32);
        let (tq, kvh, s_len, off) = query_block::<T, BM, D>(q, k, nq, qi, s_q);
        let (scale, scale_m, offs_n) = step_tiles::<BM, BN>(qk_scale_log2);
        // Each row's causal limit from its query index r % s_q (r itself would be wrong once packed).
        let r0: i32 = qi * BM;
        let rows: Tile<i32, { [BM] }> = iota(shape![BM]);
        let rows: Tile<i32, { [BM, 1] }> = rows.reshape(shape![BM, 1]) + broadcast_scalar(r0, shape![BM, 1]);
        let query: Tile<i32, { [BM, 1] }> = rows % broadcast_scalar(s_q, shape![BM, 1]);
        let limit: Tile<i32, { [BM, 1] }> = query + broadcast_scalar(off, shape![BM, 1]);
        let limit: Tile<i32, { [BM, BN] }> = limit.broadcast(shape![BM, BN]);
        let s_tile: Tile<i32, { [BM, BN] }> = broadcast_scalar(s_len, shape![BM, BN]);

        // The block's smallest and largest query index over its real rows r0..=r_last: all of 0..S-1
        // when they span two heads (packed), else r0 % S and r_last % S.
        let r_last: i32 = min(r0 + BM, m_len) - 1i32;
        let spans: i32 = min(r_last / s_q - r0 / s_q, 1i32);
        let i_lo: i32 = (r0 % s_q) * (1i32 - spans);
        let i_hi: i32 = r_last % s_q + spans * (s_q - 1i32 - r_last % s_q);
        // Key tiles [j0, n_full) are inside Sk and (CAUSAL) visible to every real row: their last key
        // (j+1)*BN - 1 is <= i_lo + off and < Sk; they run unmasked. [n_full, n_kv) pay for the mask;
        // causal tiles past the last row's limit are never loaded. j0 <= n_full <= n_kv always.
        let mut n_kv: i32 = ceil_div(s_len, BN);
        let mut n_full: i32 = s_len / BN;
        if CAUSAL == 1i32 {
            n_kv = ceil_div(min(s_len, i_hi + off + 1i32), BN);
            n_full = min(i_lo + off + 1i32, s_len) / BN;
        }
        let mut j0: i32 = 0i32;
        if SPLIT == 1i32 {
            j0 = split * ct;
            n_kv = max(min(n_kv, j0 + ct), j0);
            n_full = max(j0, min(n_full, n_kv));
        }
        // Without SPLIT tile 0 (key 0, visible to every row, padding rows >= M included) is the first of
        // the whole loop, so m is finite before any row can meet a fully masked tile; a split's masked
        // tiles may come first and take the guard (SAFE = SPLIT).
        let (m_i, l_i, acc) = kv_tiles::<T, BM, BN, D, CAUSAL, FOLD, SPLIT>(
            tq, k, v, kvh, scale, scale_m, offs_n, limit, s_tile, j0, n_full, n_kv,
        );
        (m_i, l_i, acc)
    }

    /// Row sets without a split (the packed decode tile when the tiles already fill the GPU, or the keys
    /// are too few to split): grid (NQ, ceil(M / BM)) from out's (1, BM, D) partition of its (NQ, M, D)
    /// view; `s_q` = S. Rows past M are padding (zero queries) and are not written (clipped store).
    #[cutile::entry()]
    pub fn attention_rows<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
    >(
        out: &mut Tensor<T, { [1, BM, D] }>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        qk_scale_log2: f32,
        s_q: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let (_m_i, l_i, acc) =
            attend_rows::<T, BM, BN, D, CAUSAL, FOLD, 0i32>(q, k, v, qk_scale_log2, s_q, pid.0, pid.1, 0i32, 0i32);
        // Key 0 is visible to every row: l >= 1.
        let y: Tile<f32, { [BM, D] }> = true_div(acc, l_i.broadcast(shape![BM, D]));
        let yt: Tile<T, { [BM, D] }> = convert_tile(y);
        out.store(yt.reshape(shape![1, BM, D]));
    }

    /// Split-KV, first launch: block (w, qi) with w = nq * n_split + split (grid (NQ * n_split,
    /// ceil(M / BM)) from the workspaces' partitions, which all share it) runs row block qi of row set nq
    /// over key tiles [split * ct, split * ct + ct) and writes its partial m (log2 units; -inf where the
    /// split holds no key the row sees), l and un-normalised acc, in fp32, to workspace row w. The
    /// workspaces are (NQ * n_split, Mp[, D]) with Mp = ceil(M / BM) * BM: every tile is whole.
    #[cutile::entry()]
    pub fn attention_split<
        T: ElementType,
        const BM: i32,
        const BN: i32,
        const D: i32,
        const CAUSAL: i32,
        const FOLD: i32,
    >(
        m_ws: &mut Tensor<f32, { [1, BM] }>,
        l_ws: &mut Tensor<f32, { [1, BM] }>,
        acc_ws: &mut Tensor<f32, { [1, BM, D] }>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        k: &Tensor<T, { [-1, -1, -1] }>,
        v: &Tensor<T, { [-1, -1, -1] }>,
        qk_scale_log2: f32,
        s_q: i32,
        n_split: i32,
        ct: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let nq: i32 = pid.0 / n_split;
        let split: i32 = pid.0 % n_split;
        let (m_i, l_i, acc) =
            attend_rows::<T, BM, BN, D, CAUSAL, FOLD, 1i32>(q, k, v, qk_scale_log2, s_q, nq, pid.1, split, ct);
        m_ws.store(m_i.reshape(shape![1, BM]));
        l_ws.store(l_i.reshape(shape![1, BM]));
        acc_ws.store(acc.reshape(shape![1, BM, D]));
    }

    /// Split-KV, second launch: one block per output row (grid (NQ, M) from out's (1, 1, D) partition of
    /// its (NQ, M, D) view), which loads its row's partials NS = 16 splits at a time as one (NS, 1) / (NS, D)
    /// tile of the (NQ, n_split, Mp[ * D]) workspace views and merges them with a running max:
    /// M = max_s m_s, out = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s. Why this form: a block per
    /// row block walking the splits one load after another took 11.1 us at decode B1 on the H200 (8
    /// blocks x 8 splits; Triton's one program per row 2.0 us, bench/GAPS.md). Splits past n_split read as
    /// m = -inf (masked: weight 0) and l = acc = 0 (padding); split 0 holds key 0, which every row sees, so M is
    /// finite from the first chunk on (alpha = 2^(-inf - M) = 0 there) and the denominator is >= 1; a
    /// split a row cannot see has m = -inf, weight 0 and l = acc = 0 (no NaN).
    #[cutile::entry()]
    pub fn attention_combine<T: ElementType, const D: i32>(
        out: &mut Tensor<T, { [1, 1, D] }>,
        m_ws: &Tensor<f32, { [-1, -1, -1] }>,
        l_ws: &Tensor<f32, { [-1, -1, -1] }>,
        acc_ws: &Tensor<f32, { [-1, -1, -1] }>,
        n_split: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let (n, r): (i32, i32) = (pid.0, pid.1);
        // SAFETY: views of the workspaces as the split launch left them (stream-ordered before this one);
        // only read here.
        let part_m: Partition<f32, { [1, 16, 1] }> =
            unsafe { make_partition_view(m_ws, shape![1, 16, 1], padding::Zero, dim_map::Identity, m_ws.token()) };
        let part_l: Partition<f32, { [1, 16, 1] }> =
            unsafe { make_partition_view(l_ws, shape![1, 16, 1], padding::Zero, dim_map::Identity, l_ws.token()) };
        let part_a: Partition<f32, { [1, 16, D] }> =
            unsafe { make_partition_view(acc_ws, shape![1, 16, D], padding::Zero, dim_map::Identity, acc_ws.token()) };
        let mut big_m: Tile<f32, { [1, 1] }> = constant(f32::NEG_INFINITY, shape![1, 1]);
        let mut l: Tile<f32, { [1, 1] }> = constant(0.0f32, shape![1, 1]);
        let mut acc: Tile<f32, { [1, D] }> = constant(0.0f32, shape![1, D]);
        let lane: Tile<i32, { [16] }> = iota(shape![16]);
        let lane: Tile<i32, { [16, 1] }> = lane.reshape(shape![16, 1]);
        let none: Tile<f32, { [16, 1] }> = constant(f32::NEG_INFINITY, shape![16, 1]);
        for c in 0i32..(n_split + 15i32) / 16i32 {
            // SAFETY: n < NQ and r < M <= Mp index inside the views (the grid is out's); the split axis may
            // pass n_split on the last chunk and is padded there. No axis is declared in bounds: on a padded
            // view any true flag makes tileiras 13.4 fail (docs/upstream/tile-ir-inbounds-with-padding.md).
            let (m_c, _m_done): (Tile<f32, { [1, 16, 1] }>, Token) = unsafe {
                load_view_raw(&part_m, [n, c, r], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [false, false, false], shape![1, 16, 1])
            };
            let (l_c, _l_done): (Tile<f32, { [1, 16, 1] }>, Token) = unsafe {
                load_view_raw(&part_l, [n, c, r], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [false, false, false], shape![1, 16, 1])
            };
            let (a_c, _a_done): (Tile<f32, { [1, 16, D] }>, Token) = unsafe {
                load_view_raw(&part_a, [n, c, r], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [false, false, false], shape![1, 16, D])
            };
            // Splits past n_split (zero padding): m = -inf, so their weight is 0.
            let real: Tile<bool, { [16, 1] }> = lt_tile(lane + broadcast_scalar(c * 16i32, shape![16, 1]), broadcast_scalar(n_split, shape![16, 1]));
            let m_c: Tile<f32, { [16, 1] }> = select(real, m_c.reshape(shape![16, 1]), none);
            let c_max: Tile<f32, { [1] }> = reduce_max(m_c, 0);
            let m_new: Tile<f32, { [1, 1] }> = max_tile(big_m, c_max.reshape(shape![1, 1]));
            let w: Tile<f32, { [16, 1] }> = exp2(m_c - m_new.broadcast(shape![16, 1]), ftz::Enabled);
            let alpha: Tile<f32, { [1, 1] }> = exp2(big_m - m_new, ftz::Enabled);
            let l_c: Tile<f32, { [16, 1] }> = l_c.reshape(shape![16, 1]);
            let l_s: Tile<f32, { [1] }> = reduce_sum(l_c * w, 0);
            l = l * alpha + l_s.reshape(shape![1, 1]);
            let a_c: Tile<f32, { [16, D] }> = a_c.reshape(shape![16, D]);
            let a_s: Tile<f32, { [D] }> = reduce_sum(a_c * w.broadcast(shape![16, D]), 0);
            acc = acc * alpha.broadcast(shape![1, D]) + a_s.reshape(shape![1, D]);
            big_m = m_new;
        }
        let y: Tile<f32, { [1, D] }> = true_div(acc, l.broadcast(shape![1, D]));
        let yt: Tile<T, { [1, D] }> = convert_tile(y);
        out.store(yt.reshape(shape![1, 1, D]));
    }
}

pub fn plan(req: &Request) -> Result<Plan, ArgError> {
    let op = req.op.as_str();
    if req.dtype == DType::F32 {
        return Err(ArgError::new(op, "dtype", "attention is fp16/bf16 only (tensor-core P @ V in the input dtype)"));
    }
    let t = req.tensors_named(&["q", "k", "v", "out"])?;
    let q = check_tensor(op, &t[0], 4, req.dtype)?;
    if q[3] != 64 && q[3] != 128 {
        return Err(ArgError::new(op, "q", format!("head dim D={} not supported; expected 64 or 128", q[3])));
    }
    // k and v are (B, Hkv, Sk, D); out is q's shape.
    let kd = check_tensor(op, &t[1], 4, req.dtype)?;
    for (i, name) in [(1, "k"), (2, "v")] {
        let x = check_tensor(op, &t[i], 4, req.dtype)?;
        expect_dim(op, name, "dim 0 (B)", x[0], q[0])?;
        expect_dim(op, name, "dim 1 (Hkv)", x[1], kd[1])?;
        expect_dim(op, name, "dim 2 (Sk)", x[2], kd[2])?;
        expect_dim(op, name, "dim 3 (D)", x[3], q[3])?;
    }
    let x = check_tensor(op, &t[3], 4, req.dtype)?;
    for (d, dn) in ["B", "H", "S", "D"].iter().enumerate() {
        expect_dim(op, "out", &format!("dim {d} ({dn})"), x[d], q[d])?;
    }
    // Memory: query head h reads K/V head h / (H / Hkv), inside k/v only when Hkv divides H.
    if q[1] % kd[1] != 0 {
        return Err(ArgError::new(op, "k", format!("k/v have Hkv={} heads, which does not divide q's H={} heads", kd[1], q[1])));
    }
    check_no_alias(op, req.dtype, &t[3], &[&t[0], &t[1], &t[2]], &[])?;  // attention declares no in-place pair
    let causal = req.scalar("causal")?;
    if causal != 0.0 && causal != 1.0 {
        return Err(ArgError::new(op, "causal", format!("expected a bool, got {causal}")));
    }
    if causal == 1.0 && q[2] > kd[2] {
        return Err(ArgError::new(op, "q", format!("causal with S={} queries > Sk={} keys: the end-aligned mask leaves queries without any key", q[2], kd[2])));
    }
    let scale = req.scalar("scale")?;
    if !scale.is_finite() {
        return Err(ArgError::new(op, "scale", format!("expected a finite number, got {scale}")));
    }
    let cfg = config::resolve(op, req.dtype, &[("S", q[2] as i64), ("D", q[3] as i64)], &req.config)?;
    // (B, H, S, D, Hkv, Sk): launch views k and v with the last two (`specs_for`).
    Ok(Plan { dims: vec![q[0], q[1], q[2], q[3], kd[1], kd[2]], cfg })
}

/// Streaming multiprocessors the split plan assumes where no device is asked (compile-only specs,
/// `tile_grid` / `check_grid` at plan time, tests): the H200's, as python/tilerosetta/kernels/
/// attention_split.py does without a GPU (backends/base.py H200_SM_COUNT). A launch asks its device
/// (`runtime::sm_count`, cached per device), so on the H200 both agree.
pub const H200_SM_COUNT: i64 = 132;
/// Key tiles per split at least (attention_split.py MIN_SPLIT_BLOCKS) where the config does not say
/// (its SPLIT_MIN_BLOCKS key; swept at decode, tuned_configs.json).
pub const MIN_SPLIT_BLOCKS: i64 = 4;

fn cdiv(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// attention_split.py `packed_rows`: the G = h / hkv query heads of one K/V head are one row tile when
/// G > 1 and G * S <= the query tile.
pub fn packed_rows(h: i64, hkv: i64, s: i64, block_m: i64) -> bool {
    let g = h / hkv;
    g > 1 && g * s <= block_m
}

/// attention_split.py `split_plan` (the same arithmetic, so every backend splits a case alike):
/// (n_split, chunk) = (1, Sk) when `tiles` row tiles already fill `sms` SMs or the keys are fewer than
/// two chunks of `min_blocks` key tiles; else at most two blocks per SM, chunk a multiple of `block_n`,
/// n_split = ceil(Sk / chunk) (the last split may be short).
pub fn split_plan(tiles: i64, sk: i64, block_n: i64, sms: i64, min_blocks: i64) -> (i64, i64) {
    assert!(min_blocks >= 1 && block_n >= 1, "attention split plan: min_blocks {min_blocks}, block_n {block_n}");
    let min_chunk = min_blocks * block_n;
    // tiles == 0 cannot reach here (plan refuses empty tensors); it would divide by zero below.
    if tiles >= sms || tiles < 1 || sk < 2 * min_chunk {
        return (1, sk);
    }
    let n_split = cdiv(sk, min_chunk).min(2 * sms / tiles);
    let chunk = cdiv(cdiv(sk, n_split), block_n) * block_n;
    (cdiv(sk, chunk), chunk)
}

/// How a call's query rows and keys are laid out over tile blocks (the module doc; the same choices as
/// python/tilerosetta/kernels/cutile/config.py `plan_attention`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The G heads of a K/V head are one row set: q and out seen as (B*Hkv, G*S, D).
    pub packed: bool,
    /// Row sets (B*Hkv packed, else B*H) of `m` rows each (G*S packed, else S); row r is query r % `s`.
    pub nq: i32,
    pub m: i32,
    pub s: i32,
    /// B*Hkv and Sk: the (B*Hkv, Sk, D) view of k and v.
    pub bhkv: i32,
    pub sk: i32,
    pub d: i32,
    /// The tiles that run: BM = max(16, min(cfg BM, next_pow2(m))), BN = max(16, min(cfg BN,
    /// next_pow2(Sk))), so a G=4 decode tile is 16 rows, not 64 (of which 60 would be padding).
    pub bm: i32,
    pub bn: i32,
    /// ceil(m / bm): row blocks per row set.
    pub row_blocks: i32,
    /// Key splits and keys per split (a multiple of bn; n_split = 1, chunk = Sk: no split).
    pub n_split: i32,
    pub chunk: i32,
    /// The configuration the kernels compile with: cfg with BM/BN as above and, where either was
    /// clamped, the hints OCC / W cleared (tuned for the full tile, they would only cap a short one's
    /// registers; cutile's plan_attention does the same).
    pub cfg: Config,
}

impl Schedule {
    /// Row tiles (row sets x row blocks), the count the split plan weighs against the SMs.
    pub fn tiles(&self) -> i64 {
        self.nq as i64 * self.row_blocks as i64
    }

    /// Workspace rows per (row set, split): the row blocks padded to whole tiles, so every workspace
    /// tile is in bounds and its rows 16-element aligned.
    pub fn workspace_cols(&self) -> i32 {
        self.row_blocks * self.bm
    }

    /// fp32 elements of the split workspaces: m and l (NQ * n_split, Mp), acc (NQ * n_split, Mp, D).
    pub fn workspace_floats(&self) -> i64 {
        let rows = self.nq as i64 * self.n_split as i64 * self.workspace_cols() as i64;
        rows * (2 + self.d as i64)
    }
}

/// The schedule of `dims` = a plan's (B, H, S, D, Hkv, Sk), or compile-only (B, H, S, D[, causal]) with
/// Hkv = H and Sk = S, for a GPU of `sms` SMs.
pub fn schedule(dims: &[i32], cfg: &Config, sms: i64) -> Schedule {
    let (b, h, s, d) = (dims[0], dims[1], dims[2], dims[3]);
    let (hkv, sk) = if dims.len() >= 6 { (dims[4], dims[5]) } else { (h, s) };
    let (cfg_bm, cfg_bn) = (config::get(cfg, "BM") as i64, config::get(cfg, "BN") as i64);
    let packed = packed_rows(h as i64, hkv as i64, s as i64, cfg_bm);
    let (nq, m) = if packed { (b * hkv, (h / hkv) * s) } else { (b * h, s) };
    let bm = 16.max(cfg_bm.min(config::next_pow2(m as i64)));
    let bn = 16.max(cfg_bn.min(config::next_pow2(sk as i64)));
    let row_blocks = ops::tiles(m, bm as i32);
    // The config's chunk floor (a config from before the key, or 0, takes the default).
    let min_blocks = cfg.iter().find(|(k, _)| *k == "SPLIT_MIN_BLOCKS").map(|&(_, v)| v).filter(|&v| v >= 1);
    let (n_split, chunk) = split_plan(nq as i64 * row_blocks, sk as i64, bn, sms, min_blocks.unwrap_or(MIN_SPLIT_BLOCKS));
    let clamped = bm != cfg_bm || bn != cfg_bn;
    let cfg = cfg
        .iter()
        .map(|&(k, v)| match k {
            "BM" => (k, bm),
            "BN" => (k, bn),
            k if clamped && config::HINTS.contains(&k) => (k, 0),
            _ => (k, v),
        })
        .collect();
    Schedule {
        packed,
        nq,
        m,
        s,
        bhkv: b * hkv,
        sk,
        d,
        bm: bm as i32,
        bn: bn as i32,
        row_blocks: row_blocks as i32,
        n_split: n_split as i32,
        chunk: chunk as i32,
        cfg,
    }
}

/// dims = (B, H, S, D) (compile-only: Hkv = H, Sk = S; a plan's dims add Hkv, Sk); causal chooses the
/// CAUSAL generic. The kernel for a positive scale (FOLD = 1,
/// the usual case and the one the tests and tables compile); `specs_for` gives the other.
pub fn specs(dtype: DType, cfg: &Config, dims: &[i32], causal: bool) -> Vec<KernelSpec> {
    specs_for(dtype, cfg, dims, causal, true)
}

/// The main kernel's tile grid (x, y, z) on H200_SM_COUNT SMs: (row sets x splits, row blocks, 1), i.e.
/// (B*H, ceil(S / BM), 1) for the per-head rows without a split. Only y can pass 65535 (then the
/// launch folds it: `attention_folded`); a split schedule has fewer row tiles than SMs, so it never does.
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    let sc = schedule(dims, cfg, H200_SM_COUNT);
    vec![sc.nq as i64 * sc.n_split as i64, sc.row_blocks as i64, 1]
}

/// `scale_pos`: scale > 0, so the scale can be folded into the exp2 argument (FOLD generic). Planned for
/// H200_SM_COUNT SMs (what compile-only builds assume); a launch plans for its device (`specs_on`).
pub fn specs_for(dtype: DType, cfg: &Config, dims: &[i32], causal: bool, scale_pos: bool) -> Vec<KernelSpec> {
    specs_on(dtype, &schedule(dims, cfg, H200_SM_COUNT), causal, scale_pos)
}

/// The kernels of a schedule, in launch order:
/// * split (n_split > 1): `attention_split` then `attention_combine`;
/// * packed rows, no split: `attention_rows`;
/// * otherwise the per-head kernel `attention` (`attention_folded` past 65535 row blocks), exactly the
///   kernel this op had before the decode schedule (the prefill path).
pub fn specs_on(dtype: DType, sc: &Schedule, causal: bool, scale_pos: bool) -> Vec<KernelSpec> {
    let (d, cfg) = (sc.d, &sc.cfg);
    // q and out (B, H, S, D) are seen as (NQ, M, D): (B*H, S, D), or packed (B*Hkv, G*S, D), the same
    // row-major memory; k, v (B, Hkv, Sk, D) as (B*Hkv, Sk, D).
    let rows = |name, i| ArgView::contiguous(name, i, &[sc.nq, sc.m, d]);
    let kv_view = |name, i| ArgView::contiguous(name, i, &[sc.bhkv, sc.sk, d]);
    let (c, f) = ((causal as i32).to_string(), (scale_pos as i32).to_string());
    let mut generics = vec![dtype.cutile_name().into(), sc.bm.to_string(), sc.bn.to_string(), d.to_string(), c, f];
    let spec = |function, generics, args| KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function,
        generics,
        args,
        options: config::compile_options(cfg),
    };
    if sc.n_split > 1 {
        // fp32 workspaces in one scratch block (runtime::with_scratch): m at 0, l after it, acc after l.
        let (r, mp) = (sc.nq * sc.n_split, sc.workspace_cols());
        let plane = r as i64 * mp as i64;
        let m_ws = ArgView::workspace("m_ws", 0, &[r, mp]);
        let l_ws = ArgView::workspace("l_ws", plane, &[r, mp]);
        let acc_ws = ArgView::workspace("acc_ws", 2 * plane, &[r, mp, d]);
        // The combine reads the same memory as (NQ, n_split, Mp) and (NQ, n_split, Mp * D): a row's splits
        // along one axis.
        let (nq, ns) = (sc.nq, sc.n_split);
        let combine = KernelSpec {
            ast: kernel::__module_ast_self,
            module: "kernel",
            function: "attention_combine",
            generics: vec![dtype.cutile_name().into(), d.to_string()],
            args: vec![
                rows("out", 3),
                ArgView::workspace("m_ws", 0, &[nq, ns, mp]),
                ArgView::workspace("l_ws", plane, &[nq, ns, mp]),
                ArgView::workspace("acc_ws", 2 * plane, &[nq, ns, mp * d]),
            ],
            // Its own hint, not the attention tile's: without it tileiras gives the (16, D) fp32 tile 255
            // registers; occupancy 4 keeps it at 64 without spills (sm_90).
            options: CompileOptions::default().occupancy(4),
        };
        let split_args = vec![m_ws, l_ws, acc_ws, rows("q", 0), kv_view("k", 1), kv_view("v", 2)];
        return vec![spec("attention_split", generics, split_args), combine];
    }
    let args = vec![rows("out", 3), rows("q", 0), kv_view("k", 1), kv_view("v", 2)];
    if sc.packed {
        return vec![spec("attention_rows", generics, args)];
    }
    let folded = ops::folds(&[sc.nq as i64, sc.row_blocks as i64, 1]);
    if folded {
        generics.extend(LINEAR_MAP_3D.iter().map(|v| v.to_string()));
    }
    let function = if folded {
        "attention_folded"
    } else if by_query(sc) {
        "attention_by_query"
    } else {
        "attention"
    };
    vec![spec(function, generics, args)]
}

/// Whether the per-head kernel runs in query-block order (`attention_by_query`): QO = 1 and exact query
/// blocks (BM | S). Its grid is `attention`'s, so the fold past 65535 row blocks (checked first) wins.
pub fn by_query(sc: &Schedule) -> bool {
    let qo = sc.cfg.iter().find(|(k, _)| *k == "QO").map_or(0, |&(_, v)| v);
    qo == 1 && !sc.packed && sc.n_split == 1 && sc.m % sc.bm == 0
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let causal = req.scalar("causal").map_err(|e| e.to_string())? == 1.0;
    let scale = req.scalar("scale").map_err(|e| e.to_string())?;
    let sms = crate::runtime::sm_count(req.device)?;
    let sc = schedule(&plan.dims, &plan.cfg, sms);
    let mut specs = specs_on(req.dtype, &sc, causal, scale > 0.0);
    let qk_scale_log2 = (scale * std::f64::consts::LOG2_E) as f32;
    let (bm, d) = (sc.bm as usize, sc.d as usize);
    if specs[0].function == "attention_split" {
        return launch_split::<T>(req, rt, &sc, specs, qk_scale_log2);
    }
    let spec = specs.remove(0);
    // SAFETY: validated contiguous (B, H, S, D) / (B, Hkv, Sk, D) torch tensors, seen as 3-D; see ArgView::borrow.
    let (mut out, q, k, v) = unsafe {
        let a = &spec.args;
        (a[0].borrow::<T>(rt, req), a[1].borrow::<T>(rt, req), a[2].borrow::<T>(rt, req), a[3].borrow::<T>(rt, req))
    };
    let tiles = (&mut out).partition([1, bm, d]);
    let queued = match spec.function {
        "attention_folded" => {
            let blocks = ops::folded_blocks(&[sc.nq as i64, sc.row_blocks as i64, 1]);
            let op = kernel::attention_folded(tiles.map(LINEAR_MAP_3D, blocks), &q, &k, &v, qk_scale_log2)
                .generics(spec.generics)
                .compile_options(spec.options);
            unsafe { op.async_on(&rt.stream) }.map(|_| ())
        }
        "attention_rows" => {
            let op = kernel::attention_rows(tiles, &q, &k, &v, qk_scale_log2, sc.s)
                .generics(spec.generics)
                .compile_options(spec.options);
            unsafe { op.async_on(&rt.stream) }.map(|_| ())
        }
        "attention_by_query" => {
            let op = kernel::attention_by_query(tiles, &q, &k, &v, qk_scale_log2)
                .generics(spec.generics)
                .compile_options(spec.options);
            unsafe { op.async_on(&rt.stream) }.map(|_| ())
        }
        _ => {
            let op = kernel::attention(tiles, &q, &k, &v, qk_scale_log2).generics(spec.generics).compile_options(spec.options);
            unsafe { op.async_on(&rt.stream) }.map(|_| ())
        }
    };
    queued.map_err(|e| format!("{e}"))
}

/// The split schedule's two launches on one stream, with fp32 workspaces from the launch's scratch
/// memory (runtime::with_scratch: Rust-owned, never seen by Python; held across both launches so no other
/// launch on this stream can interleave its own partials between them).
fn launch_split<T: cutile::DType>(req: &Request, rt: &Rt, sc: &Schedule, specs: Vec<KernelSpec>, qk_scale_log2: f32) -> Result<(), String> {
    let mut specs = specs.into_iter();
    let (split, combine) = (specs.next().expect("split spec"), specs.next().expect("combine spec"));
    let (bm, d) = (sc.bm as usize, sc.d as usize);
    let ct = sc.chunk / sc.bn;
    let bytes = sc.workspace_floats() as usize * std::mem::size_of::<f32>();
    crate::runtime::with_scratch(req.device, req.stream, &rt.stream, bytes, |base| {
        let a = &split.args;
        // SAFETY: the workspace views lie inside the scratch block of `bytes` (specs_on lays them out from
        // the same schedule), which stays allocated for the work queued on this stream; q, k, v as in `launch`.
        let (mut m_ws, mut l_ws, mut acc_ws) =
            unsafe { (a[0].borrow_at::<f32>(rt, base), a[1].borrow_at::<f32>(rt, base), a[2].borrow_at::<f32>(rt, base)) };
        let (q, k, v) = unsafe { (a[3].borrow::<T>(rt, req), a[4].borrow::<T>(rt, req), a[5].borrow::<T>(rt, req)) };
        let op = kernel::attention_split(
            (&mut m_ws).partition([1, bm]),
            (&mut l_ws).partition([1, bm]),
            (&mut acc_ws).partition([1, bm, d]),
            &q,
            &k,
            &v,
            qk_scale_log2,
            sc.s,
            sc.n_split,
            ct,
        )
        .generics(split.generics)
        .compile_options(split.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"))?;
        // SAFETY: as `launch`: out's validated (NQ, M, D) view; the combine's workspace views are the same
        // scratch memory as the split's (specs_on), read after it on this stream.
        let c = &combine.args;
        let mut out = unsafe { c[0].borrow::<T>(rt, req) };
        let (m_v, l_v, acc_v) =
            unsafe { (c[1].borrow_at::<f32>(rt, base), c[2].borrow_at::<f32>(rt, base), c[3].borrow_at::<f32>(rt, base)) };
        let op = kernel::attention_combine((&mut out).partition([1, 1, d]), &m_v, &l_v, &acc_v, sc.n_split)
            .generics(combine.generics)
            .compile_options(combine.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"))
    })
}

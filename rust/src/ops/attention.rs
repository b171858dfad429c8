//! attention: out = softmax(q k^T * scale [causal]) v, q/out (B, H, S, D), k/v (B, Hkv, Sk, D) with
//! Hkv | H (grouped-query: query head h reads K/V head h / G, G = H / Hkv), D in {64, 128}, fp16/bf16
//! with fp32 accumulation. The causal mask is aligned to the end of the keys: query i sees keys
//! j <= i + Sk - S (plan refuses causal with S > Sk).
//!
//! No split-KV (flash-decoding) schedule here: bench/GAPS.md says why.
//!
//! Flash-attention forward: one tile block per (batch*head, BM query rows); it streams BN keys at a
//! time, keeping a running max m, running sum l and an un-normalised BM x D accumulator (online
//! softmax, base-2 exponentials with log2(e) folded into the scale). Keys past S are masked to -inf;
//! with `CAUSAL` the loop also stops at the block's last query row and masks keys after each row.
//! Key tile 0 always holds a visible key for every row (key 0), so m is finite from the first step
//! and no row ever divides by zero.

use crate::args::{check_no_alias, check_tensor, expect_dim, ArgError, DType, Request};
use crate::config::{self, Config};
use crate::ops::{self, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_3D};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// One BM x D block of queries (head `bh`, query block `mb`), normalised and in T: the body of both
    /// entries (inlined by the cuTile compiler). The K/V row set of head bh is bh / G with
    /// G = (B*H) / (B*Hkv) = H / Hkv, read from the views' shapes.
    /// FOLD == 1 (scale > 0): the scale (times log2 e) is applied to the BM row maxima and folded
    /// into one FFMA per score, exp2(s*c - m*c) with m kept in scaled units; max(s*c) = max(s)*c
    /// needs c > 0. FOLD == 0 (scale <= 0): the scores are scaled first, as the max needs.
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
        let s_len: i32 = get_shape_dim(k.shape(), 1i32);
        let q_len: i32 = get_shape_dim(q.shape(), 1i32);
        let group: i32 = get_shape_dim(q.shape(), 0i32) / get_shape_dim(k.shape(), 0i32);
        let kvh: i32 = bh / group;
        // End-aligned causal mask: query row i sees keys j <= i + off.
        let off: i32 = s_len - q_len;

        let tq: Tile<T, { [1, BM, D] }> = q.load_tile(shape![1, BM, D], [bh, mb, 0i32]);
        let tq: Tile<T, { [BM, D] }> = tq.reshape(shape![BM, D]);
        let scale: Tile<f32, { [BM, BN] }> = broadcast_scalar(qk_scale_log2, shape![BM, BN]);
        let scale_m: Tile<f32, { [BM, 1] }> = broadcast_scalar(qk_scale_log2, shape![BM, 1]);

        let mut m_i: Tile<f32, { [BM, 1] }> = constant(f32::NEG_INFINITY, shape![BM, 1]);
        let mut l_i: Tile<f32, { [BM, 1] }> = constant(0.0f32, shape![BM, 1]);
        let mut acc: Tile<f32, { [BM, D] }> = constant(0.0f32, shape![BM, D]);

        let offs_n: Tile<i32, { [BN] }> = iota(shape![BN]);
        let offs_n: Tile<i32, { [BM, BN] }> = offs_n.reshape(shape![1, BN]).broadcast(shape![BM, BN]);
        let offs_m: Tile<i32, { [BM] }> = iota(shape![BM]);
        let offs_m: Tile<i32, { [BM, 1] }> = offs_m.reshape(shape![BM, 1]) + broadcast_scalar(mb * BM, shape![BM, 1]);
        let offs_m: Tile<i32, { [BM, BN] }> = offs_m.broadcast(shape![BM, BN]);
        let limit: Tile<i32, { [BM, BN] }> = offs_m + broadcast_scalar(off, shape![BM, BN]);
        let s_tile: Tile<i32, { [BM, BN] }> = broadcast_scalar(s_len, shape![BM, BN]);
        let neg_inf: Tile<f32, { [BM, BN] }> = constant(f32::NEG_INFINITY, shape![BM, BN]);

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

        // Unmasked main loop (FOLD == 1: no separate multiply, no select; see the entry comment).
        for j in 0i32..n_full {
            let kt: Tile<T, { [1, BN, D] }> = k.load_tile(shape![1, BN, D], [kvh, j, 0i32]);
            let kt: Tile<T, { [BN, D] }> = kt.reshape(shape![BN, D]);
            let kt_t: Tile<T, { [D, BN] }> = kt.transpose();
            let zero: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
            let mut qk: Tile<f32, { [BM, BN] }> = mma(tq, kt_t, zero);
            if FOLD == 0i32 {
                qk = qk * scale;
            }
            let row_max: Tile<f32, { [BM] }> = reduce_max(qk, 1);
            let mut row_max: Tile<f32, { [BM, 1] }> = row_max.reshape(shape![BM, 1]);
            if FOLD == 1i32 {
                row_max = row_max * scale_m;
            }
            let m_new: Tile<f32, { [BM, 1] }> = max_tile(m_i, row_max);
            let neg_m: Tile<f32, { [BM, BN] }> = negf(m_new).broadcast(shape![BM, BN]);
            let mut x: Tile<f32, { [BM, BN] }> = qk + neg_m;
            if FOLD == 1i32 {
                x = fma(qk, scale, neg_m, rounding::NearestEven, ftz::Enabled);
            }
            // ftz: a bare MUFU.EX2 (without it: FSETP + 2 FMUL per element); p < 2^-126 becomes 0.
            let p: Tile<f32, { [BM, BN] }> = exp2(x, ftz::Enabled);
            let alpha: Tile<f32, { [BM, 1] }> = exp2(m_i - m_new, ftz::Enabled);
            let row_sum: Tile<f32, { [BM] }> = reduce_sum(p, 1);
            l_i = l_i * alpha + row_sum.reshape(shape![BM, 1]);
            acc = acc * alpha.broadcast(shape![BM, D]);

            let vt: Tile<T, { [1, BN, D] }> = v.load_tile(shape![1, BN, D], [kvh, j, 0i32]);
            let vt: Tile<T, { [BN, D] }> = vt.reshape(shape![BN, D]);
            let pt: Tile<T, { [BM, BN] }> = convert_tile(p);
            acc = mma(pt, vt, acc);
            m_i = m_new;
        }
        // Masked tail: keys >= Sk (zero-padded K/V) and (CAUSAL) keys after each row's limit get -inf.
        // Tile 0 holds key 0, visible to every row (rows >= S included), so m is finite after it; a row
        // with every key of a later tile masked keeps m and gets p = exp2(-inf) = 0 there.
        for j in n_full..n_kv {
            let kt: Tile<T, { [1, BN, D] }> = k.load_tile(shape![1, BN, D], [kvh, j, 0i32]);
            let kt: Tile<T, { [BN, D] }> = kt.reshape(shape![BN, D]);
            let kt_t: Tile<T, { [D, BN] }> = kt.transpose();
            let zero: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
            let mut qk: Tile<f32, { [BM, BN] }> = mma(tq, kt_t, zero);
            if FOLD == 0i32 {
                qk = qk * scale;
            }
            let cols: Tile<i32, { [BM, BN] }> = offs_n + broadcast_scalar(j * BN, shape![BM, BN]);
            let mut keep: Tile<bool, { [BM, BN] }> = lt_tile(cols, s_tile);
            if CAUSAL == 1i32 {
                keep = keep & ge_tile(limit, cols);
            }
            let qk: Tile<f32, { [BM, BN] }> = select(keep, qk, neg_inf);
            let row_max: Tile<f32, { [BM] }> = reduce_max(qk, 1);
            let mut row_max: Tile<f32, { [BM, 1] }> = row_max.reshape(shape![BM, 1]);
            if FOLD == 1i32 {
                row_max = row_max * scale_m;
            }
            let m_new: Tile<f32, { [BM, 1] }> = max_tile(m_i, row_max);
            let neg_m: Tile<f32, { [BM, BN] }> = negf(m_new).broadcast(shape![BM, BN]);
            let mut x: Tile<f32, { [BM, BN] }> = qk + neg_m;
            if FOLD == 1i32 {
                x = fma(qk, scale, neg_m, rounding::NearestEven, ftz::Enabled);
            }
            let p: Tile<f32, { [BM, BN] }> = exp2(x, ftz::Enabled);
            let alpha: Tile<f32, { [BM, 1] }> = exp2(m_i - m_new, ftz::Enabled);
            let row_sum: Tile<f32, { [BM] }> = reduce_sum(p, 1);
            l_i = l_i * alpha + row_sum.reshape(shape![BM, 1]);
            acc = acc * alpha.broadcast(shape![BM, D]);

            let vt: Tile<T, { [1, BN, D] }> = v.load_tile(shape![1, BN, D], [kvh, j, 0i32]);
            let vt: Tile<T, { [BN, D] }> = vt.reshape(shape![BN, D]);
            let pt: Tile<T, { [BM, BN] }> = convert_tile(p);
            acc = mma(pt, vt, acc);
            m_i = m_new;
        }
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

/// dims = (B, H, S, D) (compile-only: Hkv = H, Sk = S; a plan's dims add Hkv, Sk); causal chooses the
/// CAUSAL generic. The kernel for a positive scale (FOLD = 1,
/// the usual case and the one the tests and tables compile); `specs_for` gives the other.
pub fn specs(dtype: DType, cfg: &Config, dims: &[i32], causal: bool) -> Vec<KernelSpec> {
    specs_for(dtype, cfg, dims, causal, true)
}

/// out's tile grid (x, y, z) over the (B*H, S, D) view in (1, BM, D) tiles: B*H, ceil(S / BM), 1.
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    vec![dims[0] as i64 * dims[1] as i64, ops::tiles(dims[2], config::get(cfg, "BM")), 1]
}

/// `scale_pos`: scale > 0, so the scale can be folded into the exp2 argument (FOLD generic).
pub fn specs_for(dtype: DType, cfg: &Config, dims: &[i32], causal: bool, scale_pos: bool) -> Vec<KernelSpec> {
    let (bh, s, d) = (dims[0] * dims[1], dims[2], dims[3]);
    // A plan's dims are (B, H, S, D, Hkv, Sk); compile-only dims (B, H, S, D[, causal]) mean Hkv = H, Sk = S.
    let (bhkv, sk) = if dims.len() >= 6 { (dims[0] * dims[4], dims[5]) } else { (bh, s) };
    let g = |k: &str| config::get(cfg, k).to_string();
    // q, out (B, H, S, D) are seen as (B*H, S, D); k, v (B, Hkv, Sk, D) as (B*Hkv, Sk, D).
    let view = |name, i| ArgView::contiguous(name, i, &[bh, s, d]);
    let kv_view = |name, i| ArgView::contiguous(name, i, &[bhkv, sk, d]);
    let (c, f) = ((causal as i32).to_string(), (scale_pos as i32).to_string());
    let folded = ops::folds(&tile_grid(dims, cfg));
    let mut generics = vec![dtype.cutile_name().into(), g("BM"), g("BN"), d.to_string(), c, f];
    if folded {
        generics.extend(LINEAR_MAP_3D.iter().map(|v| v.to_string()));
    }
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if folded { "attention_folded" } else { "attention" },
        generics,
        args: vec![view("out", 3), view("q", 0), kv_view("k", 1), kv_view("v", 2)],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let d = plan.dims[3];
    let bm = config::get(&plan.cfg, "BM");
    let causal = req.scalar("causal").map_err(|e| e.to_string())? == 1.0;
    let scale = req.scalar("scale").map_err(|e| e.to_string())?;
    let spec = specs_for(req.dtype, &plan.cfg, &plan.dims, causal, scale > 0.0).remove(0);
    // SAFETY: validated contiguous (B, H, S, D) / (B, Hkv, Sk, D) torch tensors, seen as 3-D; see ArgView::borrow.
    let (mut out, q, k, v) = unsafe {
        let a = &spec.args;
        (a[0].borrow::<T>(rt, req), a[1].borrow::<T>(rt, req), a[2].borrow::<T>(rt, req), a[3].borrow::<T>(rt, req))
    };
    let qk_scale_log2 = (scale * std::f64::consts::LOG2_E) as f32;
    let tiles = (&mut out).partition([1, bm as usize, d as usize]);
    let queued = if spec.function == "attention_folded" {
        let blocks = ops::folded_blocks(&tile_grid(&plan.dims, &plan.cfg));
        let op = kernel::attention_folded(tiles.map(LINEAR_MAP_3D, blocks), &q, &k, &v, qk_scale_log2)
            .generics(spec.generics)
            .compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::attention(tiles, &q, &k, &v, qk_scale_log2).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    queued.map_err(|e| format!("{e}"))
}

//! layer_norm: out = (x - mean) * rsqrt(var + eps) * w + b over rows of x (M, N). fp32 math
//! throughout; the variance is taken around the mean (not E[x^2] - E[x]^2, which cancels badly for
//! offset data), with padding columns masked to 0.
//!
//! Three kernels, chosen by the tile width BN (config) against the row width N:
//! * `layer_norm_row` (N <= BN): the whole row is one tile: x is read once (cuTile Python's structure).
//! * `layer_norm_row_notma` (config TMA=0 and exact tiles: BN == N, BR divides M;
//!   `config::row_without_tma`): the same tile with x, w and b loaded, and out stored, without TMA through
//!   in-bounds views (plain LDG / STG). With TMA, tileiras warp-specialises `layer_norm_row` (TMA producer
//!   warp, shared-memory staging, one 128-thread warpgroup of the 256 computing); without it, as in cuTile
//!   Python's softmax (111 -> 71.7 us at 4096 x 16384 on the H200), every thread issues its loads back to
//!   back. Other shapes ignore TMA=0.
//! * `layer_norm_chunks` (N > BN): three passes over BN-column chunks: the mean, the variance around
//!   the mean, then the normalised write.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{ArgView, KernelSpec, Plan, Rt};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// layer_norm of BR rows held in one tile (columns N.. are padding): the body of both row kernels
    /// (inlined by the cuTile compiler).
    fn layer_norm_rows<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        xt: Tile<T, { [BR, BN] }>,
        wt: Tile<T, { [BN] }>,
        bt: Tile<T, { [BN] }>,
        eps: f32,
        inv_n: f32,
    ) -> Tile<T, { [BR, BN] }> {
        let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
        let inv_n_t: Tile<f32, { [BR, 1] }> = broadcast_scalar(inv_n, shape![BR, 1]);
        // Padding columns load as 0: they add nothing to the sum.
        let sum: Tile<f32, { [BR] }> = reduce_sum(xf, 1);
        let mean: Tile<f32, { [BR, BN] }> = (sum.reshape(shape![BR, 1]) * inv_n_t).broadcast(shape![BR, BN]);
        let mut d: Tile<f32, { [BR, BN] }> = xf - mean;
        if N < BN {
            // ... but x - mean does not vanish there: mask it out of the variance.
            let cols: Tile<i32, { [BN] }> = iota(shape![BN]);
            let cols: Tile<i32, { [BR, BN] }> = cols.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
            let n_tile: Tile<i32, { [BR, BN] }> = broadcast_scalar(N, shape![BR, BN]);
            let zero: Tile<f32, { [BR, BN] }> = constant(0.0f32, shape![BR, BN]);
            d = select(lt_tile(cols, n_tile), d, zero);
        }
        let sq: Tile<f32, { [BR] }> = reduce_sum(d * d, 1);
        let var_eps: Tile<f32, { [BR, 1] }> = sq.reshape(shape![BR, 1]) * inv_n_t + broadcast_scalar(eps, shape![BR, 1]);
        let r: Tile<f32, { [BR, BN] }> = rsqrt(var_eps, ftz::Disabled).broadcast(shape![BR, BN]);
        let wf: Tile<f32, { [BN] }> = convert_tile(wt);
        let wf: Tile<f32, { [BR, BN] }> = wf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let bf: Tile<f32, { [BN] }> = convert_tile(bt);
        let bf: Tile<f32, { [BR, BN] }> = bf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let yt: Tile<T, { [BR, BN] }> = convert_tile(d * r * wf + bf);
        yt
    }

    /// One tile = BR whole rows (BN >= N); `out` is partitioned in BR x BN tiles.
    #[cutile::entry()]
    pub fn layer_norm_row<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, BN] }>,
        x: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        b: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [pid.0, 0i32]);
        let wt: Tile<T, { [BN] }> = w.load_tile(shape![BN], [0i32]);
        let bt: Tile<T, { [BN] }> = b.load_tile(shape![BN], [0i32]);
        out.store(layer_norm_rows::<T, BR, BN, N>(xt, wt, bt, eps, inv_n));
    }

    /// `layer_norm_row` when BN == N and BR divides M (the launch picks it only then, at TMA=0): every
    /// tile is whole, so the views are unpadded and x, w, b and out are accessed in bounds (Tile IR
    /// `inbounds`; on a zero-padded view tileiras 13.4 refuses it) with TMA disallowed: plain LDG / STG.
    #[cutile::entry()]
    pub fn layer_norm_row_notma<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, BN] }>,
        x: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        b: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        // SAFETY: views of the tensors as they are at entry (their tokens); x, w and b are only read, and
        // this block's tile of out is written by this block alone.
        let part_x: Partition<T, { [BR, BN] }> =
            unsafe { make_partition_view(x, shape![BR, BN], padding::None, dim_map::Identity, x.token()) };
        let part_w: Partition<T, { [BN] }> =
            unsafe { make_partition_view(w, shape![BN], padding::None, dim_map::Identity, w.token()) };
        let part_b: Partition<T, { [BN] }> =
            unsafe { make_partition_view(b, shape![BN], padding::None, dim_map::Identity, b.token()) };
        let part_out: PartitionMut<T, { [BR, BN] }> =
            unsafe { make_partition_view_mut(out, shape![BR, BN], padding::None, out.token()) };
        // SAFETY: the grid is out's row-tile grid and the tiles are exact (BR | M, BN == N == len(w) ==
        // len(b)), so tile (pid.0, 0) of x and out and tile 0 of w and b lie wholly inside them.
        let (xt, _xdone): (Tile<T, { [BR, BN] }>, Token) = unsafe {
            load_view_raw(&part_x, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true], shape![BR, BN])
        };
        let (wt, _wdone): (Tile<T, { [BN] }>, Token) = unsafe {
            load_view_raw(&part_w, [0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true], shape![BN])
        };
        let (bt, _bdone): (Tile<T, { [BN] }>, Token) = unsafe {
            load_view_raw(&part_b, [0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true], shape![BN])
        };
        let yt: Tile<T, { [BR, BN] }> = layer_norm_rows::<T, BR, BN, N>(xt, wt, bt, eps, inv_n);
        let _done: Token = unsafe {
            store_view_raw(&part_out, yt, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true])
        };
    }

    #[cutile::entry()]
    pub fn layer_norm_chunks<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, N] }>,
        x: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        b: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let row = pid.0;
        let chunks: i32 = (N + BN - 1) / BN;
        let inv_n_t: Tile<f32, { [BR, 1] }> = broadcast_scalar(inv_n, shape![BR, 1]);

        let mut sum: Tile<f32, { [BR, 1] }> = constant(0.0f32, shape![BR, 1]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let s: Tile<f32, { [BR] }> = reduce_sum(xf, 1);
            sum = sum + s.reshape(shape![BR, 1]);
        }
        let mean: Tile<f32, { [BR, BN] }> = (sum * inv_n_t).broadcast(shape![BR, BN]);

        let cols: Tile<i32, { [BN] }> = iota(shape![BN]);
        let cols: Tile<i32, { [BR, BN] }> = cols.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let n_tile: Tile<i32, { [BR, BN] }> = broadcast_scalar(N, shape![BR, BN]);
        let zero: Tile<f32, { [BR, BN] }> = constant(0.0f32, shape![BR, BN]);
        let mut sq: Tile<f32, { [BR, 1] }> = constant(0.0f32, shape![BR, 1]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let c: Tile<i32, { [BR, BN] }> = cols + broadcast_scalar(j * BN, shape![BR, BN]);
            let d: Tile<f32, { [BR, BN] }> = select(lt_tile(c, n_tile), xf - mean, zero);
            let s: Tile<f32, { [BR] }> = reduce_sum(d * d, 1);
            sq = sq + s.reshape(shape![BR, 1]);
        }
        let var_eps: Tile<f32, { [BR, 1] }> = sq * inv_n_t + broadcast_scalar(eps, shape![BR, 1]);
        let r: Tile<f32, { [BR, BN] }> = rsqrt(var_eps, ftz::Disabled).broadcast(shape![BR, BN]);

        let mut out_part: PartitionMut<T, { [BR, BN] }> = out.partition_mut(shape![BR, BN]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let wt: Tile<T, { [BN] }> = w.load_tile(shape![BN], [j]);
            let wf: Tile<f32, { [BN] }> = convert_tile(wt);
            let wf: Tile<f32, { [BR, BN] }> = wf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
            let bt: Tile<T, { [BN] }> = b.load_tile(shape![BN], [j]);
            let bf: Tile<f32, { [BN] }> = convert_tile(bt);
            let bf: Tile<f32, { [BR, BN] }> = bf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
            let yt: Tile<T, { [BR, BN] }> = convert_tile((xf - mean) * r * wf + bf);
            out_part.store(yt, [0i32, j]);
        }
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "N"];

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, n) = (dims[0], dims[1]);
    let (br, bn) = (config::get(cfg, "BR"), config::get(cfg, "BN"));
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if n > bn {
            "layer_norm_chunks"
        } else if config::row_without_tma(cfg, m, n) {
            "layer_norm_row_notma"
        } else {
            "layer_norm_row"
        },
        generics: vec![dtype.cutile_name().into(), br.to_string(), bn.to_string(), n.to_string()],
        args: vec![
            ArgView::contiguous("out", 3, &[m, n]),
            ArgView::contiguous("x", 0, &[m, n]),
            ArgView::contiguous("w", 1, &[n]),
            ArgView::contiguous("b", 2, &[n]),
        ],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let n = plan.dims[1];
    let (br, bn) = (config::get(&plan.cfg, "BR") as usize, config::get(&plan.cfg, "BN") as usize);
    let eps = req.scalar("eps").map_err(|e| e.to_string())? as f32;
    let inv_n = 1.0f32 / n as f32;
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut out, x, w, b) = unsafe {
        let a = &spec.args;
        (a[0].borrow::<T>(rt, req), a[1].borrow::<T>(rt, req), a[2].borrow::<T>(rt, req), a[3].borrow::<T>(rt, req))
    };
    let (g, o) = (spec.generics, spec.options);
    let r = if spec.function == "layer_norm_row" {
        let op = kernel::layer_norm_row((&mut out).partition([br, bn]), &x, &w, &b, eps, inv_n).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else if spec.function == "layer_norm_row_notma" {
        let op = kernel::layer_norm_row_notma((&mut out).partition([br, bn]), &x, &w, &b, eps, inv_n).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::layer_norm_chunks((&mut out).partition([br, n as usize]), &x, &w, &b, eps, inv_n).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    r.map_err(|e| format!("{e}"))
}

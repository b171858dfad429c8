//! add_rms_norm: sum = x + residual; out = sum * rsqrt(mean(sum^2) + eps) * weight over rows of (M, N).
//! The rms_norm kernels (rms_norm.rs) with the residual add in front: x and residual are added in f32,
//! `sum` is stored once in T and the norm uses the f32 sum. Padding columns load as 0 (no mask needed).
//!
//! * `add_rms_norm_row` (N <= BN): the whole row is one tile: x and residual are read once.
//! * `add_rms_norm_row_notma` (config TMA=0 and exact tiles: BN == N, BR divides M;
//!   `config::row_without_tma`): the same tile with x, residual and w loaded, and sum and out stored,
//!   without TMA through in-bounds views (plain LDG / STG). With TMA, tileiras warp-specialises the row
//!   kernels (TMA producer warp, shared-memory staging, one 128-thread warpgroup of the 256 computing);
//!   without it, as in cuTile Python's softmax (111 -> 71.7 us at 4096 x 16384 on the H200), every thread
//!   issues its loads back to back. Other shapes ignore TMA=0.
//! * `add_rms_norm_chunks` (N > BN): pass 1 adds, stores `sum` and accumulates the sum of squares over
//!   BN-column chunks; pass 2 re-adds x + residual (the f32 sum, not the rounded one just stored).

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{ArgView, KernelSpec, Plan, Rt};
use cutile::prelude::*;

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "N"];

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// One tile = BR whole rows (BN >= N); `sum` and `out` are partitioned in BR x BN tiles.
    #[cutile::entry()]
    pub fn add_rms_norm_row<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        sum: &mut Tensor<T, { [BR, BN] }>,
        out: &mut Tensor<T, { [BR, BN] }>,
        x: &Tensor<T, { [-1, -1] }>,
        residual: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [pid.0, 0i32]);
        let rt: Tile<T, { [BR, BN] }> = residual.load_tile(shape![BR, BN], [pid.0, 0i32]);
        let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
        let rf: Tile<f32, { [BR, BN] }> = convert_tile(rt);
        let sf: Tile<f32, { [BR, BN] }> = xf + rf;
        let st: Tile<T, { [BR, BN] }> = convert_tile(sf);
        sum.store(st);
        let ss: Tile<f32, { [BR] }> = reduce_sum(sf * sf, 1);
        let ms: Tile<f32, { [BR, 1] }> =
            ss.reshape(shape![BR, 1]) * broadcast_scalar(inv_n, shape![BR, 1]) + broadcast_scalar(eps, shape![BR, 1]);
        let r: Tile<f32, { [BR, BN] }> = rsqrt(ms, ftz::Disabled).broadcast(shape![BR, BN]);
        let wt: Tile<T, { [BN] }> = w.load_tile(shape![BN], [0i32]);
        let wf: Tile<f32, { [BN] }> = convert_tile(wt);
        let wf: Tile<f32, { [BR, BN] }> = wf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let yt: Tile<T, { [BR, BN] }> = convert_tile(sf * r * wf);
        out.store(yt);
    }

    /// `add_rms_norm_row` when BN == N and BR divides M (the launch picks it only then, at TMA=0): every
    /// tile is whole, so the views are unpadded and every access says it is in bounds (Tile IR
    /// `inbounds`; on a zero-padded view tileiras 13.4 refuses it) with TMA disallowed: plain LDG / STG.
    /// w is loaded with x and residual, before the reduction, so all loads can be in flight at once.
    #[cutile::entry()]
    pub fn add_rms_norm_row_notma<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        sum: &mut Tensor<T, { [BR, BN] }>,
        out: &mut Tensor<T, { [BR, BN] }>,
        x: &Tensor<T, { [-1, -1] }>,
        residual: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        // SAFETY: views of the tensors as they are at entry (their tokens); x, residual and w are only
        // read, and this block's tiles of sum and out are written by this block alone.
        let part_x: Partition<T, { [BR, BN] }> =
            unsafe { make_partition_view(x, shape![BR, BN], padding::None, dim_map::Identity, x.token()) };
        let part_r: Partition<T, { [BR, BN] }> =
            unsafe { make_partition_view(residual, shape![BR, BN], padding::None, dim_map::Identity, residual.token()) };
        let part_w: Partition<T, { [BN] }> =
            unsafe { make_partition_view(w, shape![BN], padding::None, dim_map::Identity, w.token()) };
        let part_sum: PartitionMut<T, { [BR, BN] }> =
            unsafe { make_partition_view_mut(sum, shape![BR, BN], padding::None, sum.token()) };
        let part_out: PartitionMut<T, { [BR, BN] }> =
            unsafe { make_partition_view_mut(out, shape![BR, BN], padding::None, out.token()) };
        // SAFETY: the grid is out's row-tile grid and the tiles are exact (BR | M, BN == N == len(w)), so
        // tile (pid.0, 0) of x, residual, sum and out and tile 0 of w lie wholly inside them.
        let (xt, _xdone): (Tile<T, { [BR, BN] }>, Token) = unsafe {
            load_view_raw(&part_x, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true], shape![BR, BN])
        };
        let (rt, _rdone): (Tile<T, { [BR, BN] }>, Token) = unsafe {
            load_view_raw(&part_r, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true], shape![BR, BN])
        };
        let (wt, _wdone): (Tile<T, { [BN] }>, Token) = unsafe {
            load_view_raw(&part_w, [0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true], shape![BN])
        };
        let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
        let rf: Tile<f32, { [BR, BN] }> = convert_tile(rt);
        let sf: Tile<f32, { [BR, BN] }> = xf + rf;
        let st: Tile<T, { [BR, BN] }> = convert_tile(sf);
        let _sdone: Token = unsafe {
            store_view_raw(&part_sum, st, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true])
        };
        let ss: Tile<f32, { [BR] }> = reduce_sum(sf * sf, 1);
        let ms: Tile<f32, { [BR, 1] }> =
            ss.reshape(shape![BR, 1]) * broadcast_scalar(inv_n, shape![BR, 1]) + broadcast_scalar(eps, shape![BR, 1]);
        let r: Tile<f32, { [BR, BN] }> = rsqrt(ms, ftz::Disabled).broadcast(shape![BR, BN]);
        let wf: Tile<f32, { [BN] }> = convert_tile(wt);
        let wf: Tile<f32, { [BR, BN] }> = wf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let yt: Tile<T, { [BR, BN] }> = convert_tile(sf * r * wf);
        let _done: Token = unsafe {
            store_view_raw(&part_out, yt, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true])
        };
    }

    #[cutile::entry()]
    pub fn add_rms_norm_chunks<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        sum: &mut Tensor<T, { [BR, N] }>,
        out: &mut Tensor<T, { [BR, N] }>,
        x: &Tensor<T, { [-1, -1] }>,
        residual: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let row = pid.0;
        let chunks: i32 = (N + BN - 1) / BN;
        let mut sum_part: PartitionMut<T, { [BR, BN] }> = sum.partition_mut(shape![BR, BN]);
        let mut ss: Tile<f32, { [BR, 1] }> = constant(0.0f32, shape![BR, 1]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let rt: Tile<T, { [BR, BN] }> = residual.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let rf: Tile<f32, { [BR, BN] }> = convert_tile(rt);
            let sf: Tile<f32, { [BR, BN] }> = xf + rf;
            let st: Tile<T, { [BR, BN] }> = convert_tile(sf);
            sum_part.store(st, [0i32, j]);
            let s: Tile<f32, { [BR] }> = reduce_sum(sf * sf, 1);
            ss = ss + s.reshape(shape![BR, 1]);
        }
        let ms: Tile<f32, { [BR, 1] }> = ss * broadcast_scalar(inv_n, shape![BR, 1]) + broadcast_scalar(eps, shape![BR, 1]);
        let r: Tile<f32, { [BR, BN] }> = rsqrt(ms, ftz::Disabled).broadcast(shape![BR, BN]);

        let mut out_part: PartitionMut<T, { [BR, BN] }> = out.partition_mut(shape![BR, BN]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let rt: Tile<T, { [BR, BN] }> = residual.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let rf: Tile<f32, { [BR, BN] }> = convert_tile(rt);
            let sf: Tile<f32, { [BR, BN] }> = xf + rf;
            let wt: Tile<T, { [BN] }> = w.load_tile(shape![BN], [j]);
            let wf: Tile<f32, { [BN] }> = convert_tile(wt);
            let wf: Tile<f32, { [BR, BN] }> = wf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
            let yt: Tile<T, { [BR, BN] }> = convert_tile(sf * r * wf);
            out_part.store(yt, [0i32, j]);
        }
    }
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, n) = (dims[0], dims[1]);
    let (br, bn) = (config::get(cfg, "BR"), config::get(cfg, "BN"));
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if n > bn {
            "add_rms_norm_chunks"
        } else if config::row_without_tma(cfg, m, n) {
            "add_rms_norm_row_notma"
        } else {
            "add_rms_norm_row"
        },
        generics: vec![dtype.cutile_name().into(), br.to_string(), bn.to_string(), n.to_string()],
        // request tensors: x 0, residual 1, weight 2, sum 3, out 4 (the spec's order)
        args: vec![
            ArgView::contiguous("sum", 3, &[m, n]),
            ArgView::contiguous("out", 4, &[m, n]),
            ArgView::contiguous("x", 0, &[m, n]),
            ArgView::contiguous("residual", 1, &[m, n]),
            ArgView::contiguous("w", 2, &[n]),
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
    let a = &spec.args;
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut sum, mut out, x, residual, w) = unsafe {
        (a[0].borrow::<T>(rt, req), a[1].borrow::<T>(rt, req), a[2].borrow::<T>(rt, req), a[3].borrow::<T>(rt, req), a[4].borrow::<T>(rt, req))
    };
    let (g, o) = (spec.generics, spec.options);
    let r = if spec.function == "add_rms_norm_row" {
        let op = kernel::add_rms_norm_row((&mut sum).partition([br, bn]), (&mut out).partition([br, bn]), &x, &residual, &w, eps, inv_n)
            .generics(g)
            .compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else if spec.function == "add_rms_norm_row_notma" {
        let op = kernel::add_rms_norm_row_notma((&mut sum).partition([br, bn]), (&mut out).partition([br, bn]), &x, &residual, &w, eps, inv_n)
            .generics(g)
            .compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::add_rms_norm_chunks((&mut sum).partition([br, n as usize]), (&mut out).partition([br, n as usize]), &x, &residual, &w, eps, inv_n)
            .generics(g)
            .compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    r.map_err(|e| format!("{e}"))
}

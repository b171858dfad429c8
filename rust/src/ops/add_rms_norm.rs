//! add_rms_norm: sum = x + residual; out = sum * rsqrt(mean(sum^2) + eps) * weight over rows of (M, N).
//! The rms_norm kernels (rms_norm.rs) with the residual add in front: x and residual are added in f32,
//! `sum` is stored once in T and the norm uses the f32 sum. Padding columns load as 0 (no mask needed).
//!
//! * `add_rms_norm_row` (N <= BN): the whole row is one tile: x and residual are read once.
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
        function: if n <= bn { "add_rms_norm_row" } else { "add_rms_norm_chunks" },
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
    } else {
        let op = kernel::add_rms_norm_chunks((&mut sum).partition([br, n as usize]), (&mut out).partition([br, n as usize]), &x, &residual, &w, eps, inv_n)
            .generics(g)
            .compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    r.map_err(|e| format!("{e}"))
}

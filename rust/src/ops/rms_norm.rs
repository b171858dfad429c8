//! rms_norm: out = x * rsqrt(mean(x^2) + eps) * w over rows of x (M, N). fp32 math throughout;
//! padding columns load as 0, which adds nothing to the sum of squares, so no mask is needed.
//!
//! Two kernels, chosen by the tile width BN (config) against the row width N:
//! * `rms_norm_row` (N <= BN): the whole row is one tile: x is read once (cuTile Python's structure).
//! * `rms_norm_chunks` (N > BN): pass 1 accumulates the sum of squares over BN-column chunks, pass 2
//!   reloads each chunk, scales and writes.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{ArgView, KernelSpec, Plan, Rt};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// One tile = BR whole rows (BN >= N); `out` is partitioned in BR x BN tiles.
    #[cutile::entry()]
    pub fn rms_norm_row<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, BN] }>,
        x: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [pid.0, 0i32]);
        let wt: Tile<T, { [BN] }> = w.load_tile(shape![BN], [0i32]);
        let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
        let ss: Tile<f32, { [BR] }> = reduce_sum(xf * xf, 1);
        let ms: Tile<f32, { [BR, 1] }> =
            ss.reshape(shape![BR, 1]) * broadcast_scalar(inv_n, shape![BR, 1]) + broadcast_scalar(eps, shape![BR, 1]);
        let r: Tile<f32, { [BR, BN] }> = rsqrt(ms, ftz::Disabled).broadcast(shape![BR, BN]);
        let wf: Tile<f32, { [BN] }> = convert_tile(wt);
        let wf: Tile<f32, { [BR, BN] }> = wf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let yt: Tile<T, { [BR, BN] }> = convert_tile(xf * r * wf);
        out.store(yt);
    }

    #[cutile::entry()]
    pub fn rms_norm_chunks<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, N] }>,
        x: &Tensor<T, { [-1, -1] }>,
        w: &Tensor<T, { [-1] }>,
        eps: f32,
        inv_n: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let row = pid.0;
        let chunks: i32 = (N + BN - 1) / BN;
        let mut ss: Tile<f32, { [BR, 1] }> = constant(0.0f32, shape![BR, 1]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let s: Tile<f32, { [BR] }> = reduce_sum(xf * xf, 1);
            ss = ss + s.reshape(shape![BR, 1]);
        }
        let ms: Tile<f32, { [BR, 1] }> = ss * broadcast_scalar(inv_n, shape![BR, 1]) + broadcast_scalar(eps, shape![BR, 1]);
        let r: Tile<f32, { [BR, BN] }> = rsqrt(ms, ftz::Disabled).broadcast(shape![BR, BN]);

        let mut out_part: PartitionMut<T, { [BR, BN] }> = out.partition_mut(shape![BR, BN]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let wt: Tile<T, { [BN] }> = w.load_tile(shape![BN], [j]);
            let wf: Tile<f32, { [BN] }> = convert_tile(wt);
            let wf: Tile<f32, { [BR, BN] }> = wf.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
            let yt: Tile<T, { [BR, BN] }> = convert_tile(xf * r * wf);
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
        function: if n <= bn { "rms_norm_row" } else { "rms_norm_chunks" },
        generics: vec![dtype.cutile_name().into(), br.to_string(), bn.to_string(), n.to_string()],
        args: vec![ArgView::contiguous("out", 2, &[m, n]), ArgView::contiguous("x", 0, &[m, n]), ArgView::contiguous("w", 1, &[n])],
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
    let (mut out, x, w) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req), spec.args[2].borrow::<T>(rt, req)) };
    let (g, o) = (spec.generics, spec.options);
    let r = if spec.function == "rms_norm_row" {
        let op = kernel::rms_norm_row((&mut out).partition([br, bn]), &x, &w, eps, inv_n).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::rms_norm_chunks((&mut out).partition([br, n as usize]), &x, &w, eps, inv_n).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    r.map_err(|e| format!("{e}"))
}

//! transpose: out (N, M) = x (M, N)^T. Each tile block loads a BM x BN tile of x and stores its
//! transpose as the BN x BM tile of out; edge tiles are clipped by the partition on both sides.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{ArgView, KernelSpec, Plan, Rt};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    #[cutile::entry()]
    pub fn transpose<T: ElementType, const BM: i32, const BN: i32>(
        out: &mut Tensor<T, { [BN, BM] }>,
        x: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        // out tile (pid.0, pid.1) is the transpose of x tile (pid.1, pid.0).
        let tx: Tile<T, { [BM, BN] }> = x.load_tile(shape![BM, BN], [pid.1, pid.0]);
        let tt: Tile<T, { [BN, BM] }> = tx.transpose();
        out.store(tt);
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "N"];

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, n) = (dims[0], dims[1]);
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: "transpose",
        generics: vec![dtype.cutile_name().into(), config::get(cfg, "BM").to_string(), config::get(cfg, "BN").to_string()],
        args: vec![ArgView::contiguous("out", 1, &[n, m]), ArgView::contiguous("x", 0, &[m, n])],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let (bm, bn) = (config::get(&plan.cfg, "BM"), config::get(&plan.cfg, "BN"));
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut out, x) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req)) };
    let op = kernel::transpose((&mut out).partition([bn as usize, bm as usize]), &x).generics(spec.generics).compile_options(spec.options);
    unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"))
}

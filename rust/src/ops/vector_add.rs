//! vector_add: out = a + b over a flat vector, one BLOCK-element tile per tile block.
//! The tail tile is handled by the partition: loads past the end read padding, stores past it drop.

use crate::args::Request;
use crate::config::{self, Config};
use crate::ops::{ArgView, KernelSpec, Plan, Rt};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    #[cutile::entry()]
    pub fn vector_add<T: ElementType, const BLOCK: i32>(
        out: &mut Tensor<T, { [BLOCK] }>,
        a: &Tensor<T, { [-1] }>,
        b: &Tensor<T, { [-1] }>,
    ) {
        let ta: Tile<T, { [BLOCK] }> = a.load_tile_like(out);
        let tb: Tile<T, { [BLOCK] }> = b.load_tile_like(out);
        // One correctly rounded add per element: the same result as computing in fp32 and rounding.
        out.store(ta + tb);
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["N"];

pub fn specs(dtype: crate::args::DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let n = dims[0];
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: "vector_add",
        generics: vec![dtype.cutile_name().into(), config::get(cfg, "BLOCK").to_string()],
        args: vec![ArgView::contiguous("out", 2, &[n]), ArgView::contiguous("a", 0, &[n]), ArgView::contiguous("b", 1, &[n])],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let block = config::get(&plan.cfg, "BLOCK");
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device, alive for the stream's work.
    let (mut out, a, b) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req), spec.args[2].borrow::<T>(rt, req)) };
    let op = kernel::vector_add((&mut out).partition([block as usize]), &a, &b).generics(spec.generics).compile_options(spec.options);
    // SAFETY: no host sync by contract; torch orders and keeps alive the memory on this stream.
    unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"))
}

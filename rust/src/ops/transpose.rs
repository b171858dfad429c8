//! transpose: out (N, M) = x (M, N)^T. Each tile block loads a BM x BN tile of x and stores its
//! transpose as the BN x BM tile of out; edge tiles are clipped by the partition on both sides.
//!
//! The tile grid is folded into grid x: out's partition is mapped ([1, 1], linear) onto a 1-D launch of
//! ceil(N/BN) * ceil(M/BM) tile blocks, one out tile each, and the kernel gets both tile indices from
//! the mapped index. A 2-D grid would put ceil(M/BM) on grid y, whose 65535 cap refused valid tall
//! inputs (issue 16); grid x holds 2^31 - 1 blocks, more than the i32 element limit allows tiles.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{ArgView, KernelSpec, Plan, Rt};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    #[cutile::entry()]
    pub fn transpose<T: ElementType, const BM: i32, const BN: i32, const MAP: [i32; 2]>(
        mut out: MappedPartitionMut<T, { [BN, BM] }, MAP>,
        x: &Tensor<T, { [-1, -1] }>,
    ) {
        let part_x = x.partition(shape![BM, BN]);
        for index in out.iter_indices() {
            // out tile (i, j) is the transpose of x tile (j, i).
            let (i, j) = index.components();
            let tx: Tile<T, { [BM, BN] }> = part_x.load([j, i]);
            let tt: Tile<T, { [BN, BM] }> = tx.transpose();
            out.store(tt, index);
        }
    }
}

/// The partition map: linear (row-major over out's tile grid, no grouping).
const MAP: [usize; 2] = [1, 1];

/// Tile blocks of the folded 1-D grid: every out tile, one block each.
pub fn tile_blocks(dims: &[i32], bm: i64, bn: i64) -> i64 {
    let count = |extent: i32, t: i64| (extent as i64 + t - 1) / t;
    count(dims[0], bm) * count(dims[1], bn)
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "N"];

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, n) = (dims[0], dims[1]);
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: "transpose",
        generics: vec![
            dtype.cutile_name().into(),
            config::get(cfg, "BM").to_string(),
            config::get(cfg, "BN").to_string(),
            MAP[0].to_string(),
            MAP[1].to_string(),
        ],
        args: vec![ArgView::contiguous("out", 1, &[n, m]), ArgView::contiguous("x", 0, &[m, n])],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let (bm, bn) = (config::get(&plan.cfg, "BM"), config::get(&plan.cfg, "BN"));
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut out, x) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req)) };
    // ops::check_grid refused more blocks than grid x holds, so the count fits in u32.
    let blocks = tile_blocks(&plan.dims, bm as i64, bn as i64) as u32;
    let out_tiles = (&mut out).partition([bn as usize, bm as usize]).map(MAP, blocks);
    let op = kernel::transpose(out_tiles, &x).generics(spec.generics).compile_options(spec.options);
    unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"))
}

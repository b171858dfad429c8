//! transpose: out (N, M) = x (M, N)^T. Each tile block loads a BM x BN tile of x and stores its
//! transpose as the BN x BM tile of out; edge tiles are clipped by the partition on both sides.
//!
//! out's tile grid is (ceil(N/BN), ceil(M/BM)): the second count lands on grid y, capped at 65535 by
//! CUDA. Past that (tall x, issue 16) the launch folds the grid into grid x (`ops::folds`):
//! `transpose_folded` maps out's partition ([1, 1], linear: out's column tiles fastest) onto a 1-D launch
//! of one block per out tile and gets both tile indices from the mapped index. Below it the plain 2-D
//! kernel runs, out's row tiles fastest (consecutive blocks read along a row band of x), unless the config
//! asks for the other order (OUT_ROWS=1: consecutive blocks write along a row band of out, the order of
//! tile_cpp's and TileGym's kernels; bench/GAPS.md), which the mapped kernel gives.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{self, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_2D};
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

    /// The same tile on a 1-D grid: out tile (i, j) comes from the mapped index.
    #[cutile::entry()]
    pub fn transpose_folded<T: ElementType, const BM: i32, const BN: i32, const MAP: [i32; 2]>(
        mut out: MappedPartitionMut<T, { [BN, BM] }, MAP>,
        x: &Tensor<T, { [-1, -1] }>,
    ) {
        let part_x = x.partition(shape![BM, BN]);
        for index in out.iter_indices() {
            let (i, j) = index.components();
            let tx: Tile<T, { [BM, BN] }> = part_x.load([j, i]);
            let tt: Tile<T, { [BN, BM] }> = tx.transpose();
            out.store(tt, index);
        }
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "N"];

/// out's tile grid (x, y): ceil(N / BN), ceil(M / BM).
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    vec![ops::tiles(dims[1], config::get(cfg, "BN")), ops::tiles(dims[0], config::get(cfg, "BM"))]
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, n) = (dims[0], dims[1]);
    let mut generics = vec![dtype.cutile_name().into(), config::get(cfg, "BM").to_string(), config::get(cfg, "BN").to_string()];
    // the mapped (1-D) kernel: needed past grid y's limit, and it is the OUT_ROWS=1 order at any size
    let mapped = ops::folds(&tile_grid(dims, cfg)) || config::get(cfg, "OUT_ROWS") == 1;
    if mapped {
        generics.extend(LINEAR_MAP_2D.iter().map(|v| v.to_string()));
    }
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if mapped { "transpose_folded" } else { "transpose" },
        generics,
        args: vec![ArgView::contiguous("out", 1, &[n, m]), ArgView::contiguous("x", 0, &[m, n])],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let (bm, bn) = (config::get(&plan.cfg, "BM") as usize, config::get(&plan.cfg, "BN") as usize);
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut out, x) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req)) };
    let tiles = (&mut out).partition([bn, bm]);
    let queued = if spec.function == "transpose_folded" {
        let blocks = ops::folded_blocks(&tile_grid(&plan.dims, &plan.cfg));
        let op = kernel::transpose_folded(tiles.map(LINEAR_MAP_2D, blocks), &x).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::transpose(tiles, &x).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    queued.map_err(|e| format!("{e}"))
}

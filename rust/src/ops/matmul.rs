//! matmul: out (M, N) = a (M, K) @ b (K, N). One tile block per BM x BN output tile, stepping over K
//! in BK slices with an fp32 accumulator (tensor-core mma; fp32 operands run as tf32, which the spec's
//! tolerance allows). Loads past M, N or K read zeros, so tails in every dim need no special case.
//!
//! out's tile grid is (ceil(M/BM), ceil(N/BN)); past 65535 column tiles (grid y's cap) the launch folds
//! it into grid x (`ops::folds`, issue 16): `matmul_folded` walks a mapped partition of out, one block
//! per tile. Below that the plain 2-D kernel runs (the benchmarked one), or with config GM > 0 and exact
//! tiles bmm's `bmm_grouped` on (1, M, K) x (1, K, N) views: the same tile in column-major groups of GM
//! tile-rows (config::ORDER_KEYS), so a wave of CTAs shares A's row panels instead of reading all of A.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{self, bmm, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_2D};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    #[cutile::entry()]
    pub fn matmul<T: ElementType, const BM: i32, const BN: i32, const BK: i32>(
        out: &mut Tensor<T, { [BM, BN] }>,
        a: &Tensor<T, { [-1, -1] }>,
        b: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let k: i32 = get_shape_dim(a.shape(), 1i32);
        let mut acc: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        for kk in 0i32..ceil_div(k, BK) {
            let at: Tile<T, { [BM, BK] }> = a.load_tile(shape![BM, BK], [pid.0, kk]);
            let bt: Tile<T, { [BK, BN] }> = b.load_tile(shape![BK, BN], [kk, pid.1]);
            acc = mma(at, bt, acc);
        }
        let y: Tile<T, { [BM, BN] }> = convert_tile(acc);
        out.store(y);
    }

    /// The same tile on a 1-D grid: out tile (i, j) comes from the mapped index.
    #[cutile::entry()]
    pub fn matmul_folded<T: ElementType, const BM: i32, const BN: i32, const BK: i32, const MAP: [i32; 2]>(
        mut out: MappedPartitionMut<T, { [BM, BN] }, MAP>,
        a: &Tensor<T, { [-1, -1] }>,
        b: &Tensor<T, { [-1, -1] }>,
    ) {
        let k: i32 = get_shape_dim(a.shape(), 1i32);
        for index in out.iter_indices() {
            let (i, j) = index.components();
            let mut acc: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
            for kk in 0i32..ceil_div(k, BK) {
                let at: Tile<T, { [BM, BK] }> = a.load_tile(shape![BM, BK], [i, kk]);
                let bt: Tile<T, { [BK, BN] }> = b.load_tile(shape![BK, BN], [kk, j]);
                acc = mma(at, bt, acc);
            }
            let y: Tile<T, { [BM, BN] }> = convert_tile(acc);
            out.store(y, index);
        }
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "N", "K"];

/// out's tile grid (x, y): ceil(M / BM), ceil(N / BN).
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    vec![ops::tiles(dims[0], config::get(cfg, "BM")), ops::tiles(dims[1], config::get(cfg, "BN"))]
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, n, k) = (dims[0], dims[1], dims[2]);
    let g = |k: &str| config::get(cfg, k).to_string();
    let folded = ops::folds(&tile_grid(dims, cfg));
    let mut generics = vec![dtype.cutile_name().into(), g("BM"), g("BN"), g("BK")];
    if !folded && bmm::grouped(cfg, m, n) {
        // bmm's own spec of one batch entry: the grouped kernel unless bmm's grid would fold (past 65535 tile-rows)
        let entry = bmm::specs(dtype, cfg, &[1, m, n, k]);
        if entry[0].function == "bmm_grouped" {
            return entry;
        }
    }
    if folded {
        generics.extend(LINEAR_MAP_2D.iter().map(|v| v.to_string()));
    }
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if folded { "matmul_folded" } else { "matmul" },
        generics,
        args: vec![ArgView::contiguous("out", 2, &[m, n]), ArgView::contiguous("a", 0, &[m, k]), ArgView::contiguous("b", 1, &[k, n])],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let (bm, bn) = (config::get(&plan.cfg, "BM"), config::get(&plan.cfg, "BN"));
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut out, a, b) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req), spec.args[2].borrow::<T>(rt, req)) };
    if spec.function == "bmm_grouped" {
        let op = bmm::kernel::bmm_grouped((&mut out).partition([1, bm as usize, bn as usize]), &a, &b)
            .generics(spec.generics)
            .compile_options(spec.options);
        return unsafe { op.async_on(&rt.stream) }.map(|_| ()).map_err(|e| format!("{e}"));
    }
    let tiles = (&mut out).partition([bm as usize, bn as usize]);
    let queued = if spec.function == "matmul_folded" {
        let blocks = ops::folded_blocks(&tile_grid(&plan.dims, &plan.cfg));
        let op = kernel::matmul_folded(tiles.map(LINEAR_MAP_2D, blocks), &a, &b).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::matmul(tiles, &a, &b).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    queued.map_err(|e| format!("{e}"))
}

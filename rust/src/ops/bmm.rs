//! bmm: out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N). As matmul, with the batch as the first grid
//! dimension: the output partition (1, BM, BN) gives grid (Bt, ceil(M/BM), ceil(N/BN)).
//!
//! Past 65535 tiles on grid y or z the launch folds that grid into grid x (`ops::folds`, issue 16):
//! `bmm_folded` walks a mapped partition of out, one block per tile. Below that the plain grid runs
//! (the benchmarked kernel), or with GM > 0 and exact tiles `bmm_grouped`: the same grid, each block's
//! tile taken from its launch position in grouped order (config::ORDER_KEYS).

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{self, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_3D};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// Out tile (e, i, j): batch entry e's A row panel i times its B column panel j, K in BK steps with an
    /// fp32 accumulator (loads past M, N or K read zeros): the body of every bmm entry (inlined by the
    /// cuTile compiler).
    fn tile_product<T: ElementType, const BM: i32, const BN: i32, const BK: i32>(
        a: &Tensor<T, { [-1, -1, -1] }>,
        b: &Tensor<T, { [-1, -1, -1] }>,
        e: i32,
        i: i32,
        j: i32,
    ) -> Tile<T, { [1, BM, BN] }> {
        let k: i32 = get_shape_dim(a.shape(), 2i32);
        let mut acc: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        for kk in 0i32..ceil_div(k, BK) {
            let at: Tile<T, { [1, BM, BK] }> = a.load_tile(shape![1, BM, BK], [e, i, kk]);
            let bt: Tile<T, { [1, BK, BN] }> = b.load_tile(shape![1, BK, BN], [e, kk, j]);
            let at: Tile<T, { [BM, BK] }> = at.reshape(shape![BM, BK]);
            let bt: Tile<T, { [BK, BN] }> = bt.reshape(shape![BK, BN]);
            acc = mma(at, bt, acc);
        }
        let y: Tile<T, { [BM, BN] }> = convert_tile(acc);
        y.reshape(shape![1, BM, BN])
    }

    #[cutile::entry()]
    pub fn bmm<T: ElementType, const BM: i32, const BN: i32, const BK: i32>(
        out: &mut Tensor<T, { [1, BM, BN] }>,
        a: &Tensor<T, { [-1, -1, -1] }>,
        b: &Tensor<T, { [-1, -1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        out.store(tile_product::<T, BM, BN, BK>(a, b, pid.0, pid.1, pid.2));
    }

    /// `bmm` on the same (Bt, M/BM, N/BN) grid, but block p (launch order: x fastest) computes the p-th
    /// tile of a batch-entry-major, grouped order: entry e = p / (tm tn); inside it, groups of GM tile-rows
    /// walked column-major (i fastest), so a wave of CTAs shares one entry's A and B panels instead of
    /// spanning one A panel of each of up to Bt entries. Exact tiles only (BM | M, BN | N; the launch checks),
    /// so every store is in bounds.
    #[cutile::entry()]
    pub fn bmm_grouped<T: ElementType, const BM: i32, const BN: i32, const BK: i32, const GM: i32>(
        out: &mut Tensor<T, { [1, BM, BN] }>,
        a: &Tensor<T, { [-1, -1, -1] }>,
        b: &Tensor<T, { [-1, -1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let bt: i32 = get_shape_dim(a.shape(), 0i32);
        let tm: i32 = get_shape_dim(a.shape(), 1i32) / BM;
        let tn: i32 = get_shape_dim(b.shape(), 2i32) / BN;
        let p: i32 = pid.0 + bt * (pid.1 + tm * pid.2);
        let e: i32 = p / (tm * tn);
        let t: i32 = p % (tm * tn);
        let first_m: i32 = (t / (GM * tn)) * GM;
        let rows: i32 = min(tm - first_m, GM); // the last group may be short
        let i: i32 = first_m + (t % (GM * tn)) % rows;
        let j: i32 = (t % (GM * tn)) / rows;
        let y: Tile<T, { [1, BM, BN] }> = tile_product::<T, BM, BN, BK>(a, b, e, i, j);
        // SAFETY: a view of out as it is at entry (its token); p -> (e, i, j) is a bijection of the grid
        // onto out's tiles, so each tile is written by one block, and exact tiles keep it in bounds.
        let part_out: PartitionMut<T, { [1, BM, BN] }> =
            unsafe { make_partition_view_mut(out, shape![1, BM, BN], padding::None, out.token()) };
        let _done: Token = unsafe {
            store_view_raw(&part_out, y, [e, i, j], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true, true])
        };
    }

    /// The same tile on a 1-D grid: out tile (batch entry, i, j) comes from the mapped index.
    #[cutile::entry()]
    pub fn bmm_folded<T: ElementType, const BM: i32, const BN: i32, const BK: i32, const MAP: [i32; 3]>(
        mut out: MappedPartitionMut<T, { [1, BM, BN] }, MAP>,
        a: &Tensor<T, { [-1, -1, -1] }>,
        b: &Tensor<T, { [-1, -1, -1] }>,
    ) {
        for index in out.iter_indices() {
            let (e, i, j) = index.components();
            out.store(tile_product::<T, BM, BN, BK>(a, b, e, i, j), index);
        }
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["Bt", "M", "N", "K"];

/// out's tile grid (x, y, z): Bt, ceil(M / BM), ceil(N / BN).
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    vec![dims[0] as i64, ops::tiles(dims[1], config::get(cfg, "BM")), ops::tiles(dims[2], config::get(cfg, "BN"))]
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (bt, m, n, k) = (dims[0], dims[1], dims[2], dims[3]);
    let g = |k: &str| config::get(cfg, k).to_string();
    let folded = ops::folds(&tile_grid(dims, cfg));
    let grouped = !folded && grouped(cfg, m, n);
    let mut generics = vec![dtype.cutile_name().into(), g("BM"), g("BN"), g("BK")];
    if folded {
        generics.extend(LINEAR_MAP_3D.iter().map(|v| v.to_string()));
    } else if grouped {
        generics.push(g("GM"));
    }
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if folded { "bmm_folded" } else if grouped { "bmm_grouped" } else { "bmm" },
        generics,
        args: vec![
            ArgView::contiguous("out", 2, &[bt, m, n]),
            ArgView::contiguous("a", 0, &[bt, m, k]),
            ArgView::contiguous("b", 1, &[bt, k, n]),
        ],
        options: config::compile_options(cfg),
    }]
}

/// Whether the launch runs `bmm_grouped`: GM > 0 and exact tiles (BM | M, BN | N).
pub fn grouped(cfg: &Config, m: i32, n: i32) -> bool {
    config::get(cfg, "GM") > 0 && m % config::get(cfg, "BM") == 0 && n % config::get(cfg, "BN") == 0
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let (bm, bn) = (config::get(&plan.cfg, "BM"), config::get(&plan.cfg, "BN"));
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut out, a, b) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req), spec.args[2].borrow::<T>(rt, req)) };
    let tiles = (&mut out).partition([1, bm as usize, bn as usize]);
    let queued = if spec.function == "bmm_folded" {
        let blocks = ops::folded_blocks(&tile_grid(&plan.dims, &plan.cfg));
        let op = kernel::bmm_folded(tiles.map(LINEAR_MAP_3D, blocks), &a, &b).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else if spec.function == "bmm_grouped" {
        let op = kernel::bmm_grouped(tiles, &a, &b).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::bmm(tiles, &a, &b).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    queued.map_err(|e| format!("{e}"))
}

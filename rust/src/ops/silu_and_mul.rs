//! silu_and_mul: out (M, H) = silu(x[:, :H]) * x[:, H:]. The two halves of x are passed as two strided
//! views of the same memory (row stride 2H), so the kernel is a plain elementwise map over BR x BH
//! tiles and H need not be a multiple of the tile. silu(g) = g / (1 + exp(-g)) in fp32.
//!
//! out's tile grid is (ceil(M/BR), ceil(H/BH)); past 65535 H tiles (grid y's cap) the launch folds it
//! into grid x (`ops::folds`, issue 16): `silu_and_mul_folded` walks a mapped partition of out, one
//! block per tile. Below that the plain 2-D kernel runs: `silu_and_mul_exact` when the tiles cover (M, H)
//! exactly (the benchmarked shapes), else `silu_and_mul`, whose bounds-checked loads each sit in their own
//! branch region (BSSY) and go out one after the other.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{self, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_2D};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// silu(g) * u in fp32 for one tile: the body of every entry (inlined by the cuTile compiler).
    /// AX (config switch) = 1: exp(-g) as exp2(-g log2 e) with subnormals flushed (a bare MUFU.EX2) and the
    /// approximate division, the arithmetic of cuTile Python's kernel, instead of exp's range-reduced
    /// expansion (sm_90, the exact 1 x 1024 tile: 207 -> 151 instructions, 38 -> 30 registers; true_div
    /// already compiles to the same reciprocal + multiply, tests/sass.rs). Very negative g: the denominator
    /// overflows to inf and g / inf = -0.
    fn silu_times<T: ElementType, const BR: i32, const BH: i32, const AX: i32>(gt: Tile<T, { [BR, BH] }>, ut: Tile<T, { [BR, BH] }>) -> Tile<T, { [BR, BH] }> {
        let g: Tile<f32, { [BR, BH] }> = convert_tile(gt);
        let u: Tile<f32, { [BR, BH] }> = convert_tile(ut);
        let one: Tile<f32, { [BR, BH] }> = constant(1.0f32, shape![BR, BH]);
        let mut silu: Tile<f32, { [BR, BH] }> = g;
        if AX == 1i32 {
            let neg_log2e: Tile<f32, { [BR, BH] }> = constant(-1.442_695_040_888_963_4f32, shape![BR, BH]);
            silu = divf(g, one + exp2(g * neg_log2e, ftz::Enabled), rounding::Approx, ftz::Enabled);
        } else {
            silu = true_div(g, one + exp(negf(g)));
        }
        let y: Tile<T, { [BR, BH] }> = convert_tile(silu * u);
        y
    }

    /// Any (M, H): tiles crossing an edge load zero padding and store clipped.
    #[cutile::entry()]
    pub fn silu_and_mul<T: ElementType, const BR: i32, const BH: i32, const AX: i32>(
        out: &mut Tensor<T, { [BR, BH] }>,
        gate: &Tensor<T, { [-1, -1] }>,
        up: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let gt: Tile<T, { [BR, BH] }> = gate.load_tile(shape![BR, BH], [pid.0, pid.1]);
        let ut: Tile<T, { [BR, BH] }> = up.load_tile(shape![BR, BH], [pid.0, pid.1]);
        out.store(silu_times::<T, BR, BH, AX>(gt, ut));
    }

    /// `silu_and_mul` when BR divides M and BH divides H (the launch picks it only then): every tile is
    /// whole and the loads say so (unpadded views, Tile IR `inbounds`, as cuTile Python's
    /// `check_bounds=False`), so tileiras gives them no bounds-check branch regions and issues the two
    /// loads back to back. (Both are needed: `inbounds` on a zero-padded view fails in tileiras 13.4.)
    #[cutile::entry()]
    pub fn silu_and_mul_exact<T: ElementType, const BR: i32, const BH: i32, const AX: i32>(
        out: &mut Tensor<T, { [BR, BH] }>,
        gate: &Tensor<T, { [-1, -1] }>,
        up: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        // SAFETY: views of the inputs as they are at entry (their tokens); nothing writes them.
        let part_g: Partition<T, { [BR, BH] }> =
            unsafe { make_partition_view(gate, shape![BR, BH], padding::None, dim_map::Identity, gate.token()) };
        let part_u: Partition<T, { [BR, BH] }> =
            unsafe { make_partition_view(up, shape![BR, BH], padding::None, dim_map::Identity, up.token()) };
        // SAFETY: the grid is out's tile grid, which the exact shape makes gate's and up's as well, so
        // tile (pid.0, pid.1) lies wholly inside both views; nothing writes them.
        let (gt, _gdone): (Tile<T, { [BR, BH] }>, Token) = unsafe {
            load_view_raw(&part_g, [pid.0, pid.1], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true], shape![BR, BH])
        };
        let (ut, _udone): (Tile<T, { [BR, BH] }>, Token) = unsafe {
            load_view_raw(&part_u, [pid.0, pid.1], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true], shape![BR, BH])
        };
        out.store(silu_times::<T, BR, BH, AX>(gt, ut));
    }

    /// The same tile on a 1-D grid: out tile (i, j) comes from the mapped index.
    #[cutile::entry()]
    pub fn silu_and_mul_folded<T: ElementType, const BR: i32, const BH: i32, const AX: i32, const MAP: [i32; 2]>(
        mut out: MappedPartitionMut<T, { [BR, BH] }, MAP>,
        gate: &Tensor<T, { [-1, -1] }>,
        up: &Tensor<T, { [-1, -1] }>,
    ) {
        let part_g = gate.partition(shape![BR, BH]);
        let part_u = up.partition(shape![BR, BH]);
        for index in out.iter_indices() {
            let (i, j) = index.components();
            let gt: Tile<T, { [BR, BH] }> = part_g.load([i, j]);
            let ut: Tile<T, { [BR, BH] }> = part_u.load([i, j]);
            out.store(silu_times::<T, BR, BH, AX>(gt, ut), index);
        }
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "H"];

/// out's tile grid (x, y): ceil(M / BR), ceil(H / BH).
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    vec![ops::tiles(dims[0], config::get(cfg, "BR")), ops::tiles(dims[1], config::get(cfg, "BH"))]
}

/// Whether the tiles cover (M, H) exactly (no tile crosses an edge): the unchecked-load kernel's condition.
pub fn exact(dims: &[i32], cfg: &Config) -> bool {
    dims[0] % config::get(cfg, "BR") == 0 && dims[1] % config::get(cfg, "BH") == 0
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, h) = (dims[0], dims[1]);
    let g = |k: &str| config::get(cfg, k).to_string();
    let folded = ops::folds(&tile_grid(dims, cfg));
    let mut generics = vec![dtype.cutile_name().into(), g("BR"), g("BH"), g("AX")];
    if folded {
        generics.extend(LINEAR_MAP_2D.iter().map(|v| v.to_string()));
    }
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if folded {
            "silu_and_mul_folded"
        } else if exact(dims, cfg) {
            "silu_and_mul_exact"
        } else {
            "silu_and_mul"
        },
        generics,
        // gate and up are the two halves of x (row stride 2H); up starts H elements in.
        args: vec![
            ArgView::contiguous("out", 1, &[m, h]),
            ArgView::strided("gate", 0, 0, &[m, h], &[2 * h, 1]),
            ArgView::strided("up", 0, h as i64, &[m, h], &[2 * h, 1]),
        ],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let (br, bh) = (config::get(&plan.cfg, "BR"), config::get(&plan.cfg, "BH"));
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: gate and up are the two halves of the validated x; out is validated (see ArgView::borrow).
    let (mut out, gate, up) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req), spec.args[2].borrow::<T>(rt, req)) };
    let tiles = (&mut out).partition([br as usize, bh as usize]);
    let queued = if spec.function == "silu_and_mul_folded" {
        let blocks = ops::folded_blocks(&tile_grid(&plan.dims, &plan.cfg));
        let op = kernel::silu_and_mul_folded(tiles.map(LINEAR_MAP_2D, blocks), &gate, &up).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else if spec.function == "silu_and_mul_exact" {
        let op = kernel::silu_and_mul_exact(tiles, &gate, &up).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::silu_and_mul(tiles, &gate, &up).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    queued.map_err(|e| format!("{e}"))
}

//! softmax over rows of x (M, N). All math in fp32; columns past N are masked to -inf (loads pad
//! with 0, which would otherwise count).
//!
//! Three kernels, chosen by the tile width BN (config) against the row width N:
//! * `softmax_row` (N <= BN): the whole row is one tile, so x is read once: max, exp, sum and the
//!   write all happen on registers (cuTile Python's structure).
//! * `softmax_row_notma` (config TMA=0 and exact tiles: BN == N, BR divides M; `config::row_without_tma`):
//!   the same tile, loaded and stored without TMA through in-bounds views (plain LDG / STG). With TMA,
//!   tileiras warp-specialises `softmax_row` (a producer warp stages x in shared memory, one 128-thread
//!   warpgroup of the 256 computes and stores back through shared memory); cuTile Python went from 111
//!   to 71.7 us at 4096 x 16384 bf16 on the H200 by this change. Other shapes ignore TMA=0.
//! * `softmax_chunks` (N > BN): one tile block streams its rows in BN-column chunks: pass 1 keeps a
//!   running max and a rescaled running sum (online softmax, so exp never overflows and any N works
//!   with a fixed tile), pass 2 recomputes exp(x - max) / sum and writes.

use crate::args::{DType, Request};
use crate::config::{self, Config};
use crate::ops::{ArgView, KernelSpec, Plan, Rt};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// softmax of BR rows held in one tile (columns N.. are padding): the body of both row kernels
    /// (inlined by the cuTile compiler).
    fn softmax_rows<T: ElementType, const BR: i32, const BN: i32, const N: i32>(xt: Tile<T, { [BR, BN] }>) -> Tile<T, { [BR, BN] }> {
        let mut xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
        if N < BN {
            let cols: Tile<i32, { [BN] }> = iota(shape![BN]);
            let cols: Tile<i32, { [BR, BN] }> = cols.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
            let n_tile: Tile<i32, { [BR, BN] }> = broadcast_scalar(N, shape![BR, BN]);
            let neg_inf: Tile<f32, { [BR, BN] }> = constant(f32::NEG_INFINITY, shape![BR, BN]);
            xf = select(lt_tile(cols, n_tile), xf, neg_inf);
        }
        let m: Tile<f32, { [BR] }> = reduce_max(xf, 1);
        // exp(x - m) as exp2((x - m) * log2 e) with subnormals flushed: a bare MUFU.EX2 per element (exp lowers
        // to a range-reduced expansion around the EX2, ~4 FFMA, 2 FMUL, 2 SHF, 2 FADD per element; on the sm_90
        // SASS of the 1 x 16384 W 8 OCC 3 tile it also spilled 24 B to the stack; tests/sass.rs). x - m first,
        // not one FFMA x * log2 e - m * log2 e: m * log2 e overflows for |m| > FLT_MAX / log2 e. A p under 2^-126
        // becomes 0 (an absolute error below 2^-126 in an output <= 1). Masked columns: -inf, p = 0.
        let log2e: Tile<f32, { [BR, BN] }> = constant(1.442_695_040_888_963_4f32, shape![BR, BN]);
        let d: Tile<f32, { [BR, BN] }> = xf - m.reshape(shape![BR, 1]).broadcast(shape![BR, BN]);
        let p: Tile<f32, { [BR, BN] }> = exp2(d * log2e, ftz::Enabled);
        let l: Tile<f32, { [BR] }> = reduce_sum(p, 1);
        let one: Tile<f32, { [BR, 1] }> = constant(1.0f32, shape![BR, 1]);
        let inv: Tile<f32, { [BR, BN] }> = true_div(one, l.reshape(shape![BR, 1])).broadcast(shape![BR, BN]);
        let yt: Tile<T, { [BR, BN] }> = convert_tile(p * inv);
        yt
    }

    /// One tile = BR whole rows (BN >= N). `out` is partitioned in BR x BN tiles, so the grid has one
    /// column of blocks and stores past N are dropped.
    #[cutile::entry()]
    pub fn softmax_row<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, BN] }>,
        x: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [pid.0, 0i32]);
        out.store(softmax_rows::<T, BR, BN, N>(xt));
    }

    /// `softmax_row` when BN == N and BR divides M (the launch picks it only then, at TMA=0): every tile
    /// is whole, so the views are unpadded and the load and store say they are in bounds (Tile IR
    /// `inbounds`; on a zero-padded view tileiras 13.4 refuses it), with TMA disallowed: tileiras then
    /// gives each thread plain 128-bit LDG / STG instead of a TMA producer warp and shared-memory staging.
    #[cutile::entry()]
    pub fn softmax_row_notma<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, BN] }>,
        x: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        // SAFETY: views of the tensors as they are at entry (their tokens); x is only read, and this
        // block's tile of out is written by this block alone.
        let part_x: Partition<T, { [BR, BN] }> =
            unsafe { make_partition_view(x, shape![BR, BN], padding::None, dim_map::Identity, x.token()) };
        let part_out: PartitionMut<T, { [BR, BN] }> =
            unsafe { make_partition_view_mut(out, shape![BR, BN], padding::None, out.token()) };
        // SAFETY: the grid is out's row-tile grid and the tiles are exact (BR | M, BN == N), so tile
        // (pid.0, 0) lies wholly inside x and out.
        let (xt, _xdone): (Tile<T, { [BR, BN] }>, Token) = unsafe {
            load_view_raw(&part_x, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true], shape![BR, BN])
        };
        let yt: Tile<T, { [BR, BN] }> = softmax_rows::<T, BR, BN, N>(xt);
        let _done: Token = unsafe {
            store_view_raw(&part_out, yt, [pid.0, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true])
        };
    }

    /// `out` is the block's BR x N slab (N exact, a generic: the chunk loop needs its bound).
    #[cutile::entry()]
    pub fn softmax_chunks<T: ElementType, const BR: i32, const BN: i32, const N: i32>(
        out: &mut Tensor<T, { [BR, N] }>,
        x: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let row = pid.0;
        let chunks: i32 = (N + BN - 1) / BN;
        let cols: Tile<i32, { [BN] }> = iota(shape![BN]);
        let cols: Tile<i32, { [BR, BN] }> = cols.reshape(shape![1, BN]).broadcast(shape![BR, BN]);
        let n_tile: Tile<i32, { [BR, BN] }> = broadcast_scalar(N, shape![BR, BN]);
        let neg_inf: Tile<f32, { [BR, BN] }> = constant(f32::NEG_INFINITY, shape![BR, BN]);

        let mut m: Tile<f32, { [BR, 1] }> = constant(f32::NEG_INFINITY, shape![BR, 1]);
        let mut l: Tile<f32, { [BR, 1] }> = constant(0.0f32, shape![BR, 1]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let c: Tile<i32, { [BR, BN] }> = cols + broadcast_scalar(j * BN, shape![BR, BN]);
            let xf: Tile<f32, { [BR, BN] }> = select(lt_tile(c, n_tile), xf, neg_inf);
            let cmax: Tile<f32, { [BR] }> = reduce_max(xf, 1);
            let m_new: Tile<f32, { [BR, 1] }> = max_tile(m, cmax.reshape(shape![BR, 1]));
            // Every chunk holds at least one real column, so m_new is finite and masked p are 0.
            let p: Tile<f32, { [BR, BN] }> = exp(xf - m_new.broadcast(shape![BR, BN]));
            let s: Tile<f32, { [BR] }> = reduce_sum(p, 1);
            l = l * exp(m - m_new) + s.reshape(shape![BR, 1]);
            m = m_new;
        }

        let one: Tile<f32, { [BR, 1] }> = constant(1.0f32, shape![BR, 1]);
        let inv: Tile<f32, { [BR, BN] }> = true_div(one, l).broadcast(shape![BR, BN]);
        let mb: Tile<f32, { [BR, BN] }> = m.broadcast(shape![BR, BN]);
        let mut out_part: PartitionMut<T, { [BR, BN] }> = out.partition_mut(shape![BR, BN]);
        for j in 0i32..chunks {
            let xt: Tile<T, { [BR, BN] }> = x.load_tile(shape![BR, BN], [row, j]);
            let xf: Tile<f32, { [BR, BN] }> = convert_tile(xt);
            let y: Tile<f32, { [BR, BN] }> = exp(xf - mb) * inv;
            let yt: Tile<T, { [BR, BN] }> = convert_tile(y);
            out_part.store(yt, [0i32, j]);
        }
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["M", "N"];

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (m, n) = (dims[0], dims[1]);
    let (br, bn) = (config::get(cfg, "BR"), config::get(cfg, "BN"));
    let function = if n > bn {
        "softmax_chunks"
    } else if config::row_without_tma(cfg, m, n) {
        "softmax_row_notma"
    } else {
        "softmax_row"
    };
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function,
        generics: vec![dtype.cutile_name().into(), br.to_string(), bn.to_string(), n.to_string()],
        args: vec![ArgView::contiguous("out", 1, &[m, n]), ArgView::contiguous("x", 0, &[m, n])],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let n = plan.dims[1];
    let (br, bn) = (config::get(&plan.cfg, "BR") as usize, config::get(&plan.cfg, "BN") as usize);
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: validated contiguous torch tensors of dtype T on rt's device (see ArgView::borrow).
    let (mut out, x) = unsafe { (spec.args[0].borrow::<T>(rt, req), spec.args[1].borrow::<T>(rt, req)) };
    let (g, o) = (spec.generics, spec.options);
    let r = if spec.function == "softmax_row" {
        let op = kernel::softmax_row((&mut out).partition([br, bn]), &x).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else if spec.function == "softmax_row_notma" {
        let op = kernel::softmax_row_notma((&mut out).partition([br, bn]), &x).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::softmax_chunks((&mut out).partition([br, n as usize]), &x).generics(g).compile_options(o);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    r.map_err(|e| format!("{e}"))
}

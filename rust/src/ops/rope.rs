//! rope: out = q * cos + rotate_half(q) * sin, q (B, H, S, D), cos/sin (S, D).
//!
//! With q = [q1 | q2] (halves of the head dim) the result is
//!   out[..., :D/2] = q1 * cos[:, :D/2] - q2 * sin[:, :D/2]
//!   out[..., D/2:] = q2 * cos[:, D/2:] + q1 * sin[:, D/2:]
//! i.e. out = q * cos + [-q2 | q1] * sin. One launch reads q once and writes both halves.
//!
//! The trick is a reshape, not a gather: a contiguous (B*H, S, D) tensor is also a contiguous
//! (B*H, 2S, D/2) tensor whose row 2s holds q1 of position s and row 2s+1 holds q2. A tile of 2*BS
//! such rows x DH = next power of two >= D/2 columns (clipped to D/2 by the view, so any even D works)
//! is reshaped in registers to (BS, 2, DH); `extract` takes the halves, `cat` builds [-q2 | q1].
//! cos/sin are seen the same way as (2S, D/2). Every view is a plain contiguous reshape, so the
//! loads and the store can be TMA (hardware bounds checks instead of per-load branches).
//!
//! out's tile grid is (B*H, ceil(S/BS), 1); past 65535 position tiles (grid y's cap) the launch folds
//! it into grid x (`ops::folds`, issue 16): `rope_folded` walks a mapped partition of out, one block
//! per tile. Below that the plain grid runs (the benchmarked kernel).
//!
//! Safe in place (out is q, the spec's inplace_ok; `args::check_signature` lets exactly that pair through):
//! an out tile (head, position block) is stored from the q tile of the same (head, position block), loaded
//! whole (both halves) before `rotate` combines them, so the store cannot precede the load it overwrites;
//! `rope` has one block per tile and `rope_folded` walks distinct tiles one after another (each loaded, then
//! stored), so no tile is read after another block or iteration wrote it.

use crate::args::{DType, Request};
use crate::config::{self, next_pow2, Config};
use crate::ops::{self, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_3D};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// out = q * cos + [-q2 | q1] * sin for one tile of R = 2 * BS rows of the (., 2S, D/2) views: the body of
    /// both entries (inlined by the cuTile compiler).
    fn rotate<T: ElementType, const BS: i32, const R: i32, const DH: i32>(
        qt: Tile<T, { [1, R, DH] }>,
        ct: Tile<T, { [R, DH] }>,
        st: Tile<T, { [R, DH] }>,
    ) -> Tile<T, { [1, R, DH] }> {
        let qf: Tile<f32, { [1, R, DH] }> = convert_tile(qt);
        let qf: Tile<f32, { [BS, 2, DH] }> = qf.reshape(shape![BS, 2, DH]);
        let cf: Tile<f32, { [R, DH] }> = convert_tile(ct);
        let cf: Tile<f32, { [BS, 2, DH] }> = cf.reshape(shape![BS, 2, DH]);
        let sf: Tile<f32, { [R, DH] }> = convert_tile(st);
        let sf: Tile<f32, { [BS, 2, DH] }> = sf.reshape(shape![BS, 2, DH]);
        let i0: Tile<i32, { [] }> = scalar_to_tile(0i32);
        let i1: Tile<i32, { [] }> = scalar_to_tile(1i32);
        let q1: Tile<f32, { [BS, 1, DH] }> = extract(qf, [i0, i0, i0]);
        let q2: Tile<f32, { [BS, 1, DH] }> = extract(qf, [i0, i1, i0]);
        let zero: Tile<f32, { [BS, 1, DH] }> = constant(0.0f32, shape![BS, 1, DH]);
        let rot: Tile<f32, { [BS, 2, DH] }> = cat(zero - q2, q1, 1i32);
        let y: Tile<f32, { [BS, 2, DH] }> = qf * cf + rot * sf;
        let yt: Tile<T, { [BS, 2, DH] }> = convert_tile(y);
        yt.reshape(shape![1, R, DH])
    }

    /// R = 2 * BS rows of the (B*H, 2S, D/2) views per tile (a generic: shapes take no arithmetic).
    #[cutile::entry()]
    pub fn rope<T: ElementType, const BS: i32, const R: i32, const DH: i32>(
        out: &mut Tensor<T, { [1, R, DH] }>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        c: &Tensor<T, { [-1, -1] }>,
        s: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let qt: Tile<T, { [1, R, DH] }> = q.load_tile(shape![1, R, DH], [pid.0, pid.1, 0i32]);
        let ct: Tile<T, { [R, DH] }> = c.load_tile(shape![R, DH], [pid.1, 0i32]);
        let st: Tile<T, { [R, DH] }> = s.load_tile(shape![R, DH], [pid.1, 0i32]);
        out.store(rotate::<T, BS, R, DH>(qt, ct, st));
    }

    /// The same tile on a 1-D grid: out tile (head, position block, 0) comes from the mapped index.
    #[cutile::entry()]
    pub fn rope_folded<T: ElementType, const BS: i32, const R: i32, const DH: i32, const MAP: [i32; 3]>(
        mut out: MappedPartitionMut<T, { [1, R, DH] }, MAP>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        c: &Tensor<T, { [-1, -1] }>,
        s: &Tensor<T, { [-1, -1] }>,
    ) {
        let part_q = q.partition(shape![1, R, DH]);
        let part_c = c.partition(shape![R, DH]);
        let part_s = s.partition(shape![R, DH]);
        for index in out.iter_indices() {
            let (head, blk, col) = index.components();
            let qt: Tile<T, { [1, R, DH] }> = part_q.load([head, blk, col]);
            let ct: Tile<T, { [R, DH] }> = part_c.load([blk, col]);
            let st: Tile<T, { [R, DH] }> = part_s.load([blk, col]);
            out.store(rotate::<T, BS, R, DH>(qt, ct, st), index);
        }
    }
}

/// The names of `Plan::dims` (the generated table binds and checks them; `ops::plan_with`).
pub const DIMS: &[&str] = &["B", "H", "S", "D"];

fn dh(d: i32) -> i32 {
    next_pow2((d / 2) as i64) as i32
}

/// out's tile grid (x, y, z) over the (B*H, 2S, D/2) view in (1, 2*BS, DH) tiles: B*H, ceil(S / BS), 1.
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    let bs = config::get(cfg, "BS");
    vec![dims[0] as i64 * dims[1] as i64, ops::tiles(dims[2], bs), ops::tiles(dims[3] / 2, dh(dims[3]))]
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (bh, s, d) = (dims[0] * dims[1], dims[2], dims[3]);
    let bs = config::get(cfg, "BS");
    let half = d / 2;
    let folded = ops::folds(&tile_grid(dims, cfg));
    let mut generics = vec![dtype.cutile_name().into(), bs.to_string(), (2 * bs).to_string(), dh(d).to_string()];
    if folded {
        generics.extend(LINEAR_MAP_3D.iter().map(|v| v.to_string()));
    }
    vec![KernelSpec {
        ast: kernel::__module_ast_self,
        module: "kernel",
        function: if folded { "rope_folded" } else { "rope" },
        generics,
        args: vec![
            ArgView::contiguous("out", 3, &[bh, 2 * s, half]),
            ArgView::contiguous("q", 0, &[bh, 2 * s, half]),
            ArgView::contiguous("c", 1, &[2 * s, half]),
            ArgView::contiguous("s", 2, &[2 * s, half]),
        ],
        options: config::compile_options(cfg),
    }]
}

pub fn launch<T: cutile::DType>(req: &Request, plan: &Plan, rt: &Rt) -> Result<(), String> {
    let bs = config::get(&plan.cfg, "BS");
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: contiguous reshapes of the validated q, cos, sin and out (see ArgView::borrow).
    let (mut out, q, c, sn) = unsafe {
        let a = &spec.args;
        (a[0].borrow::<T>(rt, req), a[1].borrow::<T>(rt, req), a[2].borrow::<T>(rt, req), a[3].borrow::<T>(rt, req))
    };
    let dh = dh(plan.dims[3]) as usize;
    let tiles = (&mut out).partition([1, 2 * bs as usize, dh]);
    let queued = if spec.function == "rope_folded" {
        let blocks = ops::folded_blocks(&tile_grid(&plan.dims, &plan.cfg));
        let op = kernel::rope_folded(tiles.map(LINEAR_MAP_3D, blocks), &q, &c, &sn).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    } else {
        let op = kernel::rope(tiles, &q, &c, &sn).generics(spec.generics).compile_options(spec.options);
        unsafe { op.async_on(&rt.stream) }.map(|_| ())
    };
    queued.map_err(|e| format!("{e}"))
}

//! rope: out = q * cos + rotate_half(q) * sin, q (B, H, S, D), cos/sin (S, D).
//!
//! With q = [q1 | q2] (halves of the head dim) the result is
//!   out[..., :D/2] = q1 * cos[:, :D/2] - q2 * sin[:, :D/2]
//!   out[..., D/2:] = q2 * cos[:, D/2:] + q1 * sin[:, D/2:]
//! One launch reads q once and writes both halves.
//!
//! `rope_halves` (D/2 a power of two: every spec and bench head dim): q, out are seen as (B*H, S, D)
//! and cos/sin as (S, D); a block loads q1, q2 and the four cos/sin halves as separate (BS, D/2) tiles
//! (column tile 0 or 1 of width D/2) and stores the two output halves through a (1, BS, D/2) partition
//! of its (1, BS, D) out tile. Why separate tiles: splitting one loaded tile with `extract` and joining
//! the result with `cat` is staged through shared memory behind block barriers by tileiras (17408 B
//! smem, loads issued in three dependent groups; docs/upstream/cutile-extract-cat-shared-memory.md),
//! which held this op at 34% of copy bandwidth. When BS divides S every tile is whole and
//! `rope_halves_exact` states that (Tile IR `inbounds`), so no load carries a bounds check.
//!
//! `rope` / `rope_folded` (any even D, and grids past 65535 position tiles): a contiguous (B*H, S, D)
//! tensor is also a contiguous (B*H, 2S, D/2) tensor whose row 2s holds q1 of position s and row 2s+1
//! holds q2. A tile of 2*BS such rows x DH = next power of two >= D/2 columns (clipped to D/2 by the
//! view) is reshaped in registers to (BS, 2, DH); `extract` takes the halves, `cat` builds [-q2 | q1].
//! cos/sin are seen the same way as (2S, D/2). The output halves cannot be stored separately there:
//! a (1, BS, DH) sub-tile of out would not start at column D/2 when DH > D/2, and the folded kernel's
//! mapped partition stores whole tiles only.
//!
//! out's tile grid is (B*H, ceil(S/BS), 1); past 65535 position tiles (grid y's cap) the launch folds
//! it into grid x (`ops::folds`, issue 16): `rope_folded` walks a mapped partition of out, one block
//! per tile. Below that the plain grid runs (`rope_halves` when D/2 is a power of two: the benchmarked
//! kernel).
//!
//! Safe in place (out is q, the spec's inplace_ok; `args::check_signature` lets exactly that pair through):
//! an out tile (head, position block) is stored from the q tile(s) of the same (head, position block), and
//! each stored half is computed from both loaded halves, so no store can precede the loads it overwrites;
//! every kernel here has one block per out tile (`rope_folded` walks distinct tiles one after another,
//! each loaded, then stored), so no tile is read after another block or iteration wrote it.

use crate::args::{DType, Request};
use crate::config::{self, next_pow2, Config};
use crate::ops::{self, ArgView, KernelSpec, Plan, Rt, LINEAR_MAP_3D};
use cutile::prelude::*;

#[cutile::module]
pub mod kernel {
    use cutile::core::*;

    /// a * ca + b * sb in fp32, for one output half of `rope_halves` (b = -q2 for the first half).
    fn half_out<T: ElementType, const BS: i32, const DH: i32>(
        a: Tile<f32, { [1, BS, DH] }>,
        ca: Tile<T, { [BS, DH] }>,
        b: Tile<f32, { [1, BS, DH] }>,
        sb: Tile<T, { [BS, DH] }>,
    ) -> Tile<T, { [1, BS, DH] }> {
        let cf: Tile<f32, { [BS, DH] }> = convert_tile(ca);
        let cf: Tile<f32, { [1, BS, DH] }> = cf.reshape(shape![1, BS, DH]);
        let sf: Tile<f32, { [BS, DH] }> = convert_tile(sb);
        let sf: Tile<f32, { [1, BS, DH] }> = sf.reshape(shape![1, BS, DH]);
        let y: Tile<T, { [1, BS, DH] }> = convert_tile(a * cf + b * sf);
        y
    }

    /// The body of both `rope_halves` entries once the halves are loaded: out[..., :DH] = q1*c1 - q2*s1 and
    /// out[..., DH:] = q2*c2 + q1*s2, stored as column tiles 0 and 1 of this block's (1, BS, D) out tile.
    /// Both stores are ordered only after the kernel's entry (the halves are disjoint): chained through
    /// out's token, the second would wait for the first behind a block barrier (BAR.SYNC).
    fn rotate_halves<T: ElementType, const BS: i32, const DH: i32, const D: i32>(
        out: &mut Tensor<T, { [1, BS, D] }>,
        q1: Tile<T, { [1, BS, DH] }>,
        q2: Tile<T, { [1, BS, DH] }>,
        c1: Tile<T, { [BS, DH] }>,
        c2: Tile<T, { [BS, DH] }>,
        s1: Tile<T, { [BS, DH] }>,
        s2: Tile<T, { [BS, DH] }>,
    ) {
        let q1f: Tile<f32, { [1, BS, DH] }> = convert_tile(q1);
        let q2f: Tile<f32, { [1, BS, DH] }> = convert_tile(q2);
        let zero: Tile<f32, { [1, BS, DH] }> = constant(0.0f32, shape![1, BS, DH]);
        let o1: Tile<T, { [1, BS, DH] }> = half_out::<T, BS, DH>(q1f, c1, zero - q2f, s1);
        let o2: Tile<T, { [1, BS, DH] }> = half_out::<T, BS, DH>(q2f, c2, q1f, s2);
        let entry: Token = out.token();
        let mut lo = out.partition_mut(shape![1, BS, DH]);
        lo.store(o1, [0i32, 0i32, 0i32]);
        // SAFETY: the second store writes the other column tile, disjoint from the first; it needs only
        // the ordering the first had (the entry token), not the first store itself.
        unsafe { out.set_token(entry) };
        let mut hi = out.partition_mut(shape![1, BS, DH]);
        hi.store(o2, [0i32, 0i32, 1i32]);
    }

    /// D/2 = DH a power of two (D = 2 * DH: shapes take no arithmetic); out tile (1, BS, D) of (B*H, S, D).
    /// Tiles may cross the end of S (zero-padded loads, clipped stores): any S.
    #[cutile::entry()]
    pub fn rope_halves<T: ElementType, const BS: i32, const DH: i32, const D: i32>(
        out: &mut Tensor<T, { [1, BS, D] }>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        c: &Tensor<T, { [-1, -1] }>,
        s: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let q1: Tile<T, { [1, BS, DH] }> = q.load_tile(shape![1, BS, DH], [pid.0, pid.1, 0i32]);
        let q2: Tile<T, { [1, BS, DH] }> = q.load_tile(shape![1, BS, DH], [pid.0, pid.1, 1i32]);
        let c1: Tile<T, { [BS, DH] }> = c.load_tile(shape![BS, DH], [pid.1, 0i32]);
        let c2: Tile<T, { [BS, DH] }> = c.load_tile(shape![BS, DH], [pid.1, 1i32]);
        let s1: Tile<T, { [BS, DH] }> = s.load_tile(shape![BS, DH], [pid.1, 0i32]);
        let s2: Tile<T, { [BS, DH] }> = s.load_tile(shape![BS, DH], [pid.1, 1i32]);
        rotate_halves::<T, BS, DH, D>(out, q1, q2, c1, c2, s1, s2);
    }

    /// `rope_halves` when BS divides S (the launch picks it only then): every tile lies inside q, cos and
    /// sin, and the loads say so (unpadded views, Tile IR `inbounds`), so tileiras drops their bounds-check
    /// branch regions and issues the six loads back to back.
    #[cutile::entry()]
    pub fn rope_halves_exact<T: ElementType, const BS: i32, const DH: i32, const D: i32>(
        out: &mut Tensor<T, { [1, BS, D] }>,
        q: &Tensor<T, { [-1, -1, -1] }>,
        c: &Tensor<T, { [-1, -1] }>,
        s: &Tensor<T, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        // SAFETY: views of the inputs as they are at entry (their tokens); nothing else writes them. In place
        // (out is q), element e of q is read by one load element only (q1[e] or q2[e]) and overwritten by the
        // store element computed from it (o1[e] or o2[e]), so data dependence orders each store after the
        // load of what it overwrites, whichever threads hold them (as in `rope_halves`).
        let pq: Partition<T, { [1, BS, DH] }> =
            unsafe { make_partition_view(q, shape![1, BS, DH], padding::None, dim_map::Identity, q.token()) };
        let pc: Partition<T, { [BS, DH] }> =
            unsafe { make_partition_view(c, shape![BS, DH], padding::None, dim_map::Identity, c.token()) };
        let ps: Partition<T, { [BS, DH] }> =
            unsafe { make_partition_view(s, shape![BS, DH], padding::None, dim_map::Identity, s.token()) };
        // SAFETY: the grid is (B*H, S/BS) exactly and the column tiles are 0 and 1 of D = 2 * DH, so every
        // index below addresses a whole tile inside its view.
        let (q1, _d0): (Tile<T, { [1, BS, DH] }>, Token) = unsafe {
            load_view_raw(&pq, [pid.0, pid.1, 0i32], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true, true], shape![1, BS, DH])
        };
        let (q2, _d1): (Tile<T, { [1, BS, DH] }>, Token) = unsafe {
            load_view_raw(&pq, [pid.0, pid.1, 1i32], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true, true], shape![1, BS, DH])
        };
        let (c1, _d2): (Tile<T, { [BS, DH] }>, Token) = unsafe {
            load_view_raw(&pc, [pid.1, 0i32], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true], shape![BS, DH])
        };
        let (c2, _d3): (Tile<T, { [BS, DH] }>, Token) = unsafe {
            load_view_raw(&pc, [pid.1, 1i32], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true], shape![BS, DH])
        };
        let (s1, _d4): (Tile<T, { [BS, DH] }>, Token) = unsafe {
            load_view_raw(&ps, [pid.1, 0i32], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true], shape![BS, DH])
        };
        let (s2, _d5): (Tile<T, { [BS, DH] }>, Token) = unsafe {
            load_view_raw(&ps, [pid.1, 1i32], None, ordering::Weak, scope::TileBlock, tma::Enabled, None, [true, true], shape![BS, DH])
        };
        rotate_halves::<T, BS, DH, D>(out, q1, q2, c1, c2, s1, s2);
    }

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

/// out's tile grid (x, y, z): B*H, ceil(S / BS), 1 (both layouts: (1, BS, D) tiles of (B*H, S, D), or
/// (1, 2*BS, DH) tiles of (B*H, 2S, D/2) with DH >= D/2).
pub fn tile_grid(dims: &[i32], cfg: &Config) -> Vec<i64> {
    let bs = config::get(cfg, "BS");
    vec![dims[0] as i64 * dims[1] as i64, ops::tiles(dims[2], bs), ops::tiles(dims[3] / 2, dh(dims[3]))]
}

/// Whether the halves are exactly one column tile each (`rope_halves`): D/2 a power of two.
fn halves_fit(d: i32) -> bool {
    dh(d) == d / 2
}

pub fn specs(dtype: DType, cfg: &Config, dims: &[i32]) -> Vec<KernelSpec> {
    let (bh, s, d) = (dims[0] * dims[1], dims[2], dims[3]);
    let bs = config::get(cfg, "BS");
    let half = d / 2;
    let folded = ops::folds(&tile_grid(dims, cfg));
    let t = dtype.cutile_name().to_string();
    if !folded && halves_fit(d) {
        return vec![KernelSpec {
            ast: kernel::__module_ast_self,
            module: "kernel",
            function: if s % bs == 0 { "rope_halves_exact" } else { "rope_halves" },
            generics: vec![t, bs.to_string(), half.to_string(), d.to_string()],
            args: vec![
                ArgView::contiguous("out", 3, &[bh, s, d]),
                ArgView::contiguous("q", 0, &[bh, s, d]),
                ArgView::contiguous("c", 1, &[s, d]),
                ArgView::contiguous("s", 2, &[s, d]),
            ],
            options: config::compile_options(cfg),
        }];
    }
    let mut generics = vec![t, bs.to_string(), (2 * bs).to_string(), dh(d).to_string()];
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
    let bs = config::get(&plan.cfg, "BS") as usize;
    let spec = specs(req.dtype, &plan.cfg, &plan.dims).remove(0);
    // SAFETY: contiguous reshapes of the validated q, cos, sin and out (see ArgView::borrow).
    let (mut out, q, c, sn) = unsafe {
        let a = &spec.args;
        (a[0].borrow::<T>(rt, req), a[1].borrow::<T>(rt, req), a[2].borrow::<T>(rt, req), a[3].borrow::<T>(rt, req))
    };
    let queued = match spec.function {
        "rope_halves" | "rope_halves_exact" => {
            let tiles = (&mut out).partition([1, bs, plan.dims[3] as usize]);
            if spec.function == "rope_halves_exact" {
                let op = kernel::rope_halves_exact(tiles, &q, &c, &sn).generics(spec.generics).compile_options(spec.options);
                unsafe { op.async_on(&rt.stream) }.map(|_| ())
            } else {
                let op = kernel::rope_halves(tiles, &q, &c, &sn).generics(spec.generics).compile_options(spec.options);
                unsafe { op.async_on(&rt.stream) }.map(|_| ())
            }
        }
        function => {
            let tiles = (&mut out).partition([1, 2 * bs, dh(plan.dims[3]) as usize]);
            if function == "rope_folded" {
                let blocks = ops::folded_blocks(&tile_grid(&plan.dims, &plan.cfg));
                let op = kernel::rope_folded(tiles.map(LINEAR_MAP_3D, blocks), &q, &c, &sn).generics(spec.generics).compile_options(spec.options);
                unsafe { op.async_on(&rt.stream) }.map(|_| ())
            } else {
                let op = kernel::rope(tiles, &q, &c, &sn).generics(spec.generics).compile_options(spec.options);
                unsafe { op.async_on(&rt.stream) }.map(|_| ())
            }
        }
    };
    queued.map_err(|e| format!("{e}"))
}

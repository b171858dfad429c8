//! Tile sizes: one small table per op and dtype, plus the space a sweep may try.
//!
//! cuTile-rs kernels take their tile shape as const generics; the JIT compiles one specialisation per
//! distinct set of generics (and caches it), so a configuration here is just a set of numbers, chosen at
//! run time. Every size is a power of two (Tile IR tiles are), and row kernels never use a column tile
//! wider than the row needs. The hint keys OCC and W become cuTile-rs `CompileOptions`; they are part
//! of the JIT's cache key (`TileFunctionKey::compile_options`, and the on-disk key hashes the bytecode,
//! which carries them as entry optimisation hints), so a sweep over them compiles each variant.

use cutile::tile_kernel::CompileOptions;

use crate::args::{ArgError, DType};

/// A configuration: tile-parameter name -> size.
pub type Config = Vec<(&'static str, i64)>;

/// Compiler-hint keys every op takes after its tile sizes (0 = no hint, the compiler chooses):
/// * OCC: target CTAs per SM (`CompileOptions::occupancy`). tileiras then caps registers at about
///   65536 / (threads x OCC); without it, row kernels got 255 registers and one CTA per SM.
/// * W: worker warps per CTA (`CompileOptions::num_worker_warps_per_cta`). For mma kernels W=8 gives
///   a producer warp plus two consumer warpgroups (384 threads), each issuing 64 x BN wgmma.
pub const HINTS: [&str; 2] = ["OCC", "W"];

/// Switch keys (0 or 1) among an op's tile parameters:
/// * OUT_ROWS (transpose): 1 runs x's row tiles fastest, so consecutive blocks write along a row band of out
///   (the mapped kernel, ops/transpose.rs); 0 the partition's own order, out's row tiles fastest.
/// * TMA (row ops): 1 (default) = the `*_row` kernels as they are, whose loads and stores tileiras lowers
///   to TMA with a producer warp and a 128-thread consumer warpgroup (bench/GAPS.md, "Row ops: the shape
///   of the `*_row` kernels"); 0 = the `*_row_notma` kernels, which load and store through unpadded
///   in-bounds views with TMA disallowed (plain LDG / STG, every thread loads). 0 applies only where the
///   tiles are exact (`row_without_tma`); elsewhere it is ignored. Why: in cuTile Python the same change
///   (`allow_tma=False`, unchecked loads) took softmax 4096 x 16384 bf16 from 111 to 71.7 us on the H200.
/// * QO (attention, the per-head prefill kernel): 0 = out's (B*H, S/BM) tile grid as launched, head fastest,
///   so one wave of CTAs reads one or two query blocks of every head (B4 H32 S4096 D128: 128 heads' K/V,
///   256 MiB, far over the 50 MB L2); 1 = `attention_by_query`: query blocks fastest (a wave shares a few
///   heads' K/V), causal ones last block first (the longest rows start first), for exact query blocks (BM | S).
/// * AX (silu_and_mul): 1 = exp2 with flushed subnormals and the approximate division (ops/silu_and_mul.rs);
///   0 = exp and the IEEE division.
pub const FLAGS: [&str; 4] = ["OUT_ROWS", "TMA", "QO", "AX"];

/// Tile-order keys, 0 or a power of two:
/// * GM (matmul, bmm): 0 = out's tile grid as launched: bmm's (Bt, M/BM, N/BN) with the batch entry fastest,
///   so one wave of 132 CTAs spans up to 132 entries' A panels (Bt 4 x 4096^3: ~128 MiB, far over the 50 MB
///   L2; bench/GAPS.md, cutile_rs bmm), matmul's (M/BM, N/BN) with the row tiles fastest, so at 8192^3
///   (64 tile-rows of 128) a wave reads all of A (128 MiB) for two column panels of B; GM = g walks one
///   entry's tiles at a time in column-major groups of g tile-rows (`bmm_grouped`, matmul as one entry; exact
///   tiles: BM | M, BN | N), the order cuTile Python's and Triton's GEMMs use. H200, bf16 bmm (2026-12-07):
///   GM 16 with BK 32 took Bt16 2048^3 from 490 to 384 us and Bt4 4096^3 from 876 to 752.
pub const ORDER_KEYS: [&str; 1] = ["GM"];

/// The tunable parameter names of an op, in the order kernels take them, then the hint keys.
pub fn param_names(op: &str) -> &'static [&'static str] {
    match op {
        "vector_add" => &["BLOCK", "OCC", "W"],
        "transpose" => &["BM", "BN", "OUT_ROWS", "OCC", "W"],
        op if is_row_op(op) => &["BR", "BN", "TMA", "OCC", "W"],
        "silu_and_mul" => &["BR", "BH", "AX", "OCC", "W"],
        "rope" => &["BS", "OCC", "W"],
        "matmul" => &["BM", "BN", "BK", "GM", "OCC", "W"],
        "bmm" => &["BM", "BN", "BK", "GM", "OCC", "W"],
        "attention" => &["BM", "BN", "SPLIT_MIN_BLOCKS", "QO", "OCC", "W"],
        _ => &[],
    }
}

/// The "rows" family (OpSpec.family, from the generated table): kernels that walk rows of (M, N) with a
/// BR x BN tile share one table (defaults, sweep space).
pub fn is_row_op(op: &str) -> bool {
    crate::generated::op(op).is_some_and(|d| d.family == "rows")
}

pub fn next_pow2(x: i64) -> i64 {
    let mut p = 1;
    while p < x {
        p *= 2;
    }
    p
}

/// Widest row tile a row op keeps in registers (one pass over the row): 16384 fp32 values over 256
/// threads is 64 registers each, which fits the 128-register budget of OCC=2. Wider rows are streamed
/// in ROW_CHUNK-column chunks.
pub const ROW_ONE_PASS_MAX: i64 = 16384;
pub const ROW_CHUNK: i64 = 4096;

/// Occupancy for a row tile of `elems` values: 4 CTAs/SM (64 registers) up to 8192 values, else 2
/// (128 registers). Checked with cuobjdump: LOCAL (spill) stays 0 for the bench shapes.
pub fn row_occupancy(elems: i64) -> i64 {
    if elems <= 8192 { 4 } else { 2 }
}

/// Rows per block of a row op: 2 for fp16/bf16 rows of N <= ROW_TWO_ROWS_MAX (one tile of
/// next_pow2(N) <= 4096 columns) when there are at least 2 rows, else 1. Why: the register budget of OCC=4
/// (64 per thread at 256 threads) caps a row kernel at 4 CTAs per SM, so one row per block keeps only 4
/// rows (32 KB of x at N 4096) in flight per SM, against 8 for cuTile Python (2 rows per block) and Triton
/// (bench/GAPS.md, cutile_rs row ops). Two rows compile to the same 256 threads and 64 registers without
/// spills, 4 CTAs per SM, for every row op and both 16-bit types (tests/sass.rs
/// `two_rows_per_block_at_n4096`, BN 8, 1024 and 4096). fp32 rows are twice the bytes and stay at one row.
pub fn row_block_rows(dtype: DType, m: Option<i64>, n: Option<i64>) -> i64 {
    match (m, n) {
        (Some(m), Some(n)) if dtype != DType::F32 && m >= 2 && n <= ROW_TWO_ROWS_MAX => 2,
        _ => 1,
    }
}

/// Widest fp16/bf16 row that `row_block_rows` gives two rows per block.
pub const ROW_TWO_ROWS_MAX: i64 = 4096;
/// matmul rows up to which the decode tiles are the default (a batch of decode tokens): the native copy
/// of python/tilerosetta/specs/base.py DECODE_TILE_MAX_M (test_cutile_rs_adapter checks they agree).
pub const DECODE_MAX_M: i64 = 16;

/// Columns of a decode tile for an N-column weight: the widest of 128, 64, 32 that still gives at least 96
/// blocks (N 4096 -> 32, 14336 -> 128). The native copy of python/tilerosetta/specs/base.py decode_panel
/// (test_cutile_rs_adapter checks they agree), where the H200 sweeps behind it are cited.
pub fn decode_panel(n: i64) -> i64 {
    [128, 64, 32].into_iter().find(|bn| (n + bn - 1) / bn >= 96).unwrap_or(32)
}

/// The configuration an ordinary call uses. `dims` are the op's symbolic dims (M, N, H, D, ...).
pub fn default_config(op: &str, dtype: DType, dims: &[(&str, i64)]) -> Config {
    let dim = |n: &str| dims.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    let half = dtype != DType::F32;
    let cfg: Config = match op {
        "vector_add" => vec![("BLOCK", 1024)],
        // 16-bit: the H200 sweep's winner (bench/results/transpose/: 128 x 128, out's column tiles fastest,
        // 68.9 / 261.6 us at 8192^2 / 16384^2 against 71.2 / 286.0 for 64 x 64 in the partition's order).
        "transpose" if half => vec![("BM", 128), ("BN", 128), ("OUT_ROWS", 1)],
        "transpose" => vec![("BM", 64), ("BN", 64), ("OUT_ROWS", 0)],
        // The whole row in one tile when it fits (one pass over x, as cuTile Python's kernels);
        // otherwise chunks. A tile wider than the row would only load padding.
        op if is_row_op(op) => {
            let bn = match dim("N") {
                Some(n) if n <= ROW_ONE_PASS_MAX => next_pow2(n),
                Some(_) => ROW_CHUNK,
                None => ROW_CHUNK,
            };
            let br = row_block_rows(dtype, dim("M"), dim("N"));
            vec![("BR", br), ("BN", bn), ("TMA", 1), ("OCC", row_occupancy(br * bn))]
        }
        "silu_and_mul" => {
            let bh = dim("H").map_or(1024, |h| next_pow2(h).min(1024));
            vec![("BR", 1), ("BH", bh), ("AX", 0)]
        }
        "rope" => vec![("BS", 16)],
        // Decode (matmul, M <= DECODE_MAX_M): the weight is streamed once, so narrow tiles that give about
        // one block per SM (N 4096 / 32 = 128) and a deep K step; the 128x256 tile gave 16 blocks. The
        // H200 sweep at M=1 preferred 16x64 BK 128 (N 4096) and 16x128 BK 256 (N 14336): tuned entries.
        "matmul" if half && dim("M").is_some_and(|m| m <= DECODE_MAX_M) => {
            vec![("BM", 16), ("BN", decode_panel(dim("N").unwrap_or(4096))), ("BK", 256)]
        }
        // fp16/bf16: 128x256 with 8 worker warps = producer + 2 consumer warpgroups, 64x256x16 wgmma
        // (the resource profile of cuTile Python's tuned matmul). fp32 operands are twice the bytes
        // per tile: 128x128 with a shorter K step, compiler-chosen warps.
        "matmul" | "bmm" => {
            if half {
                vec![("BM", 128), ("BN", 256), ("BK", 64), ("W", 8)]
            } else {
                vec![("BM", 128), ("BN", 128), ("BK", 32)]
            }
        }
        // BM64 BN128 OCC2: 128 registers, 2 CTAs/SM, 64x128x16 wgmma for both QK^T and PV. SPLIT_MIN_BLOCKS:
        // split-KV's least key tiles per chunk (ops::attention::split_plan; host-side, compiles nothing).
        "attention" => vec![("BM", 64), ("BN", 128), ("SPLIT_MIN_BLOCKS", crate::ops::attention::MIN_SPLIT_BLOCKS), ("OCC", 2)],
        _ => vec![],
    };
    // In param_names order, hints not set above = 0 (none).
    param_names(op).iter().map(|&k| (k, cfg.iter().find(|(n, _)| *n == k).map_or(0, |(_, v)| *v))).collect()
}

/// Configurations a sweep may try for op/dtype.
pub fn config_space(op: &str, dtype: DType) -> Vec<Config> {
    let half = dtype != DType::F32;
    let mut out: Vec<Config> = vec![];
    match op {
        "vector_add" => {
            for b in [256, 512, 1024, 2048, 4096] {
                out.push(vec![("BLOCK", b), ("OCC", 0), ("W", 0)]);
            }
        }
        "transpose" => {
            for (m, n) in [(32, 32), (64, 64), (64, 128), (128, 64), (128, 128)] {
                for rows in [0, 1] {
                    out.push(vec![("BM", m), ("BN", n), ("OUT_ROWS", rows), ("OCC", 0), ("W", 0)]);
                }
            }
        }
        op if is_row_op(op) => {
            for bn in [1024, 2048, 4096, 8192, 16384] {
                for br in [1, 2, 4] {
                    if br * bn > ROW_ONE_PASS_MAX {
                        continue;
                    }
                    for occ in [0, 2, 4] {
                        out.push(vec![("BR", br), ("BN", bn), ("TMA", 1), ("OCC", occ), ("W", 0)]);
                    }
                }
            }
            // Two compute warpgroups for the widest one-pass row (half the instructions per thread, 80
            // registers at OCC 2 for softmax, no spills: bench/GAPS.md, cutile_rs softmax), and for the
            // 8192-element tiles of the norms' bench rows (one warpgroup computes at W 0: gap cause 16).
            out.push(vec![("BR", 1), ("BN", ROW_ONE_PASS_MAX), ("TMA", 1), ("OCC", 2), ("W", 8)]);
            for (br, bn) in [(1, 8192), (2, 4096), (2, 8192)] {
                out.push(vec![("BR", br), ("BN", bn), ("TMA", 1), ("OCC", 2), ("W", 8)]);
            }
            // Without TMA (the `*_row_notma` kernels, see FLAGS): the one-pass tiles of the bench rows
            // (N 4096, 8192, 16384), taking effect only where BN == N and BR divides M. These compile to
            // 128 threads; over 8192 values per tile OCC 4 (128 registers) spills (STL in the SASS), so
            // those tiles try OCC 0 and 2 only; a 4096-value tile also tries OCC 8 (64 registers: 8 rows
            // per SM, as CUDA Tile C++'s 1 x 4096 OCC 8 without spills).
            for (br, bn) in [(1, 4096), (2, 4096), (1, 8192), (2, 8192), (1, ROW_ONE_PASS_MAX)] {
                for occ in [0, 2, 4, 8] {
                    if (occ == 4 && br * bn > 8192) || (occ == 8 && br * bn > 4096) {
                        continue;
                    }
                    out.push(vec![("BR", br), ("BN", bn), ("TMA", 0), ("OCC", occ), ("W", 0)]);
                }
            }
            // And with 8 worker warps (256 threads): at W 0 a 16384 row per 128 threads takes 254 registers, 2
            // CTAs of 4 warps per SM, each warp's exp and reductions over 128 values in series; the same body in
            // CUDA Tile C++ at W 8 OCC 3 holds it in 80 registers, no spills, 3 CTAs of 8 warps (sm_90 SASS,
            // cpp/include/tr_kernels.h).
            for (br, bn, occ) in [(1, ROW_ONE_PASS_MAX, 3), (1, 8192, 3), (2, 4096, 4)] {
                out.push(vec![("BR", br), ("BN", bn), ("TMA", 0), ("OCC", occ), ("W", 8)]);
            }
        }
        "silu_and_mul" => {
            for ax in [0, 1] {
                for bh in [256, 512, 1024, 2048] {
                    for br in [1, 2, 4] {
                        for occ in [0, 4] {
                            out.push(vec![("BR", br), ("BH", bh), ("AX", ax), ("OCC", occ), ("W", 0)]);
                        }
                    }
                }
            }
        }
        "rope" => {
            for bs in [4, 8, 16, 32, 64] {
                for occ in [0, 4, 8] {
                    out.push(vec![("BS", bs), ("OCC", occ), ("W", 0)]);
                }
            }
        }
        "matmul" | "bmm" => {
            let bks: &[i64] = if half { &[32, 64] } else { &[16, 32] };
            // Every config names GM: 0 (out's launch order) for every tile, and 8 / 16 (grouped, `sweep
            // --where GM=16`) for the 8-warp tiles of 128 x 256 and up.
            let mut push = |m: i64, n: i64, k: i64, w: i64| {
                let gms: &[i64] = if w == 8 && m * n >= 128 * 256 { &[0, 8, 16] } else { &[0] };
                for &gm in gms {
                    out.push(vec![("BM", m), ("BN", n), ("BK", k), ("GM", gm), ("OCC", 0), ("W", w)]);
                }
            };
            for (m, n) in [(64, 64), (128, 64), (64, 128), (128, 128), (128, 256), (256, 128)] {
                for &k in bks {
                    push(m, n, k, 0);
                    // Two consumer warpgroups need at least 2 x 64 rows of output.
                    if m >= 128 && m * n >= 128 * 128 {
                        push(m, n, k, 8);
                    }
                }
            }
            // The decode tiles (`sweep --where BM=16`): narrow N, deep K.
            if half && op == "matmul" {
                for n in [32, 64, 128] {
                    for k in [128, 256, 512] {
                        if n * k <= 32768 {
                            out.push(vec![("BM", 16), ("BN", n), ("BK", k), ("GM", 0), ("OCC", 0), ("W", 0)]);
                        }
                    }
                }
            }
        }
        "attention" => {
            let sp = ("SPLIT_MIN_BLOCKS", crate::ops::attention::MIN_SPLIT_BLOCKS);
            // Each prefill tile in out's launch order (QO 0) and query blocks first (QO 1, `sweep --where QO=1`).
            for qo in [0, 1] {
                for (m, n) in [(64, 32), (64, 64), (64, 128), (128, 32), (128, 64), (128, 128)] {
                    for occ in [0, 1, 2] {
                        out.push(vec![("BM", m), ("BN", n), sp, ("QO", qo), ("OCC", occ), ("W", 0)]);
                    }
                }
            }
            // Decode (`sweep --where BM=16`): the packed 16-row tile (a G=4 group), the key tile and how
            // finely split-KV cuts the keys when the row tiles are fewer than the SMs; OCC 2 for two CTAs
            // per SM, each with its own K/V ring (without a hint the 16 x 128 tile takes 255 registers).
            for n in [64, 128] {
                for s in [1, 2, 4] {
                    for occ in [0, 2] {
                        out.push(vec![("BM", 16), ("BN", n), ("SPLIT_MIN_BLOCKS", s), ("QO", 0), ("OCC", occ), ("W", 0)]);
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// Largest tile extent accepted (row ops keep up to ROW_ONE_PASS_MAX columns in one tile).
pub const MAX_TILE: i64 = 1 << 16;
/// Largest hint value accepted (occupancy and worker warps are small counts).
pub const MAX_HINT: i64 = 32;

/// The configuration for one call: the default, overridden by the names the caller gives. Unknown
/// names, tile sizes that are not powers of two in [1, MAX_TILE] and hints that are neither 0 (none)
/// nor in [1, MAX_HINT] (W: a power of two there) are refused. OCC need not be a power of two: tileiras
/// cuts the register budget for any count (3 CTAs of 256 threads: 80 registers).
pub fn resolve(op: &str, dtype: DType, dims: &[(&str, i64)], given: &[(String, i64)]) -> Result<Config, ArgError> {
    let mut cfg = default_config(op, dtype, dims);
    for (name, value) in given {
        let Some(slot) = cfg.iter_mut().find(|(k, _)| k == name) else {
            return Err(ArgError::new(
                op,
                "config",
                format!("unknown tile parameter '{name}': expected one of {:?}", param_names(op)),
            ));
        };
        let pow2 = *value >= 1 && value & (value - 1) == 0;
        if FLAGS.contains(&slot.0) {
            if !(*value == 0 || *value == 1) {
                return Err(ArgError::new(op, "config", format!("switch {name}={value} must be 0 or 1")));
            }
        } else if ORDER_KEYS.contains(&slot.0) {
            if !(*value == 0 || (pow2 && *value <= MAX_TILE)) {
                return Err(ArgError::new(op, "config", format!("tile order {name}={value} must be 0 or a power of two in [1, {MAX_TILE}]")));
            }
        } else if HINTS.contains(&slot.0) {
            let any = slot.0 == "OCC";
            if !(*value == 0 || ((1..=MAX_HINT).contains(value) && (any || pow2))) {
                let what = if any { "an int" } else { "a power of two" };
                let msg = format!("hint {name}={value} must be 0 (none) or {what} in [1, {MAX_HINT}]");
                return Err(ArgError::new(op, "config", msg));
            }
        } else if !(pow2 && *value <= MAX_TILE) {
            return Err(ArgError::new(op, "config", format!("tile size {name}={value} must be a power of two in [1, {MAX_TILE}]")));
        }
        slot.1 = *value;
    }
    Ok(cfg)
}

/// Whether a row op runs its `*_row_notma` kernel: TMA=0 and tiles that are exact, i.e. one tile is the
/// whole row (BN == N) and BR divides M, so every load and store is in bounds and may say so (Tile IR
/// `inbounds`). Any other shape keeps the `*_row` / `*_chunks` kernels, whatever TMA says.
pub fn row_without_tma(cfg: &Config, m: i32, n: i32) -> bool {
    get(cfg, "TMA") == 0 && get(cfg, "BN") == n && m % get(cfg, "BR") == 0
}

/// Looks up a resolved tile size as i32 (kernels index with i32).
pub fn get(cfg: &Config, name: &str) -> i32 {
    cfg.iter().find(|(k, _)| *k == name).map(|(_, v)| *v as i32).unwrap_or_else(|| panic!("tile parameter {name} missing"))
}

/// The cuTile-rs compile options of a configuration's hint keys (absent or 0 = left to the compiler).
pub fn compile_options(cfg: &Config) -> CompileOptions {
    let hint = |k: &str| cfg.iter().find(|(n, _)| *n == k).map(|(_, v)| *v as i32).filter(|&v| v > 0);
    let mut o = CompileOptions::default();
    if let Some(occ) = hint("OCC") {
        o = o.occupancy(occ);
    }
    if let Some(w) = hint("W") {
        o = o.num_worker_warps_per_cta(w);
    }
    o
}

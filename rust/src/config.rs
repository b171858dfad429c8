//! Tile sizes: one small table per op and dtype, plus the space a sweep may try.
//!
//! cuTile-rs kernels take their tile shape as const generics; the JIT compiles one specialisation per
//! distinct set of generics (and caches it), so a configuration here is just a set of numbers, chosen at
//! run time. Every size is a power of two (Tile IR tiles are), and row kernels never use a column tile
//! wider than the row needs.

use crate::args::{ArgError, DType};

/// A configuration: tile-parameter name -> size.
pub type Config = Vec<(&'static str, i64)>;

/// The tunable parameter names of an op, in the order kernels take them.
pub fn param_names(op: &str) -> &'static [&'static str] {
    match op {
        "vector_add" => &["BLOCK"],
        "transpose" => &["BM", "BN"],
        "softmax" | "rms_norm" | "layer_norm" => &["BR", "BN"],
        "silu_and_mul" => &["BR", "BH"],
        "rope" => &["BS"],
        "matmul" | "bmm" => &["BM", "BN", "BK"],
        "attention" => &["BM", "BN"],
        _ => &[],
    }
}

pub fn next_pow2(x: i64) -> i64 {
    let mut p = 1;
    while p < x {
        p *= 2;
    }
    p
}

/// The configuration an ordinary call uses. `dims` are the op's symbolic dims (M, N, H, D, ...).
pub fn default_config(op: &str, dtype: DType, dims: &[(&str, i64)]) -> Config {
    let dim = |n: &str| dims.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    let half = dtype != DType::F32;
    match op {
        "vector_add" => vec![("BLOCK", 1024)],
        "transpose" => vec![("BM", 64), ("BN", 64)],
        // Rows are streamed in chunks of BN columns; a chunk wider than the row would only load padding.
        "softmax" | "rms_norm" | "layer_norm" => {
            let cap = if half { 2048 } else { 1024 };
            let bn = dim("N").map_or(cap, |n| next_pow2(n).min(cap));
            vec![("BR", 1), ("BN", bn)]
        }
        "silu_and_mul" => {
            let bh = dim("H").map_or(1024, |h| next_pow2(h).min(1024));
            vec![("BR", 1), ("BH", bh)]
        }
        "rope" => vec![("BS", 16)],
        // fp32 operands are twice the bytes per tile: keep the K step shorter.
        "matmul" | "bmm" => {
            if half {
                vec![("BM", 128), ("BN", 128), ("BK", 64)]
            } else {
                vec![("BM", 128), ("BN", 128), ("BK", 32)]
            }
        }
        "attention" => {
            let d = dim("D").unwrap_or(128);
            if d > 64 { vec![("BM", 128), ("BN", 64)] } else { vec![("BM", 128), ("BN", 128)] }
        }
        _ => vec![],
    }
}

/// Configurations a sweep may try for op/dtype.
pub fn config_space(op: &str, dtype: DType) -> Vec<Config> {
    let half = dtype != DType::F32;
    let mut out = vec![];
    match op {
        "vector_add" => {
            for b in [256, 512, 1024, 2048, 4096] {
                out.push(vec![("BLOCK", b)]);
            }
        }
        "transpose" => {
            for (m, n) in [(32, 32), (64, 64), (64, 128), (128, 64), (128, 128)] {
                out.push(vec![("BM", m), ("BN", n)]);
            }
        }
        "softmax" | "rms_norm" | "layer_norm" => {
            for bn in [512, 1024, 2048, 4096] {
                for br in [1, 2, 4] {
                    out.push(vec![("BR", br), ("BN", bn)]);
                }
            }
        }
        "silu_and_mul" => {
            for bh in [256, 512, 1024, 2048] {
                for br in [1, 2, 4] {
                    out.push(vec![("BR", br), ("BH", bh)]);
                }
            }
        }
        "rope" => {
            for bs in [4, 8, 16, 32, 64] {
                out.push(vec![("BS", bs)]);
            }
        }
        "matmul" | "bmm" => {
            let bks: &[i64] = if half { &[32, 64] } else { &[16, 32] };
            for (m, n) in [(64, 64), (128, 64), (64, 128), (128, 128), (128, 256), (256, 128)] {
                for &k in bks {
                    out.push(vec![("BM", m), ("BN", n), ("BK", k)]);
                }
            }
        }
        "attention" => {
            for (m, n) in [(64, 32), (64, 64), (128, 32), (128, 64), (128, 128)] {
                out.push(vec![("BM", m), ("BN", n)]);
            }
        }
        _ => {}
    }
    out
}

/// The configuration for one call: the default, overridden by the names the caller gives. Unknown
/// names and sizes that are not powers of two in [1, 4096] are refused.
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
        if *value < 1 || *value > 4096 || value & (value - 1) != 0 {
            return Err(ArgError::new(op, "config", format!("tile size {name}={value} must be a power of two in [1, 4096]")));
        }
        slot.1 = *value;
    }
    Ok(cfg)
}

/// Looks up a resolved tile size as i32 (kernels index with i32).
pub fn get(cfg: &Config, name: &str) -> i32 {
    cfg.iter().find(|(k, _)| *k == name).map(|(_, v)| *v as i32).unwrap_or_else(|| panic!("tile parameter {name} missing"))
}

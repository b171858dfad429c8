//! Every kernel, every dtype, default and edge configurations: Tile IR generation (no GPU) and
//! assembly to an sm_90 cubin with the pinned tileiras (no GPU either). What cannot run here is the
//! launch itself; that is the Python conformance suite's job on the H200.

use tilerosetta_cutile_rs::args::DType;
use tilerosetta_cutile_rs::compile::{assemble, bytecode};
use tilerosetta_cutile_rs::config;
use tilerosetta_cutile_rs::ops::{self, OPS};

const ARCH: &str = "sm_90";

/// The cuTile-rs compiler recurses deeply; its own tests use 8 MB stacks.
fn with_stack<F: FnOnce() + Send + 'static>(f: F) {
    std::thread::Builder::new().stack_size(16 << 20).spawn(f).unwrap().join().unwrap();
}

/// Representative dims per op (the tables depend on some: row width, head dim).
fn dims_for(op: &str) -> Vec<(&'static str, i64)> {
    match op {
        op if config::is_row_op(op) => vec![("M", 17), ("N", 4099)],
        "silu_and_mul" => vec![("M", 17), ("H", 129)],
        "rope" => vec![("B", 1), ("H", 2), ("S", 17), ("D", 64)],
        "attention" => vec![("B", 1), ("H", 2), ("S", 129), ("D", 128)],
        "bmm" => vec![("Bt", 3), ("M", 127), ("N", 129), ("K", 131)],
        "vector_add" => vec![("N", 1000)],
        "transpose" => vec![("M", 127), ("N", 129)],
        _ => vec![("M", 127), ("N", 129), ("K", 131)],
    }
}

fn dtypes_for(op: &str) -> Vec<DType> {
    if op == "attention" { vec![DType::F16, DType::BF16] } else { vec![DType::F32, DType::F16, DType::BF16] }
}

fn dims_i32(op: &str) -> Vec<i32> {
    dims_for(op).iter().map(|(_, v)| *v as i32).collect()
}

fn compile_all(op: &'static str, cfg_of: impl Fn(DType) -> config::Config + Send + 'static) {
    with_stack(move || {
        let mut failures = vec![];
        let mut count = 0;
        for dtype in dtypes_for(op) {
            let cfg = cfg_of(dtype);
            let specs = ops::specs(op, dtype, &cfg, &dims_i32(op)).unwrap();
            assert!(!specs.is_empty(), "{op}: no kernel specs");
            for spec in specs {
                let tag = format!("{op}_{}_{}_{}", dtype.name(), spec.function, count);
                count += 1;
                match bytecode(&spec, dtype, ARCH).and_then(|bc| {
                    assert_eq!(&bc[..8], b"\x7fTileIR\x00", "{tag}: not Tile IR bytecode");
                    assemble(&bc, ARCH, &tag)
                }) {
                    Ok(size) => assert!(size > 0, "{tag}: empty cubin"),
                    Err(e) => failures.push(e),
                }
            }
        }
        assert!(failures.is_empty(), "{op}: {} of {count} specialisations failed:\n{}", failures.len(), failures.join("\n"));
    });
}

fn default_cfg(op: &'static str) -> impl Fn(DType) -> config::Config {
    move |dtype| config::default_config(op, dtype, &dims_for(op))
}

#[test]
fn every_op_has_specs() {
    for op in OPS {
        for dtype in dtypes_for(op) {
            let cfg = config::default_config(op, dtype, &dims_for(op));
            assert!(!ops::specs(op, dtype, &cfg, &dims_i32(op)).unwrap().is_empty(), "{op} {dtype:?}");
        }
    }
}

/// One test per op (cargo runs them in parallel), named `<op>::compiles_for_sm90`: the ops of the
/// generated `ops!` list (src/ops/generated_ops.rs, the same list ops/mod.rs dispatches), and attention.
macro_rules! compile_test {
    ($op:ident) => {
        mod $op {
            #[test]
            fn compiles_for_sm90() {
                let op = stringify!($op);
                assert!(super::OPS.contains(&op), "{op} is not in ops::OPS");
                super::compile_all(op, super::default_cfg(op));
            }
        }
    };
}

macro_rules! ops {
    ($($op:ident),* $(,)?) => {
        $(compile_test!($op);)*
    };
}

include!("../src/ops/generated_ops.rs");
compile_test!(attention);

/// The smallest and largest entries of each op's sweep space compile too (a sweep must not find
/// compile failures only on the GPU).
#[test]
fn sweep_extremes_compile_for_sm90() {
    for op in OPS {
        for dtype in dtypes_for(op) {
            let space = config::config_space(op, dtype);
            assert!(!space.is_empty(), "{op}: empty config space");
            for cfg in [space.first().unwrap().clone(), space.last().unwrap().clone()] {
                let op: &'static str = op;
                compile_all_one(op, dtype, cfg);
            }
        }
    }
}

fn compile_all_one(op: &'static str, dtype: DType, cfg: config::Config) {
    with_stack(move || {
        for spec in ops::specs(op, dtype, &cfg, &dims_i32(op)).unwrap() {
            let tag = format!("{op}_{}_{}_sweep", dtype.name(), spec.function);
            let bc = bytecode(&spec, dtype, ARCH).unwrap_or_else(|e| panic!("{tag} {cfg:?}: {e}"));
            assemble(&bc, ARCH, &tag).unwrap_or_else(|e| panic!("{tag} {cfg:?}: {e}"));
        }
    });
}

/// The folded kernels (a tile grid past 65535 on grid y, issue 16) are only chosen for such shapes:
/// compile them for the shapes that pick them.
#[test]
fn folded_grids_compile_for_sm90() {
    for (op, dims) in [
        ("transpose", vec![("M", 65536 * 128 + 3), ("N", 2)]),
        ("silu_and_mul", vec![("M", 1), ("H", 65536 * 1024 + 3)]),
        ("rope", vec![("B", 1), ("H", 1), ("S", 65536 * 16 + 3), ("D", 64)]),
        ("matmul", vec![("M", 2), ("N", 65536 * 256 + 3), ("K", 3)]),
        ("bmm", vec![("Bt", 2), ("M", 65536 * 128 + 3), ("N", 2), ("K", 3)]),
        ("attention", vec![("B", 1), ("H", 1), ("S", 65536 * 128 + 3), ("D", 64)]),
    ] {
        with_stack(move || {
            for dtype in dtypes_for(op) {
                let cfg = config::default_config(op, dtype, &dims);
                let d: Vec<i32> = dims.iter().map(|(_, v)| *v as i32).collect();
                for spec in ops::specs(op, dtype, &cfg, &d).unwrap() {
                    assert!(spec.function.ends_with("_folded"), "{op} {dims:?}: {} is not the folded kernel", spec.function);
                    let tag = format!("{op}_{}_{}_folded", dtype.name(), spec.function);
                    let bc = bytecode(&spec, dtype, ARCH).unwrap_or_else(|e| panic!("{tag}: {e}"));
                    assemble(&bc, ARCH, &tag).unwrap_or_else(|e| panic!("{tag}: {e}"));
                }
            }
        });
    }
}

/// Kernels the representative dims above do not pick: rope's and silu_and_mul's unchecked-load kernels (tiles
/// covering the shape exactly; rope at the smallest head dim too) and the row ops' two-rows-per-block default
/// (16-bit rows of N <= 4096), in every dtype the op takes.
#[test]
fn exact_and_two_row_variants_compile_for_sm90() {
    for (op, dims, function) in [
        ("rope", vec![("B", 1), ("H", 2), ("S", 32), ("D", 64)], "rope_halves_exact"),
        ("rope", vec![("B", 2), ("H", 1), ("S", 16), ("D", 2)], "rope_halves_exact"),
        ("rope", vec![("B", 1), ("H", 2), ("S", 17), ("D", 6)], "rope"),
        ("silu_and_mul", vec![("M", 3), ("H", 512)], "silu_and_mul_exact"),
        ("softmax", vec![("M", 17), ("N", 100)], "softmax_row"),
        ("rms_norm", vec![("M", 17), ("N", 4096)], "rms_norm_row"),
        ("layer_norm", vec![("M", 17), ("N", 1000)], "layer_norm_row"),
        ("add_rms_norm", vec![("M", 17), ("N", 7)], "add_rms_norm_row"),
    ] {
        with_stack(move || {
            for dtype in dtypes_for(op) {
                let cfg = config::default_config(op, dtype, &dims);
                let d: Vec<i32> = dims.iter().map(|(_, v)| *v as i32).collect();
                for spec in ops::specs(op, dtype, &cfg, &d).unwrap() {
                    assert_eq!(spec.function, function, "{op} {dims:?} {cfg:?}");
                    let tag = format!("{op}_{}_{}_variant", dtype.name(), spec.function);
                    let bc = bytecode(&spec, dtype, ARCH).unwrap_or_else(|e| panic!("{tag} {cfg:?}: {e}"));
                    assemble(&bc, ARCH, &tag).unwrap_or_else(|e| panic!("{tag} {cfg:?}: {e}"));
                }
            }
        });
    }
}

/// The row ops' TMA=0 kernels (`*_row_notma`, chosen only for exact tiles: BN == N, BR | M): in every dtype
/// at the default tiles of two exact shapes, and every TMA=0 entry of the bf16 sweep space at the exact
/// shape it targets (N = BN, M = 2 x BR), so a sweep finds no compile failure only on the GPU.
#[test]
fn row_kernels_without_tma_compile_for_sm90() {
    let row_ops: Vec<&'static str> = OPS.iter().copied().filter(|op| config::is_row_op(op)).collect();
    assert!(row_ops.len() >= 4, "{row_ops:?}");
    for op in row_ops {
        let mut cases: Vec<(DType, Vec<i32>, config::Config)> = vec![];
        for dtype in dtypes_for(op) {
            for (m, n) in [(34, 8), (6, 4096)] {
                let named = [("M", m as i64), ("N", n as i64)];
                let cfg = config::resolve(op, dtype, &named, &[("TMA".to_string(), 0)]).unwrap();
                cases.push((dtype, vec![m, n], cfg));
            }
        }
        for cfg in config::config_space(op, DType::BF16).into_iter().filter(|c| config::get(c, "TMA") == 0) {
            let (br, bn) = (config::get(&cfg, "BR"), config::get(&cfg, "BN"));
            cases.push((DType::BF16, vec![2 * br, bn], cfg));
        }
        with_stack(move || {
            let mut failures = vec![];
            for (dtype, dims, cfg) in &cases {
                for spec in ops::specs(op, *dtype, cfg, dims).unwrap() {
                    assert_eq!(spec.function, format!("{op}_row_notma"), "{op} {dims:?} {cfg:?}");
                    let tag = format!("{op}_{}_{}_{}x{}_{}", dtype.name(), spec.function, dims[0], dims[1], config::get(cfg, "OCC"));
                    if let Err(e) = bytecode(&spec, *dtype, ARCH).and_then(|bc| assemble(&bc, ARCH, &tag)) {
                        failures.push(format!("{cfg:?}: {e}"));
                    }
                }
            }
            assert!(failures.is_empty(), "{op}: {} of {} TMA=0 specialisations failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
        });
    }
}

/// The assembly step really checks its input: garbage is refused with tileiras' message.
#[test]
fn tileiras_rejects_garbage() {
    let err = assemble(b"not tile ir bytecode", ARCH, "garbage").expect_err("tileiras accepted garbage");
    assert!(err.contains("tileiras"), "{err}");
}

/// The decode schedule's kernels (ops/attention.rs module doc), at the shapes whose plan picks them
/// (H200_SM_COUNT SMs, the default tiles): the split attention kernel and its combine for D 64 and 128,
/// the packed rows without a split, and the per-head split; causal and not, both 16-bit dtypes. The
/// expected kernel list is asserted, so a plan change that stops picking a kernel fails here too.
#[test]
fn decode_kernels_compile_for_sm90() {
    use tilerosetta_cutile_rs::ops::attention;
    // (B, H, S, D, Hkv, Sk), causal, scale > 0, the kernels the plan must pick.
    let cases: Vec<([i32; 6], bool, bool, Vec<&'static str>)> = vec![
        ([1, 32, 1, 128, 8, 4096], true, true, vec!["attention_split", "attention_combine"]),
        ([1, 32, 1, 64, 8, 4096], true, true, vec!["attention_split", "attention_combine"]),
        ([1, 32, 1, 128, 8, 4099], false, true, vec!["attention_split", "attention_combine"]),
        ([1, 2, 300, 128, 2, 1200], true, true, vec!["attention_split", "attention_combine"]),
        ([1, 4, 40, 64, 1, 1500], true, false, vec!["attention_split", "attention_combine"]),
        ([64, 32, 1, 128, 8, 4096], true, true, vec!["attention_rows"]),
        ([2, 8, 1, 64, 2, 300], false, true, vec!["attention_rows"]),
        ([3, 4, 1, 64, 4, 77], true, true, vec!["attention"]),
    ];
    let mut jobs = vec![];
    for dtype in [DType::F16, DType::BF16] {
        for (dims, causal, scale_pos, want) in &cases {
            let cfg = config::default_config("attention", dtype, &[("S", dims[2] as i64), ("D", dims[3] as i64)]);
            let specs = attention::specs_for(dtype, &cfg, dims, *causal, *scale_pos);
            let got: Vec<&str> = specs.iter().map(|s| s.function).collect();
            assert_eq!(&got, want, "{dims:?} causal={causal}");
            jobs.extend(specs.into_iter().map(|s| (dtype, *dims, s)));
        }
    }
    with_stack(move || {
        let mut failures = vec![];
        let n = jobs.len();
        for (i, (dtype, dims, spec)) in jobs.into_iter().enumerate() {
            let tag = format!("attention_{}_{}_{}_{}", dtype.name(), spec.function, dims.map(|x| x.to_string()).join("x"), i);
            if let Err(e) = bytecode(&spec, dtype, ARCH).and_then(|bc| assemble(&bc, ARCH, &tag)) {
                failures.push(format!("{tag} {:?}: {e}", spec.generics));
            }
        }
        assert!(failures.is_empty(), "{} of {n} decode specialisations failed:\n{}", failures.len(), failures.join("\n"));
    });
}

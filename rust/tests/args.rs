//! Argument validation and configuration, all without a GPU: every refusal names op and argument.

use tilerosetta_cutile_rs::args::{check_tensor, contiguous_strides, ArgError, DType, Request, TensorArg};
use tilerosetta_cutile_rs::config;
use tilerosetta_cutile_rs::ops;

fn t(name: &str, ptr: u64, shape: &[i64]) -> TensorArg {
    TensorArg::new(name, ptr, shape, &contiguous_strides(shape))
}

/// A request whose tensors all have its dtype and live on cuda:0 (what the adapter sends for a good call).
fn req(op: &str, dtype: DType, tensors: Vec<TensorArg>) -> Request {
    let tensors = tensors.into_iter().map(|t| t.on(dtype.name(), "cuda:0")).collect();
    Request { op: op.into(), dtype, device: 0, stream: 0, tensors, scalars: vec![], config: vec![] }
}

fn err(r: &Request) -> ArgError {
    ops::plan(r).expect_err("expected a validation error")
}

#[test]
fn dtype_names() {
    assert_eq!(DType::parse("x", "fp16").unwrap(), DType::F16);
    assert_eq!(DType::parse("x", "bf16").unwrap().cutile_name(), "bf16");
    let e = DType::parse("vector_add", "fp64").unwrap_err();
    assert_eq!((e.op.as_str(), e.arg.as_str()), ("vector_add", "dtype"));
    assert!(e.to_string().contains("cutile_rs.vector_add: argument 'dtype'"), "{e}");
}

#[test]
fn strides_are_row_major() {
    assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    assert_eq!(contiguous_strides(&[5]), vec![1]);
}

#[test]
fn tensor_checks_name_the_argument() {
    let ok = t("x", 256, &[3, 4]);
    assert_eq!(check_tensor("softmax", &ok, 2, DType::F32).unwrap(), vec![3, 4]);
    let cases: Vec<(TensorArg, &str)> = vec![
        (t("x", 256, &[12]), "rank"),
        (t("x", 0, &[3, 4]), "null"),
        (t("x", 258, &[3, 4]), "aligned"),
        (t("x", 256, &[3, 0]), "positive"),
        (TensorArg::new("x", 256, &[3, 4], &[1, 3]), "contiguous"),
        (TensorArg::new("x", 256, &[3, 4], &[4, 2]), "contiguous"),
        (t("x", 256, &[1 << 16, 1 << 16]), "2^31"),
    ];
    for (arg, want) in cases {
        let e = check_tensor("softmax", &arg, 2, DType::F32).unwrap_err();
        assert_eq!(e.arg, "x");
        assert!(e.message.contains(want), "{want}: {}", e.message);
    }
}

#[test]
fn vector_add_plan() {
    let r = req("vector_add", DType::F16, vec![t("a", 256, &[1000]), t("b", 8192, &[1000]), t("out", 65536, &[1000])]);
    let p = ops::plan(&r).unwrap();
    assert_eq!(p.dims, vec![1000]);
    assert_eq!(config::get(&p.cfg, "BLOCK"), 1024);

    let bad = req("vector_add", DType::F16, vec![t("a", 256, &[1000]), t("b", 8192, &[999]), t("out", 65536, &[1000])]);
    let e = err(&bad);
    assert_eq!(e.arg, "b");

    let alias = req("vector_add", DType::F32, vec![t("a", 256, &[1000]), t("b", 8192, &[1000]), t("out", 256, &[1000])]);
    let e = err(&alias);
    assert_eq!(e.arg, "out");

    let missing = req("vector_add", DType::F32, vec![t("a", 256, &[1000]), t("b", 8192, &[1000])]);
    assert_eq!(err(&missing).arg, "tensors");

    let mut neg = r.clone();
    neg.device = -1;
    assert_eq!(err(&neg).arg, "device");
}

/// Only the spec's declared in-place pair (rope: out may be q itself, OpSpec.inplace_ok, from the generated
/// table) is let through, and only as the very same tensor: partial overlap and out on another input stay
/// refused (out's shape is q's, checked before, so "same span" is "same tensor" here).
#[test]
fn rope_runs_in_place_only_as_the_declared_identical_pair() {
    let (b, h, s, d) = (1i64, 4, 129, 64);
    let n = (b * h * s * d * 4) as u64; // q's bytes at fp32
    let rope = |q: u64, out: u64, out_shape: &[i64]| {
        req("rope", DType::F32, vec![t("q", q, &[b, h, s, d]), t("cos", 1 << 30, &[s, d]), t("sin", 1 << 31, &[s, d]), t("out", out, out_shape)])
    };
    let p = ops::plan(&rope(1 << 20, 1 << 20, &[b, h, s, d])).expect("out == q is rope's declared in-place pair");
    assert_eq!(p.dims, vec![b as i32, h as i32, s as i32, d as i32]);
    assert!(ops::plan(&rope(1 << 20, (1 << 20) + n, &[b, h, s, d])).is_ok(), "adjacent buffers do not overlap");
    for (label, out, shape) in [
        ("partial", (1 << 20) + n / 2, vec![b, h, s, d]),
        ("on cos", 1 << 30, vec![b, h, s, d]),
    ] {
        let r = rope(1 << 20, out, &shape);
        let e = ops::plan(&r).expect_err(label);
        assert_eq!(e.arg, "out", "{label}: {e}");
        assert!(e.message.contains("overlaps") || e.message.contains("same memory"), "{label}: {e}");
    }
    // an op that declares no pair refuses even the identical tensor
    let same = req("softmax", DType::F32, vec![t("x", 1 << 20, &[8, 64]), t("out", 1 << 20, &[8, 64])]);
    let e = err(&same);
    assert!(e.arg == "out" && e.message.contains("same memory") && e.message.contains("not supported"), "{e}");
}

#[test]
fn config_overrides_are_checked() {
    let base = req("vector_add", DType::F32, vec![t("a", 256, &[10]), t("b", 8192, &[10]), t("out", 65536, &[10])]);
    let mut r = base.clone();
    r.config = vec![("BLOCK".into(), 256)];
    assert_eq!(config::get(&ops::plan(&r).unwrap().cfg, "BLOCK"), 256);
    for (name, value, want) in [
        ("BLOCK", 100, "power of two"),
        ("BLOCK", 1 << 17, "power of two"),
        ("TILE", 64, "unknown"),
        ("OCC", 33, "hint OCC=33"),
        ("W", 3, "hint W=3"),
        ("W", 64, "hint W=64"),
        ("OCC", -1, "hint OCC=-1"),
    ] {
        let mut r = base.clone();
        r.config = vec![(name.into(), value)];
        let e = err(&r);
        assert_eq!((e.op.as_str(), e.arg.as_str()), ("vector_add", "config"));
        assert!(e.message.contains(want), "{}", e.message);
    }
}

/// TMA (row ops): 1 by default (today's kernels); 0 takes the `*_row_notma` kernel only where the tiles are
/// exact (BN == N, BR | M) and is ignored elsewhere; any other value is refused, naming op, key and value.
#[test]
fn row_tma_switch() {
    let function = |op: &str, dtype: DType, m: i64, n: i64, given: &[(&str, i64)]| {
        let given: Vec<(String, i64)> = given.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let cfg = config::resolve(op, dtype, &[("M", m), ("N", n)], &given).unwrap();
        ops::specs(op, dtype, &cfg, &[m as i32, n as i32]).unwrap()[0].function
    };
    for op in ["softmax", "rms_norm", "layer_norm", "add_rms_norm"] {
        assert_eq!(config::get(&config::default_config(op, DType::BF16, &[("M", 4096), ("N", 8192)]), "TMA"), 1, "{op}");
        assert_eq!(function(op, DType::BF16, 4096, 8192, &[]), format!("{op}_row"));
        assert_eq!(function(op, DType::BF16, 4096, 8192, &[("TMA", 0)]), format!("{op}_row_notma"));
        assert_eq!(function(op, DType::F32, 6, 4096, &[("TMA", 0)]), format!("{op}_row_notma"));
        // Not exact: a padded row (N 4000 in a 4096 tile), a ragged last row tile (BR 2, M odd), a chunked row.
        assert_eq!(function(op, DType::BF16, 4096, 4000, &[("TMA", 0)]), format!("{op}_row"));
        assert_eq!(function(op, DType::BF16, 4095, 4096, &[("TMA", 0), ("BR", 2)]), format!("{op}_row"));
        assert_eq!(function(op, DType::BF16, 8, 32768, &[("TMA", 0)]), format!("{op}_chunks"));
        let e = config::resolve(op, DType::BF16, &[("M", 8), ("N", 64)], &[("TMA".to_string(), 2)]).expect_err("TMA=2 accepted");
        assert_eq!((e.op.as_str(), e.arg.as_str()), (op, "config"));
        assert!(e.to_string().contains(&format!("cutile_rs.{op}")) && e.message.contains("switch TMA=2 must be 0 or 1"), "{e}");
    }
    // Only the row ops have the key.
    let e = config::resolve("matmul", DType::BF16, &[], &[("TMA".to_string(), 0)]).expect_err("matmul took TMA");
    assert!(e.message.contains("unknown tile parameter 'TMA'"), "{e}");
}

#[test]
fn unknown_op_is_refused() {
    let e = err(&req("conv2d", DType::F32, vec![]));
    assert_eq!(e.arg, "op");
}

#[test]
fn default_tables_cover_every_op_and_are_in_their_space() {
    for op in ops::OPS {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let names: Vec<&str> = config::default_config(op, dtype, &[]).iter().map(|(k, _)| *k).collect();
            assert_eq!(names, config::param_names(op), "{op}");
            for cfg in config::config_space(op, dtype) {
                let keys: Vec<&str> = cfg.iter().map(|(k, _)| *k).collect();
                assert_eq!(keys, config::param_names(op), "{op}");
                // Every entry passes the checks a caller's config passes (resolve: tile sizes powers of two,
                // hints and switches in their ranges).
                let given: Vec<(String, i64)> = cfg.iter().map(|(k, v)| (k.to_string(), *v)).collect();
                if let Err(e) = config::resolve(op, dtype, &[], &given) {
                    panic!("{op}: {cfg:?}: {}", e.message);
                }
            }
        }
    }
    // Row kernels never load a chunk wider than the row needs, and keep a row up to 16384 in one tile.
    let cfg = config::default_config("softmax", DType::F32, &[("N", 7)]);
    assert_eq!(config::get(&cfg, "BN"), 8);
    let cfg = config::default_config("softmax", DType::BF16, &[("M", 4096), ("N", 16384)]);
    assert_eq!((config::get(&cfg, "BN"), config::get(&cfg, "OCC")), (16384, 2));
    // Two 16-bit rows per block up to N 4096 (config::row_block_rows); fp32, wider rows and M = 1: one.
    let row = |op: &str, dtype: DType, m: i64, n: i64| {
        let cfg = config::default_config(op, dtype, &[("M", m), ("N", n)]);
        (config::get(&cfg, "BR"), config::get(&cfg, "BN"), config::get(&cfg, "OCC"))
    };
    assert_eq!(row("rms_norm", DType::BF16, 16384, 4096), (2, 4096, 4));
    assert_eq!(row("softmax", DType::F16, 17, 100), (2, 128, 4));
    assert_eq!(row("layer_norm", DType::F32, 16384, 4096), (1, 4096, 4));
    assert_eq!(row("rms_norm", DType::BF16, 4096, 4097), (1, 8192, 4));
    assert_eq!(row("softmax", DType::BF16, 1, 4096), (1, 4096, 4));
    assert_eq!(row("add_rms_norm", DType::BF16, 4, 40000), (1, 4096, 4), "chunked rows keep one row per block");
    let cfg = config::default_config("layer_norm", DType::F32, &[("M", 2), ("N", 40000)]);
    assert_eq!(config::get(&cfg, "BN") as i64, config::ROW_CHUNK, "rows wider than one tile are chunked");
    // mma kernels: 128x256x64 with 8 worker warps for 16-bit types.
    let cfg = config::default_config("bmm", DType::BF16, &[]);
    assert_eq!(
        ["BM", "BN", "BK", "OCC", "W"].map(|k| config::get(&cfg, k)),
        [128, 256, 64, 0, 8]
    );
    let cfg = config::default_config("attention", DType::BF16, &[("D", 128)]);
    assert_eq!(["BM", "BN", "OCC", "W"].map(|k| config::get(&cfg, k)), [64, 128, 2, 0]);
}

#[test]
fn hints_become_compile_options() {
    let o = config::compile_options(&config::default_config("bmm", DType::F16, &[]));
    assert_eq!((o.occupancy, o.num_worker_warps_per_cta), (None, Some(8)));
    let o = config::compile_options(&config::default_config("softmax", DType::F16, &[("N", 4096)]));
    assert_eq!((o.occupancy, o.num_worker_warps_per_cta), (Some(4), None));
    let o = config::compile_options(&config::default_config("vector_add", DType::F16, &[]));
    assert_eq!((o.occupancy, o.num_worker_warps_per_cta), (None, None));
}

#[test]
fn specs_views_match_launch_shapes() {
    // rope: one kernel. D/2 a power of two: the halves are column tiles of (B*H, S, D) and (S, D), unchecked
    // when BS (16) divides S; otherwise the (B*H, 2S, D/2) reshape of q/out and (2S, D/2) of cos/sin.
    let cfg = config::default_config("rope", DType::BF16, &[]);
    let views = |dims: &[i32]| {
        let specs = ops::specs("rope", DType::BF16, &cfg, dims).unwrap();
        assert_eq!(specs.len(), 1, "rope is one launch");
        (specs[0].function, specs[0].args.iter().map(|a| (a.name, a.shape.clone())).collect::<Vec<_>>())
    };
    assert_eq!(views(&[4, 32, 4096, 128]), ("rope_halves_exact", vec![("out", vec![128, 4096, 128]), ("q", vec![128, 4096, 128]), ("c", vec![4096, 128]), ("s", vec![4096, 128])]));
    assert_eq!(views(&[2, 3, 17, 2]), ("rope_halves", vec![("out", vec![6, 17, 2]), ("q", vec![6, 17, 2]), ("c", vec![17, 2]), ("s", vec![17, 2])]));
    assert_eq!(views(&[1, 2, 17, 96]), ("rope", vec![("out", vec![2, 34, 48]), ("q", vec![2, 34, 48]), ("c", vec![34, 48]), ("s", vec![34, 48])]));
    // silu_and_mul: the unchecked-load kernel exactly when the tiles cover (M, H).
    let silu = |m: i32, h: i32| {
        let cfg = config::default_config("silu_and_mul", DType::BF16, &[("M", m as i64), ("H", h as i64)]);
        ops::specs("silu_and_mul", DType::BF16, &cfg, &[m, h]).unwrap()[0].function
    };
    assert_eq!((silu(4096, 14336), silu(3, 129), silu(4096, 14336 + 64), silu(5, 512)), ("silu_and_mul_exact", "silu_and_mul", "silu_and_mul", "silu_and_mul_exact"));
    // Row ops pick the one-pass kernel exactly when the row fits in the tile.
    let one = config::default_config("softmax", DType::F16, &[("N", 16384)]);
    assert_eq!(ops::specs("softmax", DType::F16, &one, &[4096, 16384]).unwrap()[0].function, "softmax_row");
    let mut narrow = one.clone();
    narrow.iter_mut().find(|(k, _)| *k == "BN").unwrap().1 = 2048;
    assert_eq!(ops::specs("softmax", DType::F16, &narrow, &[4096, 16384]).unwrap()[0].function, "softmax_chunks");
    // Wrong dims are refused, naming op and argument.
    let e = ops::specs("bmm", DType::F16, &config::default_config("bmm", DType::F16, &[]), &[1, 2, 3]).err().unwrap();
    assert_eq!((e.op.as_str(), e.arg.as_str()), ("bmm", "dims"));
}

#[test]
fn size1_dims_may_have_any_stride() {
    // torch calls these contiguous (torch.randn(5, 1).t(): shape (1, 5), strides (1, 1)); the stride of
    // an extent-1 dim never addresses an element.
    for (shape, strides) in [(vec![1i64, 5], vec![1i64, 1]), (vec![1, 5], vec![7, 1]), (vec![3, 1], vec![1, 3]), (vec![1, 1], vec![9, 9])] {
        let x = TensorArg::new("x", 256, &shape, &strides);
        assert!(check_tensor("softmax", &x, 2, DType::F32).is_ok(), "{shape:?} {strides:?}");
    }
}

#[test]
fn every_tensor_must_have_the_launch_dtype_and_device() {
    let good = || vec![t("a", 256, &[1000]), t("b", 8192, &[1000]), t("out", 65536, &[1000])];
    assert!(ops::plan(&req("vector_add", DType::F16, good())).is_ok());
    // An fp32 input in an fp16 launch is read as twice as many fp16 elements; an fp32 output handed to a
    // bf16 kernel the other way round: refused, naming the tensor.
    for (i, dtype, device, want) in [
        (0, "fp32", "cuda:0", "dtype fp32 differs"),
        (2, "bf16", "cuda:0", "dtype bf16 differs"),
        (1, "float64", "cuda:0", "dtype float64 differs"),
        (0, "fp16", "cpu", "tensor is on cpu"),
        (2, "fp16", "cuda:1", "tensor is on cuda:1"),
        (1, "", "", "dtype not given"),
    ] {
        let mut r = req("vector_add", DType::F16, good());
        r.tensors[i] = r.tensors[i].clone().on(dtype, device);
        let e = err(&r);
        assert_eq!(e.arg, r.tensors[i].name, "{want}: {e}");
        assert!(e.message.contains(want), "{want}: {e}");
    }
    // A tensor built without dtype/device is refused (the safe default), as is a device string w/o index.
    let mut r = req("vector_add", DType::F16, good());
    r.tensors[1] = t("b", 8192, &[1000]);
    assert!(err(&r).message.contains("not given"));
    r.tensors[1] = t("b", 8192, &[1000]).on("fp16", "cuda");
    assert!(err(&r).message.contains("tensor is on cuda,"));
}

#[test]
fn attention_folds_past_65535_query_blocks() {
    // out (B*H, S, D) in (1, BM, D) tiles: ceil(S / BM) is grid y; past 65535 the folded kernel runs.
    let attn = |s: i64| {
        let mut r = req("attention", DType::BF16, vec![
            t("q", 256, &[1, 1, s, 64]), t("k", 1 << 36, &[1, 1, 3, 64]),
            t("v", 1 << 37, &[1, 1, 3, 64]), t("out", 1 << 40, &[1, 1, s, 64])]);
        r.scalars = vec![("causal".into(), 0.0), ("scale".into(), 0.125)];
        r
    };
    for (s, folded) in [(65536 * 128, true), (4096, false)] {
        let r = attn(s);
        let plan = ops::plan(&r).unwrap_or_else(|e| panic!("S={s}: {e}"));
        let grid = ops::attention::tile_grid(&plan.dims, &plan.cfg);
        assert_eq!(ops::folds(&grid), folded, "S={s}: {grid:?}");
        let spec = ops::attention::specs_for(DType::BF16, &plan.cfg, &plan.dims, false, true).remove(0);
        assert_eq!(spec.function, if folded { "attention_folded" } else { "attention" }, "S={s}");
    }
}

#[test]
fn matmul_and_bmm_fold_past_65535_tiles_on_grid_y_or_z() {
    let n = 65536 * 256 + 3;
    let r = req("matmul", DType::F16, vec![t("a", 256, &[2, 3]), t("b", 1 << 20, &[3, n]), t("out", 1 << 40, &[2, n])]);
    let plan = ops::plan(&r).unwrap();
    assert!(ops::folds(&ops::matmul::tile_grid(&plan.dims, &plan.cfg)));
    assert_eq!(ops::specs("matmul", DType::F16, &plan.cfg, &plan.dims).unwrap()[0].function, "matmul_folded");
    for (a, b, out) in [([2, n, 3], [2, 3, 2], [2, n, 2]), ([2, 2, 3], [2, 3, n], [2, 2, n])] {
        let r = req("bmm", DType::F16, vec![t("a", 256, &a), t("b", 1 << 36, &b), t("out", 1 << 40, &out)]);
        let plan = ops::plan(&r).unwrap_or_else(|e| panic!("{a:?} {b:?}: {e}"));
        let grid = ops::bmm::tile_grid(&plan.dims, &plan.cfg);
        assert!(ops::folds(&grid) && grid[0] == 2, "{grid:?}");
        assert_eq!(ops::specs("bmm", DType::F16, &plan.cfg, &plan.dims).unwrap()[0].function, "bmm_folded");
    }
    // The benchmarked shapes keep the plain kernels.
    let r = req("bmm", DType::F16, vec![t("a", 256, &[16, 2048, 2048]), t("b", 1 << 36, &[16, 2048, 2048]),
                                        t("out", 1 << 40, &[16, 2048, 2048])]);
    let plan = ops::plan(&r).unwrap();
    assert_eq!(ops::specs("bmm", DType::F16, &plan.cfg, &plan.dims).unwrap()[0].function, "bmm");
}

#[test]
fn bmm_runs_its_grouped_order_only_with_gm_and_exact_tiles() {
    let cfg = |gm: i64| config::resolve("bmm", DType::BF16, &[], &[("GM".to_string(), gm)]).unwrap();
    let function = |gm: i64, dims: &[i32]| ops::specs("bmm", DType::BF16, &cfg(gm), dims).unwrap().remove(0).function;
    assert_eq!(function(0, &[16, 2048, 2048, 2048]), "bmm", "GM 0: out's launch order");
    assert_eq!(function(16, &[16, 2048, 2048, 2048]), "bmm_grouped");
    let spec = ops::specs("bmm", DType::BF16, &cfg(16), &[16, 2048, 2048, 2048]).unwrap().remove(0);
    assert_eq!(spec.generics.last().map(String::as_str), Some("16"), "GM is the kernel's last generic");
    // A tile past M's or N's end (128 x 256 tiles) keeps the bounds-checked kernel.
    assert_eq!(function(16, &[16, 2000, 2048, 2048]), "bmm");
    assert_eq!(function(16, &[16, 2048, 2000, 2048]), "bmm");
    assert_eq!(function(16, &[16, 2048, 2048, 2000]), "bmm_grouped", "K tails are padded loads, not stores");
    let e = config::resolve("bmm", DType::BF16, &[], &[("GM".to_string(), 3)]).unwrap_err();
    assert!(e.to_string().contains("GM=3"), "{e}");
    let space = config::config_space("bmm", DType::BF16);
    assert!(space.iter().all(|c| c.iter().any(|(k, _)| *k == "GM")), "every bmm config names GM");
    assert!(space.iter().any(|c| config::get(c, "GM") == 16 && config::get(c, "W") == 8));
}

#[test]
fn matmul_runs_bmm_grouped_on_one_entry_only_with_gm_and_exact_tiles() {
    let cfg = |gm: i64| config::resolve("matmul", DType::BF16, &[], &[("GM".to_string(), gm)]).unwrap();
    let spec = |gm: i64, dims: &[i32]| ops::specs("matmul", DType::BF16, &cfg(gm), dims).unwrap().remove(0);
    assert_eq!(spec(0, &[8192, 8192, 8192]).function, "matmul", "GM 0: out's launch order");
    let grouped = spec(16, &[8192, 8192, 8192]);
    assert_eq!(grouped.function, "bmm_grouped");
    assert_eq!(grouped.generics.last().map(String::as_str), Some("16"), "GM is the kernel's last generic");
    // matmul's 2-D tensors as one batch entry of bmm's 3-D views, in out, a, b order.
    let shapes: Vec<Vec<i32>> = grouped.args.iter().map(|a| a.shape.clone()).collect();
    assert_eq!(shapes, vec![vec![1, 8192, 8192]; 3]);
    let shapes: Vec<Vec<i32>> = spec(16, &[4096, 2048, 1024]).args.iter().map(|a| a.shape.clone()).collect();
    assert_eq!(shapes, vec![vec![1, 4096, 2048], vec![1, 4096, 1024], vec![1, 1024, 2048]]);
    // A tile past M's or N's end (128 x 256 tiles) keeps matmul's clipped stores; K tails are padded loads.
    assert_eq!(spec(16, &[8000, 8192, 8192]).function, "matmul");
    assert_eq!(spec(16, &[8192, 8000, 8192]).function, "matmul");
    assert_eq!(spec(16, &[8192, 8192, 8000]).function, "bmm_grouped");
    // Past 65535 tile-rows bmm's grid (1, M/BM, N/BN) would fold; matmul's own grid has them on x (no cap).
    assert_eq!(spec(16, &[65536 * 128, 256, 64]).function, "matmul");
    let space = config::config_space("matmul", DType::BF16);
    assert!(space.iter().all(|c| c.iter().any(|(k, _)| *k == "GM")), "every matmul config names GM");
    assert!(space.iter().any(|c| config::get(c, "GM") == 16 && config::get(c, "W") == 8));
    assert!(space.iter().filter(|c| config::get(c, "BM") == 16).all(|c| config::get(c, "GM") == 0), "decode tiles stay in order");
}

#[test]
fn attention_runs_in_query_block_order_only_with_qo_on_exact_prefill_blocks() {
    let cfg = |qo: i64| config::resolve("attention", DType::BF16, &[("D", 128)], &[("QO".to_string(), qo)]).unwrap();
    let function = |qo: i64, dims: &[i32], causal: bool| ops::attention::specs(DType::BF16, &cfg(qo), dims, causal).remove(0).function;
    for causal in [false, true] {
        assert_eq!(function(0, &[4, 32, 4096, 128], causal), "attention", "QO 0: out's launch order");
        assert_eq!(function(1, &[4, 32, 4096, 128], causal), "attention_by_query");
        assert_eq!(function(1, &[4, 32, 4000, 128], causal), "attention", "a query block past S keeps the clipped store");
    }
    // Decode schedules (packed rows, split-KV) have their own kernels whatever QO says.
    let plan_dims = [1, 32, 1, 128, 8, 4096];
    assert_ne!(ops::attention::specs(DType::BF16, &cfg(1), &plan_dims, true)[0].function, "attention_by_query");
    let e = config::resolve("attention", DType::BF16, &[], &[("QO".to_string(), 2)]).unwrap_err();
    assert!(e.to_string().contains("QO=2"), "{e}");
    let space = config::config_space("attention", DType::BF16);
    assert!(space.iter().all(|c| c.iter().any(|(k, _)| *k == "QO")), "every attention config names QO");
    assert!(space.iter().any(|c| config::get(c, "QO") == 1 && config::get(c, "BM") == 128));
}

#[test]
fn transpose_folds_its_tiles_into_grid_x_only_past_65535() {
    // out (N, M) in (BN, BM) tiles: ceil(M / BM) is grid y. Tall x folds the grid into grid x (one block
    // per tile, the `transpose_folded` kernel); wide x and ordinary shapes keep the 2-D kernel (fp32, whose
    // default keeps the partition's order: OUT_ROWS 0).
    let m = 65536 * 256;
    for (xs, outs, folded) in [([m, 2], [2, m], true), ([2, m], [m, 2], false), ([300, 500], [500, 300], false)] {
        let r = req("transpose", DType::F32, vec![t("x", 256, &xs), t("out", 1 << 40, &outs)]);
        let plan = ops::plan(&r).unwrap_or_else(|e| panic!("{xs:?}: {e}"));
        let grid = ops::transpose::tile_grid(&plan.dims, &plan.cfg);
        let (bm, bn) = (config::get(&plan.cfg, "BM") as i64, config::get(&plan.cfg, "BN") as i64);
        assert_eq!(grid, vec![(xs[1] + bn - 1) / bn, (xs[0] + bm - 1) / bm], "{xs:?}");
        assert_eq!(ops::folds(&grid), folded, "{xs:?}: {grid:?}");
        let spec = ops::specs("transpose", DType::F32, &plan.cfg, &plan.dims).unwrap().remove(0);
        assert_eq!(spec.function, if folded { "transpose_folded" } else { "transpose" }, "{xs:?}");
        assert_eq!(spec.generics.len(), if folded { 5 } else { 3 }, "{:?}", spec.generics);
    }
    // OUT_ROWS=1 (the 16-bit default) takes the mapped kernel at any size (out's column tiles fastest), 0 the
    // 2-D kernel; a value past 1 is refused.
    let mut r = req("transpose", DType::BF16, vec![t("x", 256, &[300, 500]), t("out", 1 << 40, &[500, 300])]);
    for (given, function) in [(vec![], "transpose_folded"), (vec![("OUT_ROWS".to_string(), 0)], "transpose")] {
        r.config = given;
        let plan = ops::plan(&r).unwrap();
        assert_eq!(ops::specs("transpose", DType::BF16, &plan.cfg, &plan.dims).unwrap()[0].function, function);
    }
    r.config = vec![("OUT_ROWS".into(), 2)];
    let e = err(&r);
    assert!(e.arg == "config" && e.message.contains("OUT_ROWS=2 must be 0 or 1"), "{e}");
    // Folded past grid x's 2^31 - 1 blocks (1-element tiles of a 70000 x 40000 matrix, beyond the
    // element limit too, so only the grid check is exercised by asking it directly): refused, naming x.
    let r = req("transpose", DType::F16, vec![t("x", 256, &[2, 2]), t("out", 1 << 40, &[2, 2])]);
    let mut plan = ops::plan(&r).unwrap();
    plan.dims = vec![70000, 40000];
    plan.cfg = plan.cfg.iter().map(|&(k, v)| (k, if k == "BM" || k == "BN" { 1 } else { v })).collect();
    let e = ops::check_grid(&r, &plan).expect_err("2.8e9 blocks accepted");
    assert_eq!(e.arg, "x");
    assert!(e.message.contains("2147483647") && e.message.contains("grid axis x"), "{e}");
}

#[test]
fn silu_and_mul_and_rope_fold_past_65535_tiles_on_grid_y() {
    // silu_and_mul: ceil(H / BH) is grid y (BH <= 1024 by default); rope: ceil(S / BS) (BS = 16).
    let h = 65536 * 1024 + 3;
    let r = req("silu_and_mul", DType::BF16, vec![t("x", 256, &[1, 2 * h]), t("out", 1 << 40, &[1, h])]);
    let plan = ops::plan(&r).unwrap();
    let grid = ops::silu_and_mul::tile_grid(&plan.dims, &plan.cfg);
    assert!(ops::folds(&grid) && grid[1] > 65535, "{grid:?}");
    assert_eq!(ops::specs("silu_and_mul", DType::BF16, &plan.cfg, &plan.dims).unwrap()[0].function, "silu_and_mul_folded");
    let s = 65536 * 16 + 3;
    let r = req("rope", DType::BF16, vec![t("q", 256, &[1, 2, s, 64]), t("cos", 1 << 36, &[s, 64]),
                                          t("sin", 1 << 38, &[s, 64]), t("out", 1 << 40, &[1, 2, s, 64])]);
    let plan = ops::plan(&r).unwrap();
    let grid = ops::rope::tile_grid(&plan.dims, &plan.cfg);
    assert_eq!(grid, vec![2, (s + 15) / 16, 1]);
    assert_eq!(ops::specs("rope", DType::BF16, &plan.cfg, &plan.dims).unwrap()[0].function, "rope_folded");
    // Ordinary sizes keep the plain kernels.
    let r = req("rope", DType::BF16, vec![t("q", 256, &[4, 32, 4096, 128]), t("cos", 1 << 36, &[4096, 128]),
                                          t("sin", 1 << 38, &[4096, 128]), t("out", 1 << 40, &[4, 32, 4096, 128])]);
    let plan = ops::plan(&r).unwrap();
    assert_eq!(ops::specs("rope", DType::BF16, &plan.cfg, &plan.dims).unwrap()[0].function, "rope_halves_exact");
}

/// Grouped-query attention: k/v (B, Hkv, Sk, D) with Hkv | H, the plan's dims (B, H, S, D, Hkv, Sk); a Hkv
/// that does not divide H and causal with S > Sk are refused (the first would read past k/v).
#[test]
fn attention_gqa_plan() {
    let attn = |hkv: i64, s: i64, sk: i64, causal: f64| {
        let mut r = req("attention", DType::BF16, vec![
            t("q", 1 << 20, &[2, 32, s, 128]), t("k", 1 << 24, &[2, hkv, sk, 128]),
            t("v", 1 << 26, &[2, hkv, sk, 128]), t("out", 1 << 28, &[2, 32, s, 128])]);
        r.scalars = vec![("causal".into(), causal), ("scale".into(), 0.125)];
        r
    };
    assert_eq!(ops::plan(&attn(8, 1, 4099, 1.0)).unwrap().dims, vec![2, 32, 1, 128, 8, 4099]);
    assert_eq!(ops::plan(&attn(32, 7, 5, 0.0)).unwrap().dims, vec![2, 32, 7, 128, 32, 5]);
    let e = err(&attn(6, 1, 64, 0.0));
    assert_eq!(e.arg, "k");
    assert!(e.message.contains("does not divide"), "{}", e.message);
    let e = err(&attn(8, 7, 5, 1.0));
    assert_eq!(e.arg, "q");
    assert!(e.message.contains("S=7 queries > Sk=5"), "{}", e.message);
    let mut r = attn(8, 1, 64, 0.0);
    r.tensors[2] = t("v", 1 << 26, &[2, 8, 63, 128]).on("bf16", "cuda:0");
    assert_eq!(err(&r).arg, "v");
}

#[test]
fn ops_follow_the_generated_table() {
    // The crate implements exactly the specs' ops (crate::generated, from `python -m tilerosetta.codegen`).
    let mut names: Vec<&str> = tilerosetta_cutile_rs::generated::OPS.iter().map(|o| o.name).collect();
    let mut ours = ops::OPS.to_vec();
    names.sort_unstable();
    ours.sort_unstable();
    assert_eq!(ours, names);
    for decl in tilerosetta_cutile_rs::generated::OPS {
        assert!(!ops::dim_names(decl.name).is_empty(), "{}: no Plan::dims layout", decl.name);
        for d in ops::dim_names(decl.name) {
            assert!(decl.dims.contains(d), "{}: Plan dim {d} is not a dim of the spec {:?}", decl.name, decl.dims);
        }
    }
}

#[test]
fn signature_binds_products_and_refuses_inconsistent_extents() {
    // silu_and_mul: x (M, 2*H), out (M, H). H comes from out; x's last dim must then be 2*H.
    let ok = req("silu_and_mul", DType::F32, vec![t("x", 256, &[3, 10]), t("out", 65536, &[3, 5])]);
    assert_eq!(ops::plan(&ok).unwrap().dims, vec![3, 5]);
    for (x, out, arg) in [([3i64, 9], [3i64, 5], "x"), ([3, 11], [3, 5], "x"), ([3, 10], [4, 5], "out")] {
        let e = err(&req("silu_and_mul", DType::F32, vec![t("x", 256, &x), t("out", 65536, &out)]));
        assert_eq!(e.arg, arg, "{x:?} {out:?}: {e}");
    }
    // An output too short for the extents bound from the inputs would be written past its end: refused.
    let e = err(&req("rms_norm", DType::F32, vec![t("x", 256, &[4, 8]), t("w", 8192, &[8]), t("out", 65536, &[3, 8])]));
    assert_eq!(e.arg, "out");
    let e = err(&req("rms_norm", DType::F32, vec![t("x", 256, &[4, 8]), t("w", 8192, &[7]), t("out", 65536, &[4, 8])]));
    assert_eq!(e.arg, "w");
    // A dtype the spec does not declare for the op.
    let q = || t("q", 256, &[1, 1, 4, 64]);
    let e = err(&req("attention", DType::F32, vec![q(), t("k", 1 << 20, &[1, 1, 4, 64]), t("v", 1 << 21, &[1, 1, 4, 64]), t("out", 1 << 22, &[1, 1, 4, 64])]));
    assert_eq!(e.arg, "dtype");
}

fn arg_err(r: Result<(), ops::LaunchError>) -> ArgError {
    match r {
        Err(ops::LaunchError::Arg(a)) => a,
        other => panic!("expected an argument error before any CUDA call, got {other:?}"),
    }
}

/// ops::Prepared validates as `plan` does, then each launch checks only what depends on its pointers,
/// before any CUDA call and with the errors `plan` gives for a request holding those pointers.
#[test]
fn prepared_refuses_what_plan_refuses_and_rechecks_pointers() {
    let bad = req("vector_add", DType::F32, vec![t("a", 256, &[1000]), t("b", 8192, &[999]), t("out", 65536, &[1000])]);
    assert_eq!(ops::Prepared::new(bad.clone()).unwrap_err(), err(&bad));
    let good = req("rope", DType::F32, vec![t("q", 1 << 20, &[1, 2, 8, 64]), t("cos", 1 << 22, &[8, 64]), t("sin", 1 << 23, &[8, 64]), t("out", 1 << 24, &[1, 2, 8, 64])]);
    let mut p = ops::Prepared::new(good.clone()).unwrap();
    assert_eq!(p.plan().dims, ops::plan(&good).unwrap().dims);

    let e = arg_err(p.launch(&[1 << 20, 1 << 22, 1 << 23], 7));
    assert_eq!((e.op.as_str(), e.arg.as_str()), ("rope", "pointers"));
    assert!(e.message.contains("expected 4 data pointers (q, cos, sin, out), got 3"), "{e}");
    // (pointers, how plan() refuses the same request with them)
    for ptrs in [[1 << 20, 0, 1 << 23, 1 << 24], [1 << 20, 1 << 22, (1 << 23) + 2, 1 << 24], [1 << 20, 1 << 22, 1 << 23, 1 << 22],
                 [1 << 20, 1 << 22, 1 << 23, (1 << 20) + 64]] {
        let mut same = good.clone();
        for (t, &q) in same.tensors.iter_mut().zip(&ptrs) {
            t.ptr = q;
        }
        assert_eq!(arg_err(p.launch(&ptrs, 7)), err(&same), "{ptrs:?}");
    }
    // the declared in-place pair (rope: out = q) passes the pointer checks as it passes plan()
    let mut inplace = good.clone();
    inplace.tensors[3].ptr = 1 << 20;
    assert!(ops::plan(&inplace).is_ok());
    assert!(tilerosetta_cutile_rs::args::check_pointers(&inplace, tilerosetta_cutile_rs::generated::op("rope").unwrap()).is_ok());
}

/// attention's split-KV plan is python/tilerosetta/kernels/attention_split.py `split_plan` /
/// `packed_rows` (every backend splits a case alike): the values below are that file's answers.
#[test]
fn attention_split_plan_matches_python() {
    use tilerosetta_cutile_rs::ops::attention::{packed_rows, split_plan, H200_SM_COUNT, MIN_SPLIT_BLOCKS};
    assert_eq!((H200_SM_COUNT, MIN_SPLIT_BLOCKS), (132, 4));
    let plan = |tiles, sk, bn| split_plan(tiles, sk, bn, H200_SM_COUNT, MIN_SPLIT_BLOCKS);
    // (tiles, Sk, BN) -> (n_split, chunk)
    assert_eq!(plan(8, 4096, 64), (16, 256)); // 8 tiles x 16 chunks of 4 key tiles
    assert_eq!(plan(8, 4099, 128), (9, 512)); // ragged: the 9th chunk holds 3 keys
    assert_eq!(plan(512, 4096, 64), (1, 4096)); // the tiles fill the GPU alone: no split
    assert_eq!(plan(2, 100, 64), (1, 100)); // fewer keys than two chunks of 4 tiles
    assert_eq!(plan(128, 4096, 64), (2, 2048)); // at most 2 blocks per SM: 256 of 264, one wave (3: 384)
    assert_eq!(plan(8, 300, 64), (1, 300));
    assert_eq!(plan(2, 1000, 16), (16, 64));
    assert_eq!(plan(131, 512, 64), (2, 256)); // just under the SM count, exactly two chunks of keys
    assert_eq!(plan(132, 4096, 64), (1, 4096)); // exactly the SM count: no split
    assert_eq!(plan(8, 4096, 128), (8, 512)); // Llama decode B=1 (packed: Hkv = 8 row tiles)
    assert_eq!(plan(128, 4096, 128), (2, 2048)); // B=16
    assert_eq!(plan(100, 4096, 128), (2, 2048)); // 264 / 100 slots rounds down
    assert_eq!(plan(1, 1023, 128), (1, 1023));
    assert_eq!(plan(1, 1024, 128), (2, 512));
    // Another SM count changes the answer the way the formula says.
    assert_eq!(split_plan(8, 4096, 128, 16, MIN_SPLIT_BLOCKS), (4, 1024));
    // (H, Hkv, S, BM): G = H / Hkv > 1 heads of G * S <= BM rows.
    assert!(packed_rows(32, 8, 1, 64));
    assert!(!packed_rows(32, 32, 1, 64)); // G = 1: nothing to share
    assert!(!packed_rows(32, 8, 40, 64)); // G * S = 160 > 64
    assert!(packed_rows(32, 8, 16, 64)); // 64 rows: exactly one tile
    assert!(!packed_rows(32, 8, 17, 64));
    assert!(packed_rows(32, 8, 1, 16) && !packed_rows(32, 8, 5, 16));
}

/// The schedule a plan's dims (B, H, S, D, Hkv, Sk) get with the default tiles: packed rows for grouped
/// decode (BM shrunk to the rows), split-KV below the SM count, and the prefill path untouched.
#[test]
fn attention_decode_schedule() {
    use tilerosetta_cutile_rs::ops::attention::{schedule, specs_for, specs_on, H200_SM_COUNT};
    let cfg = config::default_config("attention", DType::BF16, &[("S", 1), ("D", 128)]);
    // (packed, NQ, M, BM, BN, row blocks, n_split, chunk)
    let sched = |dims: &[i32]| {
        let s = schedule(dims, &cfg, H200_SM_COUNT);
        (s.packed, s.nq, s.m, s.bm, s.bn, s.row_blocks, s.n_split, s.chunk)
    };
    // Llama 3.1 8B decode (H 32, Hkv 8, S 1, Sk 4096): the 4 heads of a group are one 16-row tile.
    assert_eq!(sched(&[1, 32, 1, 128, 8, 4096]), (true, 8, 4, 16, 128, 1, 8, 512));
    assert_eq!(sched(&[16, 32, 1, 128, 8, 4096]), (true, 128, 4, 16, 128, 1, 2, 2048));
    assert_eq!(sched(&[64, 32, 1, 128, 8, 4096]), (true, 512, 4, 16, 128, 1, 1, 4096));
    // The config's chunk floor, SPLIT_MIN_BLOCKS (default 4): at 1, chunks of one key tile up to 2 blocks
    // per SM (32 splits at B1; 4099 keys: 33, the last of 3 keys); B64 still fills the SMs unsplit.
    assert_eq!(config::get(&cfg, "SPLIT_MIN_BLOCKS"), 4);
    let fine: config::Config = cfg.iter().map(|&(k, v)| (k, if k == "SPLIT_MIN_BLOCKS" { 1 } else { v })).collect();
    let split_of = |dims: &[i32]| {
        let s = schedule(dims, &fine, H200_SM_COUNT);
        (s.n_split, s.chunk)
    };
    assert_eq!(split_of(&[1, 32, 1, 128, 8, 4096]), (32, 128));
    assert_eq!(split_of(&[1, 32, 1, 128, 8, 4099]), (33, 128));
    assert_eq!(split_of(&[64, 32, 1, 128, 8, 4096]), (1, 4096));
    // Not packed: G = 1 (one 16-row tile per head, still split), or G * S = 4 * 40 = 160 > BM 64.
    assert_eq!(sched(&[1, 32, 1, 128, 32, 4096]), (false, 32, 1, 16, 128, 1, 8, 512));
    assert_eq!(sched(&[1, 32, 40, 128, 8, 4096]), (false, 32, 40, 64, 128, 1, 8, 512));
    assert_eq!(sched(&[1, 4, 40, 64, 1, 1500]), (false, 4, 40, 64, 128, 1, 3, 512));
    assert_eq!(sched(&[1, 2, 300, 128, 2, 1200]), (false, 2, 300, 64, 128, 5, 3, 512));
    // Short keys clamp BN: Sk 77 -> 128, Sk 20 -> 32.
    assert_eq!(sched(&[3, 4, 1, 64, 4, 20]), (false, 12, 1, 16, 32, 1, 1, 20));
    // The clamped tiles drop the hints tuned for the full one; the prefill tile keeps them.
    let s = schedule(&[1, 32, 1, 128, 8, 4096], &cfg, H200_SM_COUNT);
    assert_eq!(["BM", "BN", "OCC", "W"].map(|k| config::get(&s.cfg, k)), [16, 128, 0, 0]);
    let prefill = schedule(&[4, 32, 4096, 128, 32, 4096], &cfg, H200_SM_COUNT);
    assert_eq!((prefill.packed, prefill.n_split, &prefill.cfg), (false, 1, &cfg));
    // Prefill: the per-head kernel with the generics it always had.
    for (dims, causal) in [(vec![4, 32, 4096, 128, 32, 4096], true), (vec![4, 32, 4096, 64, 32, 4096], false)] {
        let spec = specs_for(DType::BF16, &cfg, &dims, causal, true).remove(0);
        assert_eq!(spec.function, "attention");
        assert_eq!(spec.generics, ["bf16", "64", "128", &dims[3].to_string(), if causal { "1" } else { "0" }, "1"]);
        assert_eq!(spec.options.occupancy, Some(2));
    }
    // Split: attention_split writes fp32 workspaces (NQ * n_split, Mp[, D]) laid end to end, the combine
    // reads them; q and out are the packed (B*Hkv, G*S, D) view of (B, H, S, D).
    let s = schedule(&[1, 32, 1, 128, 8, 4096], &cfg, H200_SM_COUNT);
    let specs = specs_on(DType::BF16, &s, true, true);
    let view = |i: usize, j: usize| {
        let a = &specs[i].args[j];
        (a.name, a.workspace, a.offset, a.shape.clone(), a.strides.clone())
    };
    assert_eq!(specs.iter().map(|s| s.function).collect::<Vec<_>>(), ["attention_split", "attention_combine"]);
    assert_eq!(view(0, 0), ("m_ws", true, 0, vec![64, 16], vec![16, 1]));
    assert_eq!(view(0, 1), ("l_ws", true, 1024, vec![64, 16], vec![16, 1]));
    assert_eq!(view(0, 2), ("acc_ws", true, 2048, vec![64, 16, 128], vec![2048, 128, 1]));
    assert_eq!(view(0, 3), ("q", false, 0, vec![8, 4, 128], vec![512, 128, 1]));
    assert_eq!(view(0, 4), ("k", false, 0, vec![8, 4096, 128], vec![524288, 128, 1]));
    assert_eq!(view(1, 0), ("out", false, 0, vec![8, 4, 128], vec![512, 128, 1]));
    // The combine sees the same memory as (NQ, n_split, Mp[ * D]): a row's 8 splits along one axis.
    assert_eq!(view(1, 1), ("m_ws", true, 0, vec![8, 8, 16], vec![128, 16, 1]));
    assert_eq!(view(1, 2), ("l_ws", true, 1024, vec![8, 8, 16], vec![128, 16, 1]));
    assert_eq!(view(1, 3), ("acc_ws", true, 2048, vec![8, 8, 2048], vec![16384, 2048, 1]));
    assert_eq!(s.workspace_floats(), 64 * 16 * 130);
    assert_eq!(specs[1].generics, ["bf16", "128"]);
    assert_eq!(specs[1].options.occupancy, Some(4));
    // The workspaces are fp32 whatever the request's dtype: 4-byte elements in the compile-only spec bits.
    assert_eq!(specs[0].args[0].elem_size(DType::BF16), 4);
    assert_eq!(specs[0].args[3].elem_size(DType::BF16), 2);
    // The plan's grid check sees the split grid (row sets x splits, row blocks): nothing to fold.
    assert_eq!(ops::attention::tile_grid(&[1, 32, 1, 128, 8, 4096], &cfg), vec![64, 1, 1]);
}

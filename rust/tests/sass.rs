//! What the compiled sm_90 code looks like (no GPU): the compile-only path carries the launch's
//! specialisation bits and compiler hints, so these cubins are the kernels that run. Read with
//! cuobjdump (compile::find_cuobjdump: $CUOBJDUMP, PATH, or Triton's bundled copy in .venv).
//! tools/test-rust.sh skips this file, saying so, when no cuobjdump exists; run directly without
//! one, every test here fails with that reason rather than passing vacuously.
//!
//! `cargo test --release --test sass -- --ignored --nocapture resource_table` prints the register /
//! shared-memory / thread / spill table of every op's bench configuration.

use tilerosetta_cutile_rs::args::DType;
use tilerosetta_cutile_rs::compile::{assemble_cubin, bytecode, cuobjdump, find_cuobjdump, resources, Resources};
use tilerosetta_cutile_rs::config;
use tilerosetta_cutile_rs::ops;

const ARCH: &str = "sm_90";

fn with_stack<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(f: F) -> T {
    std::thread::Builder::new().stack_size(64 << 20).spawn(f).unwrap().join().unwrap()
}

fn need_cuobjdump() {
    assert!(find_cuobjdump().is_some(), "cuobjdump not found: set CUOBJDUMP or install triton into .venv (make setup)");
}

/// The cubins of op at dims (plan layout) with the default configuration plus `overrides`.
fn cubins(op: &'static str, dtype: DType, dims: Vec<i32>, overrides: Vec<(&'static str, i64)>) -> Vec<(String, Vec<u8>)> {
    with_stack(move || {
        let named: Vec<(&str, i64)> = ops::dim_names(op).iter().zip(&dims).map(|(k, v)| (*k, *v as i64)).collect();
        let given: Vec<(String, i64)> = overrides.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let cfg = config::resolve(op, dtype, &named, &given).unwrap();
        ops::specs(op, dtype, &cfg, &dims)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let tag = format!("{op}_{}_{}_{i}", dtype.name(), spec.function);
                let bc = bytecode(&spec, dtype, ARCH).unwrap_or_else(|e| panic!("{tag}: {e}"));
                let cubin = assemble_cubin(&bc, ARCH, &tag).unwrap_or_else(|e| panic!("{tag}: {e}"));
                (format!("{tag} {cfg:?}"), cubin)
            })
            .collect()
    })
}

/// Global-memory access instructions of a SASS listing, by kind.
#[derive(Debug, Default)]
struct Access {
    tma_loads: usize,
    wide_loads: usize,
    scalar16_loads: usize,
}

fn access(sass: &str) -> Access {
    let mut a = Access::default();
    for line in sass.lines() {
        if line.contains("UTMALDG") {
            a.tma_loads += 1;
        } else if line.contains("LDG.E.128") || line.contains("LDG.E.ENL2.256") || line.contains("LDG.E.64") {
            a.wide_loads += 1;
        } else if line.contains("LDG.E.U16") {
            a.scalar16_loads += 1;
        }
    }
    a
}

fn sass_of(tag: &str, cubin: &[u8]) -> String {
    cuobjdump(cubin, &["-sass"], &tag.replace([' ', '[', ']', '(', ')', '"', ',', ':'], "_")).unwrap()
}

#[test]
fn row_op_cubins_use_tma_or_128_bit_loads() {
    need_cuobjdump();
    for (op, dims) in [("softmax", vec![4096, 16384]), ("rms_norm", vec![16384, 4096]), ("layer_norm", vec![16384, 4096])] {
        for (tag, cubin) in cubins(op, DType::BF16, dims, vec![]) {
            let a = access(&sass_of(&tag, &cubin));
            assert!(a.tma_loads + a.wide_loads > 0, "{tag}: no TMA or 128-bit global loads: {a:?}");
            assert_eq!(a.scalar16_loads, 0, "{tag}: scalar 16-bit loads left: {a:?}");
        }
    }
}

/// The check above can fail: a row width with no power-of-two divisor (4099) gives the compiler no
/// alignment facts, and the same kernel then loads 16 bits at a time.
#[test]
fn unaligned_rows_compile_to_scalar_loads() {
    need_cuobjdump();
    for (tag, cubin) in cubins("softmax", DType::BF16, vec![64, 4099], vec![]) {
        let a = access(&sass_of(&tag, &cubin));
        assert!(a.scalar16_loads > 0 && a.tma_loads == 0, "{tag}: expected scalar loads without alignment facts: {a:?}");
    }
}

fn res(tag: &str, cubin: &[u8]) -> Resources {
    resources(cubin, &tag.replace([' ', '[', ']', '(', ')', '"', ',', ':'], "_")).unwrap()
}

/// The OCC / W hints reach the cubin: registers fit the requested CTAs per SM, worker warps set the
/// thread count, and nothing spills.
#[test]
fn hints_reach_the_cubin() {
    need_cuobjdump();
    let row = |op: &'static str, dims: Vec<i32>, occ: u32| {
        for (tag, cubin) in cubins(op, DType::BF16, dims, vec![]) {
            let r = res(&tag, &cubin);
            assert!(r.threads > 0, "{tag}: no REQNTID in the cubin: {r:?}");
            assert!(r.reg * r.threads * occ <= 65536, "{tag}: {r:?} does not fit {occ} CTAs/SM");
            assert_eq!(r.local + r.stack, 0, "{tag}: spills: {r:?}");
        }
    };
    row("softmax", vec![4096, 16384], 2);
    row("rms_norm", vec![16384, 4096], 4);
    row("layer_norm", vec![16384, 4096], 4);
    row("attention", vec![4, 32, 4096, 128, 0], 2);
    for (tag, cubin) in cubins("bmm", DType::BF16, vec![16, 2048, 2048, 2048], vec![]) {
        let r = res(&tag, &cubin);
        assert_eq!(r.threads, 384, "{tag}: W=8 should give producer + 2 consumer warpgroups: {r:?}");
        assert_eq!(r.local + r.stack, 0, "{tag}: spills: {r:?}");
    }
    // Without the hint the same bmm tile gets a different (compiler-chosen) warp layout: the test
    // above is sensitive to W.
    for (tag, cubin) in cubins("bmm", DType::BF16, vec![16, 2048, 2048, 2048], vec![("W", 0)]) {
        let r = res(&tag, &cubin);
        assert_ne!(r.threads, 384, "{tag}: {r:?}");
    }
}

/// SASS lines of `pat` (an opcode substring).
fn count(sass: &str, pat: &str) -> usize {
    sass.lines().filter(|l| l.contains(pat)).count()
}

/// Whether every global load of the listing (`LDG.E`) sits in one straight run: no branch, branch
/// region or barrier between the first and the last, i.e. they can all be in flight at once.
fn loads_back_to_back(sass: &str) -> bool {
    let lines: Vec<&str> = sass.lines().filter(|l| l.contains("/*") && l.contains(';')).collect();
    let loads: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| l.contains("LDG.E")).map(|(i, _)| i).collect();
    match (loads.first(), loads.last()) {
        (Some(&a), Some(&b)) => !lines[a..=b].iter().any(|l| l.contains("BRA") || l.contains("BSSY") || l.contains("BAR.") || l.contains("EXIT")),
        _ => false,
    }
}

/// rope loads q once, its halves as separate tiles (`rope_halves`): no shared-memory staging and no
/// block barrier (the one-tile layout's `extract`/`cat` cost 17408 B of shared memory and two BAR.SYNC,
/// docs/upstream/cutile-extract-cat-shared-memory.md). With BS dividing S (the bench shape) the six
/// 128-bit loads (q1, q2, two halves each of cos and sin) carry no bounds checks and go out back to back;
/// a ragged S keeps the checked loads (one branch region each) and still no staging.
#[test]
fn rope_loads_halves_without_staging() {
    need_cuobjdump();
    for (dims, function, exact) in [(vec![4, 32, 4096, 128], "rope_halves_exact", true), (vec![2, 3, 17, 128], "rope_halves", false)] {
        let cs = cubins("rope", DType::BF16, dims.clone(), vec![]);
        assert_eq!(cs.len(), 1, "rope is one launch");
        let (tag, cubin) = &cs[0];
        assert!(tag.contains(function), "{dims:?}: {tag} is not {function}");
        let sass = sass_of(tag, cubin);
        let r = res(tag, cubin);
        let (ldg, stg, bssy, bar) = (count(&sass, "LDG.E.128"), count(&sass, "STG.E.128"), count(&sass, "BSSY"), count(&sass, "BAR.SYNC"));
        eprintln!("{tag}: {r:?}, {ldg} LDG.E.128, {stg} STG.E.128, {bssy} BSSY, {bar} BAR.SYNC");
        assert_eq!((r.shared, bar, r.local + r.stack), (0, 0, 0), "{tag}: shared-memory staging, barriers or spills: {r:?}, {bar} BAR.SYNC");
        assert_eq!((ldg, stg, count(&sass, "LDG.E.U16")), (6, 2, 0), "{tag}: q1, q2, cos and sin halves in 128-bit loads, two 128-bit stores");
        if exact {
            assert_eq!(bssy, 0, "{tag}: bounds-check branch regions left");
            assert!(loads_back_to_back(&sass), "{tag}: the loads are not issued back to back");
        } else {
            assert!(bssy > 0 && !loads_back_to_back(&sass), "{tag}: a ragged S should keep its bounds checks");
        }
    }
    // A head dim whose half is not a power of two keeps the one-tile layout (and its staging).
    let cs = cubins("rope", DType::BF16, vec![1, 2, 17, 96], vec![]);
    assert!(cs[0].0.contains("rope_bf16_rope_0"), "{}", cs[0].0);
}

/// silu_and_mul on an exact tile grid (the bench's 4096 x 14336) states its loads in bounds: no branch
/// region, both 128-bit loads back to back. A ragged H keeps the checked kernel, whose two loads each sit
/// in their own branch region (2 BSSY): the pattern that held it at 81% of copy (bench/GAPS.md).
#[test]
fn silu_and_mul_exact_loads_back_to_back() {
    need_cuobjdump();
    for (dims, function, exact) in [(vec![4096, 14336], "silu_and_mul_exact", true), (vec![4096, 14336 + 64], "silu_and_mul_0", false)] {
        let cs = cubins("silu_and_mul", DType::BF16, dims.clone(), vec![]);
        let (tag, cubin) = &cs[0];
        assert!(tag.contains(function), "{dims:?}: {tag} is not {function}");
        let sass = sass_of(tag, cubin);
        let (ldg, bssy) = (count(&sass, "LDG.E.128"), count(&sass, "BSSY"));
        eprintln!("{tag}: {:?}, {ldg} LDG.E.128, {bssy} BSSY", res(tag, cubin));
        assert_eq!(ldg, 2, "{tag}: gate and up in one 128-bit load each");
        if exact {
            assert_eq!(bssy, 0, "{tag}: bounds-check branch regions left");
            assert!(loads_back_to_back(&sass), "{tag}: the loads are not issued back to back");
        } else {
            assert_eq!(bssy, 2, "{tag}: the checked kernel should keep one branch region per load");
            assert!(!loads_back_to_back(&sass), "{tag}");
        }
    }
}

/// AX 1 on the bench's exact tile: exp2 with flushed subnormals is a bare MUFU.EX2, without exp's range
/// reduction around it (FFMA.RM, FFMA.SAT and the scaling FFMAs of the default body); the division is the same
/// reciprocal + multiply in both (no FCHK either way). sm_90: 207 -> 151 instructions, 38 -> 30 registers, the
/// two loads still back to back, no spills.
#[test]
fn silu_and_mul_approximate_body_drops_the_exp_range_reduction() {
    need_cuobjdump();
    let of = |ax: i64| {
        let cs = cubins("silu_and_mul", DType::BF16, vec![4096, 14336], vec![("AX", ax)]);
        let (tag, cubin) = &cs[0];
        assert!(tag.contains("silu_and_mul_exact"), "{tag}");
        let sass = sass_of(tag, cubin);
        let r = res(tag, cubin);
        let reduction = count(&sass, "FFMA.RM") + count(&sass, "FFMA.SAT");
        let (ex2, fchk, ldg) = (count(&sass, "MUFU.EX2"), count(&sass, "FCHK"), count(&sass, "LDG.E.128"));
        eprintln!("{tag}: {r:?}, {reduction} FFMA.RM/.SAT, {ex2} MUFU.EX2, {fchk} FCHK, {ldg} LDG.E.128");
        (r, reduction, ex2, fchk, ldg, loads_back_to_back(&sass))
    };
    let (exact, fast) = (of(0), of(1));
    assert!(exact.1 > 0, "AX 0 should keep exp's range reduction: {exact:?}");
    assert_eq!(fast.1, 0, "AX 1: exp's range reduction is left: {fast:?}");
    assert_eq!((fast.2, fast.3), (exact.2, 0), "AX 1: one MUFU.EX2 per element, no division check: {fast:?}");
    assert!(fast.0.reg < exact.0.reg, "AX 1 should need fewer registers: {fast:?} vs {exact:?}");
    assert_eq!((fast.4, fast.5, fast.0.local + fast.0.stack), (2, true, 0), "AX 1: loads or spills changed: {fast:?}");
}

/// The row ops' fp16/bf16 default at N <= 4096 is two rows per block (config::row_block_rows): the same
/// 256 threads and 64 registers as one row, no spills, 4 CTAs per SM by registers and by shared memory,
/// so 8 rows per SM instead of 4.
#[test]
fn two_rows_per_block_at_n4096() {
    need_cuobjdump();
    for op in ["softmax", "rms_norm", "layer_norm", "add_rms_norm"] {
        for dtype in [DType::BF16, DType::F16] {
            for n in [8, 1024, 4096] {
                for (tag, cubin) in cubins(op, dtype, vec![16384, n], vec![]) {
                    assert!(tag.contains("(\"BR\", 2)"), "{tag}: not two rows per block");
                    let r = res(&tag, &cubin);
                    assert_eq!((r.threads, r.local + r.stack), (256, 0), "{tag}: {r:?}");
                    assert!(r.reg * r.threads * 4 <= 65536 && r.shared * 4 <= 227 * 1024, "{tag}: {r:?} does not fit 4 CTAs/SM");
                }
            }
        }
    }
}

/// TMA=0 on exact row tiles (BN == N, BR | M) takes the `*_row_notma` kernels: no TMA load or store
/// left, 128-bit LDG / STG instead (what took cuTile Python's softmax from 56% to 93% of copy); TMA=1 on
/// the same shape is today's `*_row` kernel, loading by TMA (so the switch is what changes it).
#[test]
fn row_kernels_without_tma_use_plain_loads_and_stores() {
    need_cuobjdump();
    for (op, dims) in [("softmax", vec![4096, 16384]), ("rms_norm", vec![4096, 8192]), ("layer_norm", vec![4096, 8192]), ("add_rms_norm", vec![4096, 8192])] {
        for tma in [0, 1] {
            let cs = cubins(op, DType::BF16, dims.clone(), vec![("TMA", tma)]);
            let (tag, cubin) = &cs[0];
            let function = if tma == 0 { format!("{op}_row_notma") } else { format!("{op}_row") };
            assert!(tag.contains(&format!("_{function}_0 ")), "{dims:?} TMA={tma}: {tag} is not {function}");
            let sass = sass_of(tag, cubin);
            let r = res(tag, cubin);
            let n = |p: &str| count(&sass, p);
            let (tma_ld, tma_st, ldg, stg) = (n("UTMALDG"), n("UTMASTG"), n("LDG.E.128"), n("STG.E.128"));
            eprintln!(
                "{tag}: {r:?}, {tma_ld} UTMALDG, {tma_st} UTMASTG, {ldg} LDG.E.128, {stg} STG.E.128, {} STL, {} BSSY, {} BAR.SYNC, loads back to back: {}",
                n("STL"),
                n("BSSY"),
                n("BAR.SYNC"),
                loads_back_to_back(&sass)
            );
            if tma == 0 {
                assert_eq!((tma_ld, tma_st), (0, 0), "{tag}: TMA left");
                assert!(ldg > 0 && stg > 0, "{tag}: no 128-bit LDG / STG");
                assert_eq!((n("LDG.E.U16"), n("STG.E.U16")), (0, 0), "{tag}: 16-bit accesses");
                assert_eq!((r.local + r.stack, n("STL")), (0, 0), "{tag}: spills");
                // softmax loads only x: all of it in one straight run (the norms' w / b loads are
                // scheduled after the reduction by tileiras, so their listing has two runs).
                if op == "softmax" {
                    assert!(loads_back_to_back(&sass), "{tag}: x is not loaded back to back");
                }
            } else {
                assert!(tma_ld > 0, "{tag}: TMA=1 should keep the TMA loads");
            }
        }
    }
}

/// softmax's row body takes exp(x - max) as exp2((x - max) * log2 e) with subnormals flushed: a bare
/// MUFU.EX2 per element (exp's lowering is a range-reduced expansion around each EX2: about 4 FFMA, 2 FMUL,
/// 2 SHF and 2 FADD per element), and the tuned 1 x 16384 W 8 OCC 3 tile keeps all in registers (with exp
/// it spilled 24 B to the stack: 5 STL after the max, 5 LDL; 1080 -> 656 instructions).
#[test]
fn softmax_row_exp_is_a_bare_ex2_without_spills() {
    need_cuobjdump();
    let tiles: Vec<(Vec<i32>, Vec<(&'static str, i64)>)> = vec![
        (vec![4096, 16384], vec![("TMA", 0), ("OCC", 3), ("W", 8)]),
        (vec![32768, 4096], vec![("TMA", 0), ("BR", 1), ("OCC", 8)]),
    ];
    for (dims, overrides) in tiles {
        for (tag, cubin) in cubins("softmax", DType::BF16, dims, overrides) {
            let r = res(&tag, &cubin);
            let sass = sass_of(&tag, &cubin);
            let (ex2, ffma) = (count(&sass, "MUFU.EX2"), count(&sass, "FFMA"));
            assert!(ex2 > 0, "{tag}: no MUFU.EX2 in the SASS");
            assert!(ffma <= ex2, "{tag}: {ffma} FFMA for {ex2} MUFU.EX2: exp is expanded, not a bare EX2");
            assert_eq!(r.local + r.stack, 0, "{tag}: spills: {r:?}");
        }
    }
}

/// A tile-order key (`order`, e.g. ("GM", 16)) runs the kernel `function` instead of the default one and
/// changes only which tile a block computes: the same threads and shared memory, the same count of each
/// opcode in `same`, and no spills.
fn assert_same_main_loop(op: &'static str, dims: Vec<i32>, order: (&'static str, i64), function: &str, same: &[&str]) {
    let (plain, ordered) = (cubins(op, DType::BF16, dims.clone(), vec![]), cubins(op, DType::BF16, dims, vec![order]));
    let ((pt, pc), (ot, oc)) = (&plain[0], &ordered[0]);
    assert!(ot.contains(function) && !pt.contains(function), "{pt} / {ot}");
    let (rp, ro) = (res(pt, pc), res(ot, oc));
    assert_eq!((ro.threads, ro.shared, ro.local + ro.stack), (rp.threads, rp.shared, 0), "{rp:?} / {ro:?}");
    let (sp, so) = (sass_of(pt, pc), sass_of(ot, oc));
    for opcode in same {
        assert_eq!(count(&so, opcode), count(&sp, opcode), "{opcode}: {ot} vs {pt}");
    }
}

/// bmm's grouped order (GM) at the bench's 16 x 2048^3.
#[test]
fn bmm_grouped_keeps_the_main_loop() {
    need_cuobjdump();
    assert_same_main_loop("bmm", vec![16, 2048, 2048, 2048], ("GM", 16), "bmm_grouped", &["HGMMA", "UTMALDG", "UTMASTG"]);
}

/// matmul's grouped order (GM: bmm's `bmm_grouped` on one entry) at the bench's 8192^3.
#[test]
fn matmul_grouped_keeps_the_main_loop() {
    need_cuobjdump();
    assert_same_main_loop("matmul", vec![8192, 8192, 8192], ("GM", 16), "bmm_grouped", &["HGMMA", "UTMALDG", "UTMASTG"]);
}

/// attention's query-block order (QO 1) on the bench's B4 H32 S4096 prefill (D 64 and 128, causal or not).
#[test]
fn attention_by_query_keeps_the_main_loop() {
    need_cuobjdump();
    for (d, causal) in [(128, 0), (128, 1), (64, 0)] {
        assert_same_main_loop("attention", vec![4, 32, 4096, d, causal], ("QO", 1), "attention_by_query",
                              &["HGMMA", "UTMALDG", "MUFU.EX2"]);
    }
}

/// The bench configurations' resources (prints a markdown table; `--ignored --nocapture`).
#[test]
#[ignore]
fn resource_table() {
    need_cuobjdump();
    let mut cases: Vec<(&'static str, DType, Vec<i32>)> = vec![
        ("vector_add", DType::BF16, vec![1 << 28]),
        ("transpose", DType::BF16, vec![8192, 8192]),
        ("softmax", DType::BF16, vec![4096, 16384]),
        ("softmax", DType::BF16, vec![32768, 4096]),
        ("rms_norm", DType::BF16, vec![16384, 4096]),
        ("rms_norm", DType::BF16, vec![4096, 8192]),
        ("layer_norm", DType::BF16, vec![16384, 4096]),
        ("layer_norm", DType::BF16, vec![4096, 8192]),
        ("silu_and_mul", DType::BF16, vec![4096, 14336]),
        ("rope", DType::BF16, vec![4, 32, 4096, 128]),
        ("matmul", DType::BF16, vec![4096, 4096, 4096]),
        ("matmul", DType::F32, vec![4096, 4096, 4096]),
        ("bmm", DType::BF16, vec![16, 2048, 2048, 2048]),
        ("attention", DType::BF16, vec![4, 32, 4096, 128, 0]),
        ("attention", DType::BF16, vec![4, 32, 4096, 128, 1]),
        ("attention", DType::BF16, vec![4, 32, 4096, 64, 0]),
        ("attention", DType::BF16, vec![4, 32, 4096, 64, 1]),
    ];
    let mut alternatives: Vec<(&'static str, DType, Vec<i32>, Vec<(&'static str, i64)>)> = vec![
        // What the defaults replaced (GAPS.md), for comparison.
        ("softmax", DType::BF16, vec![4096, 16384], vec![("BN", 2048), ("OCC", 0)]),
        ("bmm", DType::BF16, vec![16, 2048, 2048, 2048], vec![("BN", 128), ("W", 0)]),
        ("attention", DType::BF16, vec![4, 32, 4096, 128, 0], vec![("BM", 128), ("BN", 64), ("OCC", 0)]),
        ("attention", DType::BF16, vec![4, 32, 4096, 64, 0], vec![("BM", 128), ("BN", 128), ("OCC", 0)]),
        ("attention", DType::BF16, vec![4, 32, 4096, 64, 0], vec![("BM", 128), ("BN", 128), ("OCC", 1)]),
        ("attention", DType::BF16, vec![4, 32, 4096, 64, 0], vec![("BM", 64), ("BN", 64), ("OCC", 2)]),
        ("rope", DType::BF16, vec![4, 32, 4096, 128], vec![("OCC", 4)]),
        ("rope", DType::BF16, vec![4, 32, 4095, 128], vec![]),
        ("rope", DType::BF16, vec![4, 32, 4096, 96], vec![]),
        ("silu_and_mul", DType::BF16, vec![4096, 14336 + 64], vec![]),
        ("rms_norm", DType::BF16, vec![16384, 4096], vec![("BR", 1)]),
        ("layer_norm", DType::BF16, vec![16384, 4096], vec![("BR", 1)]),
        ("softmax", DType::BF16, vec![32768, 4096], vec![("BR", 1)]),
        ("softmax", DType::BF16, vec![4096, 16384], vec![("W", 8)]),
        ("rope", DType::BF16, vec![4, 32, 4096, 128], vec![("BS", 8), ("OCC", 8)]),
        // Without TMA (the `*_row_notma` kernels: plain LDG / STG, 128 threads).
        ("softmax", DType::BF16, vec![4096, 16384], vec![("TMA", 0)]),
        ("softmax", DType::BF16, vec![32768, 4096], vec![("TMA", 0)]),
        ("rms_norm", DType::BF16, vec![16384, 4096], vec![("TMA", 0)]),
        ("rms_norm", DType::BF16, vec![4096, 8192], vec![("TMA", 0)]),
        ("layer_norm", DType::BF16, vec![16384, 4096], vec![("TMA", 0)]),
        ("layer_norm", DType::BF16, vec![4096, 8192], vec![("TMA", 0)]),
        // Without TMA, 8 worker warps (256 threads; config_space's W 8 rows).
        ("softmax", DType::BF16, vec![4096, 16384], vec![("TMA", 0), ("OCC", 3), ("W", 8)]),
        ("layer_norm", DType::BF16, vec![4096, 8192], vec![("TMA", 0), ("OCC", 3), ("W", 8)]),
        ("layer_norm", DType::BF16, vec![16384, 4096], vec![("TMA", 0), ("BR", 2), ("OCC", 4), ("W", 8)]),
        // Without TMA, 8 rows of 4096 per SM (OCC 8: 64 registers at 128 threads).
        ("softmax", DType::BF16, vec![32768, 4096], vec![("TMA", 0), ("BR", 1), ("OCC", 8)]),
        ("layer_norm", DType::BF16, vec![16384, 4096], vec![("TMA", 0), ("BR", 1), ("OCC", 8)]),
        ("rms_norm", DType::BF16, vec![16384, 4096], vec![("TMA", 0), ("BR", 1), ("OCC", 8)]),
    ];
    let mut all: Vec<_> = cases.drain(..).map(|(o, d, x)| (o, d, x, vec![])).collect();
    all.append(&mut alternatives);
    println!("| kernel | dims | config | thr/CTA | REG | SHARED | LOCAL | STACK | TMA ld | 128b ld | U16 ld |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (op, dtype, dims, overrides) in all {
        for (tag, cubin) in cubins(op, dtype, dims.clone(), overrides) {
            let r = res(&tag, &cubin);
            let a = access(&sass_of(&tag, &cubin));
            let (name, cfg) = tag.split_once(' ').unwrap();
            println!(
                "| {name} | {dims:?} | {cfg} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.threads, r.reg, r.shared, r.local, r.stack, a.tma_loads, a.wide_loads, a.scalar16_loads
            );
        }
    }
}

/// The decode attention kernels' resources at the bench's Llama-3.1-8B shapes (H 32, Hkv 8, S 1, Sk 4096,
/// D 128; B 1 splits, B 64 does not), with the configuration a call resolves (`--ignored --nocapture`).
#[test]
#[ignore]
fn decode_attention_resources() {
    need_cuobjdump();
    with_stack(|| {
        for (b, occ) in [(1, 0), (16, 0), (64, 0), (16, 2), (64, 2)] {
            let dims = [b, 32, 1, 128, 8, 4096];
            let named = [("S", 1i64), ("D", 128)];
            // a config's hints hold only where its BM, BN are not clamped (schedule): give the decode tile
            let given = if occ > 0 { vec![("BM".to_string(), 16), ("BN".to_string(), 128), ("OCC".to_string(), occ)] } else { vec![] };
            let cfg = config::resolve("attention", DType::BF16, &named, &given).unwrap();
            for (i, spec) in ops::attention::specs_for(DType::BF16, &cfg, &dims, true, true).into_iter().enumerate() {
                let tag = format!("decode_B{b}_OCC{occ}_{}_{i}", spec.function);
                let bc = bytecode(&spec, DType::BF16, ARCH).unwrap_or_else(|e| panic!("{tag}: {e}"));
                let cubin = assemble_cubin(&bc, ARCH, &tag).unwrap_or_else(|e| panic!("{tag}: {e}"));
                let r = res(&tag, &cubin);
                let sass = sass_of(&tag, &cubin);
                let count = |op: &str| sass.lines().filter(|l| l.contains(op)).count();
                println!(
                    "{tag} {:?}: {} threads, {} registers, {} B shared, {} B local, {} B stack; {:?}, {} HMMA, {} BAR.SYNC, {} MEMBAR",
                    spec.generics, r.threads, r.reg, r.shared, r.local, r.stack, access(&sass), count("HMMA"), count("BAR.SYNC"), count("MEMBAR")
                );
            }
        }
    });
}

/// transpose past 65535 row tiles (or OUT_ROWS=1) folds its tile grid into grid x (a mapped partition,
/// rust/src/ops/transpose.rs): the flat-index loop must not cost the tiled access, i.e. tiles still
/// move by TMA or 128-bit accesses, never 16 bits at a time, as in the 2-D kernel.
#[test]
fn folded_transpose_moves_whole_tiles() {
    need_cuobjdump();
    // the bench shape in both tile orders (the 16-bit default OUT_ROWS=1 takes the mapped kernel), the folded shape
    for (dims, cfg) in [(vec![8192, 8192], vec![]), (vec![8192, 8192], vec![("OUT_ROWS", 0)]), (vec![65536 * 128 + 64, 64], vec![])] {
        for (tag, cubin) in cubins("transpose", DType::BF16, dims.clone(), cfg.clone()) {
            let sass = sass_of(&tag, &cubin);
            let a = access(&sass);
            let stores = |p: &str| sass.lines().filter(|l| l.contains(p)).count();
            let (tma_st, wide_st, st16) = (stores("UTMASTG"), stores("STG.E.128"), stores("STG.E.U16"));
            eprintln!("{tag} {dims:?}: {a:?}, {tma_st} UTMASTG, {wide_st} STG.E.128, {st16} STG.E.U16");
            assert!(a.tma_loads + a.wide_loads > 0 && a.scalar16_loads == 0, "{tag}: {a:?}");
            assert!(tma_st + wide_st > 0 && st16 == 0, "{tag}: {tma_st} UTMASTG, {wide_st} STG.E.128, {st16} STG.E.U16");
        }
    }
}

//! repro/cutile_rs/inbounds_with_padding.rs compiled for sm_90 by the pinned tileiras (no GPU): it must still
//! show what docs/upstream/tile-ir-inbounds-with-padding.md states. If this fails after a toolchain update,
//! the compiler changed: update the report, and attention_combine (rust/src/ops/attention.rs), which
//! declares no axis in bounds because of it.

use tilerosetta_cutile_rs::args::DType;
use tilerosetta_cutile_rs::compile::{assemble_cubin, bytecode};
use tilerosetta_cutile_rs::ops::{ArgView, KernelSpec};

include!("../../repro/cutile_rs/inbounds_with_padding.rs");

/// tileiras' verdict on one entry: the cubin's size, or its error.
fn compile(function: &'static str) -> Result<usize, String> {
    let spec = KernelSpec {
        ast: repro::__module_ast_self,
        module: "repro",
        function,
        generics: vec![],
        // out (8, 16); x (1, 9, 8): the 16-row tile of the middle axis passes its 9 rows.
        args: vec![ArgView::contiguous("out", 0, &[8, 16]), ArgView::contiguous("x", 1, &[1, 9, 8])],
        options: Default::default(),
    };
    let tag = format!("upstream_inbounds_{function}");
    let run = move || bytecode(&spec, DType::F32, "sm_90").and_then(|bc| assemble_cubin(&bc, "sm_90", &tag)).map(|c| c.len());
    std::thread::Builder::new().stack_size(64 << 20).spawn(run).unwrap().join().unwrap()
}

#[test]
fn an_in_bounds_axis_on_a_padded_view_fails_to_compile() {
    for f in ["padded_fff", "unpadded_tft"] {
        let r = compile(f);
        assert!(r.is_ok(), "{f}: {r:?}");
    }
    let err = compile("padded_tft").expect_err("tileiras now compiles padded_tft: update the report");
    assert!(err.contains("exit status: 5") && err.contains("failed to compile Tile IR program"), "{err}");
}

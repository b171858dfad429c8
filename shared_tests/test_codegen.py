"""The native op tables (C++ header, Rust module, Julia table) are generated from the specs and committed:
a spec change without `make generate` fails here, before any native build compiles stale signatures."""

from __future__ import annotations

import re

from tilerosetta import codegen
from tilerosetta.specs import SPECS


def test_generated_files_are_current():
    assert codegen.stale() == [], "run `make generate` (python -m tilerosetta.codegen) and commit the result"


def test_stale_check_can_fail(tmp_path):
    for path, text in codegen.render().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert codegen.stale(tmp_path) == []
    edited = next(iter(codegen.TARGETS))
    (tmp_path / edited).write_text((tmp_path / edited).read_text().replace('"x"', '"y"', 1))
    assert codegen.stale(tmp_path) == [edited]


def test_every_spec_is_in_every_table():
    text = codegen.render()
    for op, spec in SPECS.items():
        names = [*spec.inputs, *spec.outputs]
        # C++: the op's row lists its tensors in call order
        row = next(line for line in text["cpp/generated/tr_ops.h"].splitlines() if line.strip().startswith(f'{{"{op}",'))
        assert re.findall(r'\{"(\w+)", \d', row)[1:] == names, row
        assert f"TR_{op.upper()}_KERNELS(X)" in text["cpp/generated/tr_ops.h"]
        assert f" {op}" in text["cpp/generated/tr_ops.cmake"]
        assert f'name: "{op}"' in text["rust/src/generated.rs"]
        assert f'"{op}" => (inputs=' in text["julia/src/generated.jl"]


def test_symbolic_dims_in_first_appearance_order():
    e = codegen.entry(SPECS["silu_and_mul"])
    assert e.dims == ("M", "H") and e.tensors[0] == ("x", ("M", "2*H"), False)
    assert codegen.symbols("Hkv*G") == ["Hkv", "G"] and codegen.symbols("2*H") == ["H"]


def test_family_ops_take_their_family_table_in_cpp():
    """A family op's TR_<OP>_KERNELS and key names are generated (tr_families.h); an op of no family has
    its own in the hand-written tr_kernels.h. Checked here, before a long nvcc build would find a gap."""
    families = codegen.render()["cpp/generated/tr_families.h"]
    hand = (codegen.ROOT / "cpp/include/tr_kernels.h").read_text()
    assert '#include "../generated/tr_families.h"' in hand
    for op, spec in SPECS.items():
        define = f"#define TR_{op.upper()}_KERNELS(X)"
        if spec.family:
            assert f"{define} TR_FAMILY_{spec.family.upper()}_KERNELS(X, {op})" in families
            assert f"Y({op}, TR_FAMILY_{spec.family.upper()}_CONFIG_KEYS)" in families
            assert define not in hand and f"Y({op}," not in hand, f"{op}: declared by hand and by its family"
            assert f"#define TR_FAMILY_{spec.family.upper()}_KERNELS(X, op)" in hand
        else:
            assert define in hand and f"Y({op}," in hand, f"{op} (no family): no kernel list in tr_kernels.h"


def test_rust_ops_list_finds_kernel_modules_by_name(tmp_path):
    """The generated `ops!` line lists the spec ops whose rust/src/ops/<op>.rs declares DIMS: a module
    without DIMS (dispatched by hand, as attention) or no module at all is left out."""
    ops_dir = tmp_path / codegen.RUST_OPS_DIR
    ops_dir.mkdir(parents=True)
    (ops_dir / "softmax.rs").write_text("pub const DIMS: &[&str] = &[\"M\", \"N\"];\n")
    (ops_dir / "attention.rs").write_text("pub fn plan() {}\n")
    (ops_dir / "not_an_op.rs").write_text("pub const DIMS: &[&str] = &[];\n")
    assert codegen.rust_uniform_ops(codegen.table(), tmp_path) == ["softmax"]
    real = codegen.rust_uniform_ops(codegen.table())
    assert "attention" not in real and set(real) == set(SPECS) - {"attention"}
    assert f"ops!({', '.join(real)});" in codegen.render()["rust/src/ops/generated_ops.rs"]


def test_julia_table_names_each_family_op():
    text = codegen.render()["julia/src/generated.jl"]
    line = next(line for line in text.splitlines() if line.startswith("const OP_FAMILY"))
    for op, spec in SPECS.items():
        assert (f'"{op}" => "{spec.family}"' in line) == bool(spec.family), op


def test_a_new_family_op_needs_no_table_edit(monkeypatch):
    """The dry run of docs/ADDING_AN_OP.md for the generated side: a new "rows" spec (here a copy of
    add_rms_norm under another name) appears in every generated table, with its family's C++ kernel
    list and key names and Julia family, and no hand-written table is needed."""
    new = type("NewRowOp", (type(SPECS["add_rms_norm"]),), {"name": "new_row_op", "order": 10**6})()
    monkeypatch.setattr(codegen, "SPECS", {**SPECS, "new_row_op": new})
    text = codegen.render()
    assert "#define TR_NEW_ROW_OP_KERNELS(X) TR_FAMILY_ROWS_KERNELS(X, new_row_op)" in text["cpp/generated/tr_families.h"]
    assert "Y(new_row_op, TR_FAMILY_ROWS_CONFIG_KEYS)" in text["cpp/generated/tr_families.h"]
    assert "TR_NEW_ROW_OP_KERNELS(X)" in text["cpp/generated/tr_ops.h"] and " new_row_op" in text["cpp/generated/tr_ops.cmake"]
    assert 'name: "new_row_op"' in text["rust/src/generated.rs"] and '"new_row_op" => "rows"' in text["julia/src/generated.jl"]
    # no rust/src/ops/new_row_op.rs yet: not in the ops! line until its file exists
    assert "new_row_op" not in text["rust/src/ops/generated_ops.rs"]

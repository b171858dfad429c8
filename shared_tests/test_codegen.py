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

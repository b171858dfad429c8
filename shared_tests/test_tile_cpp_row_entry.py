"""tile_cpp's row entry points without the module: which of a "rows" config's two entries (the one-tile
`<name>`, the multi-chunk `<name>_loop`; cpp/kernels/common.cuh, TR_ROW_ENTRIES) a call runs.

The module decides it itself (row_entry in cpp/src/ops.cpp); test_tile_cpp_module.py checks, with the
module built, that its choice and backends.tile_cpp.row_entry agree. This file runs on any machine.
"""

from __future__ import annotations

import pytest
import torch

from tilerosetta.backends.tile_cpp import ROW_LOOP_MAX_TN, TileCppBackend, row_entry
from tilerosetta.specs import OP_NAMES, SPECS

ROW_OPS = tuple(op for op in OP_NAMES if SPECS[op].family == "rows")


def test_the_rows_family_is_the_four_row_ops():
    assert set(ROW_OPS) == {"softmax", "rms_norm", "layer_norm", "add_rms_norm"}


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("tn", [512, 1024, 4096])
def test_rows_wider_than_the_tile_take_the_loop_entry(op, tn):
    name, cfg = f"{op}_bf16_1_{tn}_4_0", {"TM": 1, "TN": tn, "OCC": 4, "W": 0}
    for n in (1, tn - 1, tn):
        assert row_entry(op, name, cfg, {"M": 3, "N": n}) == name
    for n in (tn + 1, tn + 8, 4 * tn):
        assert row_entry(op, name, cfg, {"M": 3, "N": n}) == name + "_loop"


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("tn", [8192, 16384])
def test_wide_tiles_have_no_loop_so_wider_rows_are_refused(op, tn):
    # Their chunk loop is not compiled (TR_ROW_LOOP_MAX_TN, cpp/include/tr_kernels.h): the row must fit.
    name, cfg, b = f"{op}_bf16_1_{tn}_2_0", {"TM": 1, "TN": tn, "OCC": 2, "W": 0}, TileCppBackend()
    assert row_entry(op, name, cfg, {"M": 3, "N": tn}) == name
    assert b.config_refusal(op, torch.bfloat16, {"M": 3, "N": tn}, cfg) is None
    with pytest.raises(ValueError, match=rf"tile_cpp\.{op}: argument 'x': rows of N={tn + 1} columns .*TN={tn}"):
        row_entry(op, name, cfg, {"M": 3, "N": tn + 1})
    assert f"TN <= {ROW_LOOP_MAX_TN}" in b.config_refusal(op, torch.bfloat16, {"M": 3, "N": tn + 1}, cfg)


def test_other_ops_have_one_entry():
    assert row_entry("matmul", "matmul_bf16_128_256_64_8_0", {"TM": 128, "TN": 256, "TK": 64, "W": 8, "P": 0},
                     {"M": 4096, "N": 4096, "K": 4096}) == "matmul_bf16_128_256_64_8_0"


@pytest.mark.parametrize("op", ROW_OPS)
def test_default_configs_send_every_case_to_an_entry_that_covers_it(op):
    # The adapter's built-in defaults over every conformance and bench case: the one-tile entry only
    # where the row fits the tile, and the cases use both entries (so conformance checks both).
    b, spec, seen = TileCppBackend(), SPECS[op], set()
    for dtype in spec.dtypes:
        for case in spec.cases + spec.bench_cases:
            dims = dict(case.dims)
            cfg = b.builtin_config(op, dtype, dims)
            entry = row_entry(op, "k", cfg, dims)
            assert entry == ("k_loop" if dims["N"] > cfg["TN"] else "k"), (dtype, dims, cfg)
            seen.add(entry)
    assert seen == {"k", "k_loop"}, seen

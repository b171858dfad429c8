"""cutile_jl checks that need no Julia: the package's .jl files parse, every op has a kernel file and a
test, and the Julia host functions take exactly the keywords the Python adapter sends."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tilerosetta.specs import OP_NAMES, SPECS

ts = pytest.importorskip("tree_sitter", reason="tree-sitter not installed (pip install -r requirements.txt)")
tsj = pytest.importorskip("tree_sitter_julia", reason="tree-sitter-julia not installed (pip install -r requirements.txt)")

JULIA = Path(__file__).resolve().parents[1] / "julia"
JL_FILES = sorted(JULIA.rglob("*.jl"))
PARSER = ts.Parser(ts.Language(tsj.language()))


def parse_problems(source: bytes) -> list[str]:
    """ERROR and MISSING nodes of a parse, as 'line:col type' strings (empty = clean parse)."""
    problems = []
    stack = [PARSER.parse(source).root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            problems.append(f"{node.start_point[0] + 1}:{node.start_point[1] + 1} "
                            f"{'MISSING ' + node.type if node.is_missing else 'ERROR'}")
        stack.extend(node.children)
    return problems


def function_defs(source: bytes) -> dict[str, object]:
    """name -> function_definition node, for top-level `function name(...) ... end` forms."""
    out = {}
    for node in PARSER.parse(source).root_node.children:
        if node.type != "function_definition":
            continue
        sig = next(c for c in node.children if c.type == "signature")
        call = sig.children[0]
        while call.type != "call_expression":  # `f(...) where {T}` wraps the call
            call = call.children[0]
        out[call.children[0].text.decode()] = call
    return out


def keyword_params(call) -> set[str]:
    """Names of the keyword parameters (after `;`) of a call_expression signature."""
    args = next(c for c in call.children if c.type == "argument_list")
    names, after_semicolon = set(), False
    for c in args.children:
        if c.type == ";":
            after_semicolon = True
        elif after_semicolon and c.type in ("named_argument", "typed_expression", "identifier"):
            lhs = c
            while lhs.type != "identifier":  # named_argument -> typed_expression -> identifier
                lhs = lhs.children[0]
            names.add(lhs.text.decode())
    return names


def test_julia_sources_exist():
    assert len(JL_FILES) >= 13, [str(p) for p in JL_FILES]


@pytest.mark.parametrize("path", JL_FILES, ids=lambda p: str(p.relative_to(JULIA)))
def test_jl_file_parses_cleanly(path):
    problems = parse_problems(path.read_bytes())
    assert not problems, f"{path}: {problems[:5]}"


@pytest.mark.parametrize("snippet", [
    b"function f(x)\n    x + 1\n",                     # missing `end`
    b"y = ct.load(x; index=(1, shape=(2,))\n",          # unbalanced parentheses
    b"while j <= n\n  j += 1\nend end\n",               # stray `end`
])
def test_parse_check_catches_broken_julia(snippet):
    assert parse_problems(snippet), "a broken snippet parsed cleanly: the parse check cannot fail"


@pytest.mark.parametrize("op", OP_NAMES)
def test_op_has_kernel_and_host_function(op):
    path = JULIA / "src" / "ops" / f"{op}.jl"
    assert path.is_file(), f"missing kernel file {path}"
    defs = function_defs(path.read_bytes())
    assert f"{op}!" in defs, f"{path} defines no host function {op}!; has {sorted(defs)}"
    assert any(n.endswith("_kernel") for n in defs), f"{path} defines no *_kernel function"
    # TileRosetta.jl includes src/ops/<op>.jl for every name of the generated OP_NAMES and maps it to <op>!
    module = (JULIA / "src" / "TileRosetta.jl").read_text()
    assert 'include("generated.jl")' in module and 'include(joinpath("ops", op * ".jl"))' in module
    assert 'Symbol(op, "!")' in module
    generated = (JULIA / "src" / "generated.jl").read_text()
    names = next((ln for ln in generated.splitlines() if ln.startswith("const OP_NAMES")), "")
    assert f'"{op}" => (inputs=' in generated and f'"{op}"' in names, f"OP_NAMES lacks {op}"


@pytest.mark.parametrize("op", OP_NAMES)
def test_op_is_tested_in_julia(op):
    tests = (JULIA / "test" / "runtests.jl").read_text()
    assert f'@testset "{op}' in tests and f"{op}!(" in tests, f"julia/test/runtests.jl has no device test of {op}"
    assert f"ref_{op}(" in tests, f"julia/test/runtests.jl has no CPU reference for {op}"


@pytest.mark.parametrize("op", OP_NAMES)
def test_adapter_keywords_match_julia_signature(op):
    """Every keyword the adapter sends (spec params + tile sizes) is a keyword of the Julia host fn."""
    from tilerosetta.backends.cutile_jl import op_tiles

    call = function_defs((JULIA / "src" / "ops" / f"{op}.jl").read_bytes())[f"{op}!"]
    julia_kw = keyword_params(call)
    sent = set(SPECS[op].params) | set(op_tiles(op)["default"])
    assert sent <= julia_kw, f"{op}!: adapter sends {sorted(sent - julia_kw)} that Julia does not take"


def test_keyword_extraction_can_fail():
    call = function_defs(b"function g!(x; tile::Integer=4)\n    x\nend\n")["g!"]
    assert keyword_params(call) == {"tile"}


def test_project_toml():
    project = tomllib.loads((JULIA / "Project.toml").read_text())
    assert project["name"] == "TileRosetta" and len(project["uuid"]) == 36
    for dep in ("CUDA", "cuTile", "BFloat16s", "PythonCall", "TOML"):
        assert dep in project["deps"], dep
    compat = project["compat"]
    assert compat["julia"] == "1.11" and compat["CUDA"] == "6" and compat["cuTile"] == "1"
    assert "Test" in project["targets"]["test"]


def test_tile_table_covers_every_op():
    """Each section is an op's or a kernel family's; each op has its own or its family's (op_tiles)."""
    from tilerosetta.backends.cutile_jl import op_tiles

    table = tomllib.loads((JULIA / "tiles.toml").read_text())
    families = {SPECS[op].family for op in OP_NAMES} - {""}
    assert set(table) <= set(OP_NAMES) | families, sorted(set(table) - set(OP_NAMES) - families)
    assert "rows" in table and op_tiles("add_rms_norm") == table["rows"] == op_tiles("softmax")
    for op in OP_NAMES:
        entry = op_tiles(op)
        symbols = {e for shape in {**SPECS[op].inputs, **SPECS[op].outputs}.values() for e in shape}
        for key, size in entry["default"].items():
            assert size & (size - 1) == 0, f"{op}.{key}={size} is not a power of two"
            assert entry["covers"][key] in symbols, f"{op}.covers.{key} names no spec dimension"
        for key, values in entry.get("space", {}).items():
            assert key in entry["default"] and all(v & (v - 1) == 0 for v in values), (op, key)

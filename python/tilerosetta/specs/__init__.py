"""The op set: one spec module per op, the single source of truth for every backend."""

from tilerosetta.specs.add_rms_norm import AddRmsNorm
from tilerosetta.specs.attention import Attention
from tilerosetta.specs.base import (DTYPE_NAMES, FLOAT_DTYPES, HALF_DTYPES, Case, OpSpec, dtype_name,
                                    parse_dtype, rel_error)
from tilerosetta.specs.bmm import Bmm
from tilerosetta.specs.layer_norm import LayerNorm
from tilerosetta.specs.matmul import Matmul
from tilerosetta.specs.rms_norm import RmsNorm
from tilerosetta.specs.rope import Rope
from tilerosetta.specs.silu_and_mul import SiluAndMul
from tilerosetta.specs.softmax import Softmax
from tilerosetta.specs.transpose import Transpose
from tilerosetta.specs.vector_add import VectorAdd

SPECS: dict[str, OpSpec] = {s.name: s for s in (
    VectorAdd(), Transpose(), Softmax(), RmsNorm(), LayerNorm(), SiluAndMul(), Rope(), Matmul(), Bmm(),
    Attention(), AddRmsNorm())}
OP_NAMES = tuple(SPECS)


def family_ops(family: str) -> tuple[str, ...]:
    """The ops of one kernel family (OpSpec.family), in the specs' order."""
    return tuple(op for op, spec in SPECS.items() if spec.family == family)


def get_spec(op: str) -> OpSpec:
    try:
        return SPECS[op]
    except KeyError:
        raise KeyError(f"unknown op '{op}': expected one of {list(SPECS)}") from None


__all__ = ["SPECS", "OP_NAMES", "family_ops", "get_spec", "Case", "OpSpec", "FLOAT_DTYPES", "HALF_DTYPES",
           "DTYPE_NAMES", "dtype_name", "parse_dtype", "rel_error"]

"""A request for the cutile_rs extension (launch / validate / prepare arguments) with fake aligned, disjoint
pointers, built from the op's spec: validation never dereferences them, so CPU tests can check what Rust
accepts and refuses."""

from __future__ import annotations

import math

from tilerosetta.specs import SPECS


def fake_request(op, dtype="fp32", **shapes):
    arrays, ptr = [], 1 << 20
    for name in list(SPECS[op].inputs) + list(SPECS[op].outputs):
        shape = shapes[name]
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        arrays.append((name, ptr, list(shape), strides, dtype, "cuda:0"))
        ptr += (math.prod(shape) * 4 + 4095) // 4096 * 4096 + 4096
    # every spec param as the adapter sends it: a float (causal 0/1; scale None resolved, here 0.125)
    scalars = {k: 0.125 if v is None else float(v) for k, v in SPECS[op].full_params({}).items()}
    return [op, dtype, 0, 0, arrays, scalars, {}]

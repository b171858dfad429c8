"""
    TileRosetta

The TileRosetta ops (OP_NAMES, generated from the specs) written in cuTile.jl.

Layout: every host function takes Julia arrays that alias row-major torch tensors, so a torch
tensor of shape (d1, ..., dn) arrives as an (dn, ..., d1) column-major array. The kernels are
written for that layout (the contiguous torch last dim is Julia's first dim); nothing is
transposed or copied. Arguments come in the spec's order: inputs, then outputs (destination
passing); tile sizes are keywords whose defaults come from `tiles.toml`.
"""
module TileRosetta

using CUDA
import cuTile as ct
using BFloat16s: BFloat16
import TOML

include("config.jl")
include("interop.jl")

# OP_NAMES and OP_TABLE, generated from the specs (`python -m tilerosetta.codegen`): every op of the
# specs has its kernel file src/ops/<op>.jl defining the host function `<op>!`.
include("generated.jl")
for op in OP_NAMES
    include(joinpath("ops", op * ".jl"))
end

"Op name => host function, in the spec's order. The Python adapter dispatches through this."
const OPS = Dict{String,Function}(op => getfield(@__MODULE__, Symbol(op, "!")) for op in OP_NAMES)

for op in OP_NAMES
    @eval export $(Symbol(op, "!"))
end

end # module

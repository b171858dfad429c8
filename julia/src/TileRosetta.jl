"""
    TileRosetta

The ten TileRosetta ops (vector_add, transpose, softmax, rms_norm, layer_norm, silu_and_mul, rope,
matmul, bmm, attention) written in cuTile.jl.

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

include("ops/vector_add.jl")
include("ops/transpose.jl")
include("ops/softmax.jl")
include("ops/rms_norm.jl")
include("ops/layer_norm.jl")
include("ops/silu_and_mul.jl")
include("ops/rope.jl")
include("ops/matmul.jl")
include("ops/bmm.jl")
include("ops/attention.jl")

"Op name => host function, in the spec's order. The Python adapter dispatches through this."
const OPS = Dict{String,Function}(
    "vector_add" => vector_add!,
    "transpose" => transpose!,
    "softmax" => softmax!,
    "rms_norm" => rms_norm!,
    "layer_norm" => layer_norm!,
    "silu_and_mul" => silu_and_mul!,
    "rope" => rope!,
    "matmul" => matmul!,
    "bmm" => bmm!,
    "attention" => attention!,
)

export vector_add!, transpose!, softmax!, rms_norm!, layer_norm!, silu_and_mul!, rope!, matmul!,
       bmm!, attention!

end # module

# Tile sizes: read from ../tiles.toml, the one table shared with the Python adapter.

const TILES_PATH = joinpath(@__DIR__, "..", "tiles.toml")
const TILES = TOML.parsefile(TILES_PATH)

dtype_key(::Type{Float32}) = "fp32"
dtype_key(::Type{Float16}) = "fp16"
dtype_key(::Type{BFloat16}) = "bf16"
dtype_key(T::Type) = throw(ArgumentError("TileRosetta: element type $T is not supported"))

"Smallest power of two >= n (n >= 1)."
next_pow2(n::Integer) = n <= 1 ? 1 : 1 << (8 * sizeof(Int) - leading_zeros(Int(n) - 1))

"""
    op_tiles(op) -> Dict

The tile-table entry of `op`: its own `[op.*]` sections, else those of its kernel family
(`OP_FAMILY`, generated from the specs: the row ops share `[rows.*]`).
"""
op_tiles(op::AbstractString) = haskey(TILES, op) ? TILES[op] : TILES[OP_FAMILY[op]]

"""
    tiles(op, T, dims) -> NamedTuple

Tile sizes for `op` on element type `T`, for a problem whose spec dimensions are `dims` (torch
names, e.g. `(M=.., N=..)`): the table's default, overridden per dtype, then clamped to the
problem's next power of two and raised to the op's floor.
"""
function tiles(op::AbstractString, T::Type, dims::NamedTuple)
    table = op_tiles(op)
    sizes = merge(Dict{String,Any}(table["default"]), get(table, dtype_key(T), Dict{String,Any}()))
    covers = table["covers"]
    floors = get(table, "floor", Dict{String,Any}())
    out = Pair{Symbol,Int}[]
    for key in sort!(collect(keys(sizes)))
        size = Int(sizes[key])
        extent = getproperty(dims, Symbol(covers[key]))
        size = max(min(size, next_pow2(extent)), Int(get(floors, key, 1)))
        push!(out, Symbol(key) => size)
    end
    return (; out...)
end

# transpose: torch x (M, N) -> out (N, M).
#
# In Julia x is an (N, M) array and out an (M, N) array. Block (i, j) loads the (tile_n, tile_m)
# tile at (i, j) of x, transposes it in registers and stores it at (j, i) of out, so both the read
# and the write walk the contiguous first dim. Edge tiles: zero padding on load, clipped store.

function transpose_kernel(x::ct.TileArray{T,2}, out::ct.TileArray{T,2}, tn::Int, tm::Int) where {T}
    i = ct.bid(1)
    j = ct.bid(2)
    t = ct.load(x; index=(i, j), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero)
    ct.store(out; index=(j, i), tile=transpose(t))
    return
end

function transpose!(x::AbstractMatrix{T}, out::AbstractMatrix{T};
                    tile_m::Integer=tiles("transpose", T, (M=size(x, 2), N=size(x, 1))).tile_m,
                    tile_n::Integer=tiles("transpose", T, (M=size(x, 2), N=size(x, 1))).tile_n) where {T}
    n, m = size(x)
    grid = (cld(n, tile_n), cld(m, tile_m))
    ct.launch(transpose_kernel, grid, x, out, ct.Constant(Int(tile_n)), ct.Constant(Int(tile_m)))
    return out
end

# vector_add: out = a + b over 1-D arrays of any length.
#
# One block per `tile` elements. The last tile may be partial: its loads pad with zero and the
# store drops out-of-bounds lanes, so lengths need not be multiples of the tile.

function vector_add_kernel(a::ct.TileArray{T,1}, b::ct.TileArray{T,1}, out::ct.TileArray{T,1},
                           tile::Int) where {T}
    i = ct.bid(1)
    ta = ct.load(a; index=i, shape=(tile,), padding_mode=ct.PaddingMode.Zero)
    tb = ct.load(b; index=i, shape=(tile,), padding_mode=ct.PaddingMode.Zero)
    ct.store(out; index=i, tile=ta + tb)
    return
end

function vector_add!(a::AbstractVector{T}, b::AbstractVector{T}, out::AbstractVector{T};
                     tile::Integer=tiles("vector_add", T, (N=length(out),)).tile) where {T}
    ct.launch(vector_add_kernel, cld(length(out), tile), a, b, out, ct.Constant(Int(tile)))
    return out
end

# silu_and_mul (SwiGLU): torch x (M, 2H) -> out (M, H) = silu(x[:, :H]) * x[:, H:].
#
# Julia x is (2H, M): the gate is rows 1:H and the up projection rows H+1:2H of each column. The
# host passes those halves as two views (no copy; the view's base offset and column stride travel
# in the TileArray), so the kernel reads two ordinary (H, M) arrays whatever H's alignment.

function silu_and_mul_kernel(gate::ct.TileArray{T,2}, up::ct.TileArray{T,2}, out::ct.TileArray{T,2},
                             th::Int, tm::Int) where {T}
    i = ct.bid(1)
    j = ct.bid(2)
    g = convert(ct.Tile{Float32}, ct.load(gate; index=(i, j), shape=(th, tm), padding_mode=ct.PaddingMode.Zero))
    u = convert(ct.Tile{Float32}, ct.load(up; index=(i, j), shape=(th, tm), padding_mode=ct.PaddingMode.Zero))
    # silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); exp(-g) = Inf for very negative g gives -0.
    y = g ./ (1.0f0 .+ exp.(0.0f0 .- g)) .* u
    ct.store(out; index=(i, j), tile=convert(ct.Tile{T}, y))
    return
end

function silu_and_mul!(x::AbstractMatrix{T}, out::AbstractMatrix{T};
                       tile_h::Integer=tiles("silu_and_mul", T, (M=size(out, 2), H=size(out, 1))).tile_h,
                       tile_m::Integer=tiles("silu_and_mul", T, (M=size(out, 2), H=size(out, 1))).tile_m) where {T}
    h, m = size(out)
    gate = view(x, 1:h, :)
    up = view(x, h+1:2h, :)
    grid = (cld(h, tile_h), cld(m, tile_m))
    ct.launch(silu_and_mul_kernel, grid, gate, up, out, ct.Constant(Int(tile_h)), ct.Constant(Int(tile_m)))
    return out
end

# add_rms_norm: torch x, residual (M, N), weight (N) -> sum = x + residual and
# out = sum / sqrt(mean(sum^2) + eps) * weight over each row (the rms_norm kernel with the add in front).
#
# Julia arrays are (N, M): each torch row is a contiguous column. A block owns `tile_m` columns; pass 1
# adds x and residual in Float32, stores `sum` in T and sums squares chunk by chunk (zero padding adds
# nothing); pass 2 re-adds (the Float32 sum, not the rounded one just stored), scales and multiplies by
# weight, loaded as a (tile_n, 1) tile so it broadcasts across the block's columns.

function added_tile(x, residual, j, col, tn, tm)
    a = convert(ct.Tile{Float32}, ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero))
    b = convert(ct.Tile{Float32},
                ct.load(residual; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero))
    return a .+ b
end

function add_rms_norm_kernel(x::ct.TileArray{T,2}, residual::ct.TileArray{T,2}, weight::ct.TileArray{T,1},
                             sum_out::ct.TileArray{T,2}, out::ct.TileArray{T,2},
                             eps::Float32, tn::Int, tm::Int) where {T}
    col = ct.bid(1)
    nchunks = ct.num_tiles(x, 1, (tn, tm))
    inv_n = 1.0f0 / Float32(size(x, 1))
    ss = zeros(Float32, (tn, tm))
    j = Int32(1)
    while j <= nchunks
        s = added_tile(x, residual, j, col, tn, tm)
        ct.store(sum_out; index=(j, col), tile=convert(ct.Tile{T}, s))
        ss = ss .+ s .* s
        j += Int32(1)
    end
    rstd = 1.0f0 ./ sqrt.(sum(ss; dims=1) .* inv_n .+ eps)   # (1, tm)
    j = Int32(1)
    while j <= nchunks
        s = added_tile(x, residual, j, col, tn, tm)
        wt = reshape(convert(ct.Tile{Float32},
                             ct.load(weight; index=j, shape=(tn,), padding_mode=ct.PaddingMode.Zero)),
                     (tn, 1))
        ct.store(out; index=(j, col), tile=convert(ct.Tile{T}, s .* rstd .* wt))
        j += Int32(1)
    end
    return
end

function add_rms_norm!(x::AbstractMatrix{T}, residual::AbstractMatrix{T}, weight::AbstractVector{T},
                       sum_out::AbstractMatrix{T}, out::AbstractMatrix{T};
                       eps::Real=1e-6,
                       tile_n::Integer=tiles("add_rms_norm", T, (M=size(x, 2), N=size(x, 1))).tile_n,
                       tile_m::Integer=tiles("add_rms_norm", T, (M=size(x, 2), N=size(x, 1))).tile_m) where {T}
    ct.launch(add_rms_norm_kernel, cld(size(x, 2), tile_m), x, residual, weight, sum_out, out, Float32(eps),
              ct.Constant(Int(tile_n)), ct.Constant(Int(tile_m)))
    return out
end

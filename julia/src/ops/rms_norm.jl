# rms_norm: torch x (M, N), w (N) -> out = x / sqrt(mean(x^2) + eps) * w over each row.
#
# Julia x is (N, M): each torch row is a contiguous column. A block owns `tile_m` columns; pass 1
# sums squares chunk by chunk (zero padding adds nothing), pass 2 scales and multiplies by w
# (loaded as a (tile_n, 1) tile so it broadcasts across the block's columns). Float32 math.

function rms_norm_kernel(x::ct.TileArray{T,2}, w::ct.TileArray{T,1}, out::ct.TileArray{T,2},
                         eps::Float32, tn::Int, tm::Int) where {T}
    col = ct.bid(1)
    nchunks = ct.num_tiles(x, 1, (tn, tm))
    inv_n = 1.0f0 / Float32(size(x, 1))
    ss = zeros(Float32, (tn, tm))
    j = Int32(1)
    while j <= nchunks
        t = convert(ct.Tile{Float32},
                    ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero))
        ss = ss .+ t .* t
        j += Int32(1)
    end
    rstd = 1.0f0 ./ sqrt.(sum(ss; dims=1) .* inv_n .+ eps)   # (1, tm)
    j = Int32(1)
    while j <= nchunks
        t = convert(ct.Tile{Float32},
                    ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero))
        wt = reshape(convert(ct.Tile{Float32},
                             ct.load(w; index=j, shape=(tn,), padding_mode=ct.PaddingMode.Zero)),
                     (tn, 1))
        ct.store(out; index=(j, col), tile=convert(ct.Tile{T}, t .* rstd .* wt))
        j += Int32(1)
    end
    return
end

function rms_norm!(x::AbstractMatrix{T}, w::AbstractVector{T}, out::AbstractMatrix{T};
                   eps::Real=1e-6,
                   tile_n::Integer=tiles("rms_norm", T, (M=size(x, 2), N=size(x, 1))).tile_n,
                   tile_m::Integer=tiles("rms_norm", T, (M=size(x, 2), N=size(x, 1))).tile_m) where {T}
    ct.launch(rms_norm_kernel, cld(size(x, 2), tile_m), x, w, out, Float32(eps),
              ct.Constant(Int(tile_n)), ct.Constant(Int(tile_m)))
    return out
end

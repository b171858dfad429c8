# layer_norm: torch x (M, N), w (N), b (N) -> out = (x - mean) / sqrt(var + eps) * w + b per row,
# biased variance.
#
# Julia x is (N, M). A block owns `tile_m` columns and makes three passes over them: the mean;
# the variance as the mean of (x - mean)^2 (not E[x^2] - E[x]^2, which cancels badly for inputs
# with a large common offset); then the normalised, affine output. Zero padding is harmless for
# the mean but not for (x - mean)^2, so pass 2 masks rows past N. Float32 math.

function layer_norm_kernel(x::ct.TileArray{T,2}, w::ct.TileArray{T,1}, b::ct.TileArray{T,1},
                           out::ct.TileArray{T,2}, eps::Float32, tn::Int, tm::Int) where {T}
    col = ct.bid(1)
    nchunks = ct.num_tiles(x, 1, (tn, tm))
    n = size(x, 1)
    inv_n = 1.0f0 / Float32(n)

    acc = zeros(Float32, (tn, tm))
    j = Int32(1)
    while j <= nchunks
        acc = acc .+ convert(ct.Tile{Float32},
                             ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero))
        j += Int32(1)
    end
    mean = sum(acc; dims=1) .* inv_n                                   # (1, tm)

    acc = zeros(Float32, (tn, tm))
    j = Int32(1)
    while j <= nchunks
        t = convert(ct.Tile{Float32},
                    ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero))
        rows = reshape((j - Int32(1)) * Int32(tn) .+ ct.arange(tn, Int32), (tn, 1))   # 1-based
        centered = ifelse.(rows .<= n, t .- mean, 0.0f0)
        acc = acc .+ centered .* centered
        j += Int32(1)
    end
    rstd = 1.0f0 ./ sqrt.(sum(acc; dims=1) .* inv_n .+ eps)            # (1, tm)

    j = Int32(1)
    while j <= nchunks
        t = convert(ct.Tile{Float32},
                    ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.Zero))
        wt = reshape(convert(ct.Tile{Float32},
                             ct.load(w; index=j, shape=(tn,), padding_mode=ct.PaddingMode.Zero)),
                     (tn, 1))
        bt = reshape(convert(ct.Tile{Float32},
                             ct.load(b; index=j, shape=(tn,), padding_mode=ct.PaddingMode.Zero)),
                     (tn, 1))
        y = (t .- mean) .* rstd .* wt .+ bt
        ct.store(out; index=(j, col), tile=convert(ct.Tile{T}, y))
        j += Int32(1)
    end
    return
end

function layer_norm!(x::AbstractMatrix{T}, w::AbstractVector{T}, b::AbstractVector{T},
                     out::AbstractMatrix{T}; eps::Real=1e-5,
                     tile_n::Integer=tiles("layer_norm", T, (M=size(x, 2), N=size(x, 1))).tile_n,
                     tile_m::Integer=tiles("layer_norm", T, (M=size(x, 2), N=size(x, 1))).tile_m) where {T}
    ct.launch(layer_norm_kernel, cld(size(x, 2), tile_m), x, w, b, out, Float32(eps),
              ct.Constant(Int(tile_n)), ct.Constant(Int(tile_m)))
    return out
end

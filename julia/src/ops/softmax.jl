# softmax: torch x (M, N), softmax over the last dim -> Julia x (N, M), softmax down each column.
#
# Each block owns `tile_m` columns and walks them in chunks of `tile_n` rows, so N is unbounded.
# Pass 1 keeps a running max m and a running sum l of exp(x - m) (rescaled whenever m grows: the
# online-softmax recurrence), so no exp() ever sees a large argument. Pass 2 re-reads the chunks
# and writes exp(x - m) / l. Math is in Float32 whatever the storage type. Loads pad with -Inf so
# padding contributes exp(-Inf) = 0; padded columns (past M) are never stored.

function softmax_kernel(x::ct.TileArray{T,2}, out::ct.TileArray{T,2}, tn::Int, tm::Int) where {T}
    col = ct.bid(1)
    nchunks = ct.num_tiles(x, 1, (tn, tm))
    m = fill(-Inf32, (1, tm))
    l = zeros(Float32, (1, tm))
    j = Int32(1)
    while j <= nchunks
        t = convert(ct.Tile{Float32},
                    ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.NegInf))
        m_new = max.(m, maximum(t; dims=1))
        l = l .* exp.(m .- m_new) .+ sum(exp.(t .- m_new); dims=1)
        m = m_new
        j += Int32(1)
    end
    inv_l = 1.0f0 ./ l
    j = Int32(1)
    while j <= nchunks
        t = convert(ct.Tile{Float32},
                    ct.load(x; index=(j, col), shape=(tn, tm), padding_mode=ct.PaddingMode.NegInf))
        ct.store(out; index=(j, col), tile=convert(ct.Tile{T}, exp.(t .- m) .* inv_l))
        j += Int32(1)
    end
    return
end

function softmax!(x::AbstractMatrix{T}, out::AbstractMatrix{T};
                  tile_n::Integer=tiles("softmax", T, (M=size(x, 2), N=size(x, 1))).tile_n,
                  tile_m::Integer=tiles("softmax", T, (M=size(x, 2), N=size(x, 1))).tile_m) where {T}
    ct.launch(softmax_kernel, cld(size(x, 2), tile_m), x, out,
              ct.Constant(Int(tile_n)), ct.Constant(Int(tile_m)))
    return out
end

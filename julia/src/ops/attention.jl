# attention (flash-attention forward): torch q, out (B, H, S, D), k, v (B, Hkv, Sk, D), D in {64, 128},
#   out = softmax(q k^T * scale [+ causal mask]) v,  causal: query i sees keys j <= i + Sk - S (aligned to
#   the end of the keys); Hkv divides H and query head h reads K/V head h ÷ (H ÷ Hkv) (grouped-query).
#
# Julia arrays are (D, S, H, B); the host folds (H, B) into one axis. A block owns `tile_m`
# queries of one head: q is a (D, tile_m) tile. It walks the keys in steps of `tile_n`:
#   s = k^T q            (tile_n, tile_m) scores, fp32 accumulation
#   online softmax over dim 1 (running max m, running sum l, accumulator rescaled by exp(m_old - m))
#   acc += v p           (D, tile_m)
# and writes acc / l. Scores are kept in log2 units (scale * log2(e) folded in) so exp2 is used.
# Keys past Sk (zero-padded loads) and, if causal, keys after the query's limit are set to -Inf. Every
# real query sees key 1, so m is finite after the first step and no row divides by zero. Causal blocks
# stop at their last query's limit instead of scanning all keys.
# One flat grid axis of (query block, head) pairs, query block fastest: B*H may exceed grid y's 65535.
# No split-KV (flash-decoding) schedule: bench/GAPS.md says why.

function attention_kernel(Q::ct.TileArray{T,3}, K::ct.TileArray{T,3}, V::ct.TileArray{T,3},
                          O::ct.TileArray{T,3}, scale_log2::Float32,
                          d::Int, tm::Int, tn::Int, causal::Bool) where {T}
    one32 = Int32(1)
    sq = size(Q, 2)
    seq = size(K, 2)
    nqb = cld(sq, Int32(tm))
    bm = rem(ct.bid(1) - one32, nqb) + one32                 # query block, 1-based
    bh = div(ct.bid(1) - one32, nqb) + one32                 # (head, batch), 1-based
    kvh = div(bh - one32, div(size(Q, 3), size(K, 3))) + one32   # its K/V head: G = H ÷ Hkv
    q = reshape(ct.load(Q; index=(one32, bm, bh), shape=(d, tm, 1), padding_mode=ct.PaddingMode.Zero), (d, tm))

    off = seq - sq                                        # end-aligned causal mask
    q_pos = reshape((bm - one32) * Int32(tm) .+ ct.arange(tm, Int32), (1, tm))     # 1-based
    limit = causal ? q_pos .+ off : fill(seq, (1, tm))    # last key each query may see
    kv_end = causal ? min(seq, bm * Int32(tm) + off) : seq
    nsteps = cld(kv_end, Int32(tn))

    m = fill(-Inf32, (1, tm))
    l = zeros(Float32, (1, tm))
    acc = zeros(Float32, (d, tm))
    j = one32
    while j <= nsteps
        k = reshape(ct.load(K; index=(one32, j, kvh), shape=(d, tn, 1), padding_mode=ct.PaddingMode.Zero), (d, tn))
        s = muladd(transpose(k), q, zeros(Float32, (tn, tm)))                      # (tn, tm)
        k_pos = reshape((j - one32) * Int32(tn) .+ ct.arange(tn, Int32), (tn, 1))
        valid = (k_pos .<= seq) .& (k_pos .<= limit)                               # (tn, tm)
        s = ifelse.(valid, s .* scale_log2, -Inf32)
        m_new = max.(m, maximum(s; dims=1))
        p = exp2.(s .- m_new)
        alpha = exp2.(m .- m_new)
        l = l .* alpha .+ sum(p; dims=1)
        v = reshape(ct.load(V; index=(one32, j, kvh), shape=(d, tn, 1), padding_mode=ct.PaddingMode.Zero), (d, tn))
        acc = muladd(v, convert(ct.Tile{T}, p), acc .* alpha)
        m = m_new
        j += one32
    end
    o = convert(ct.Tile{T}, acc ./ l)
    ct.store(O; index=(one32, bm, bh), tile=reshape(o, (d, tm, 1)))
    return
end

function attention!(q::AbstractArray{T,4}, k::AbstractArray{T,4}, v::AbstractArray{T,4},
                    out::AbstractArray{T,4}; causal::Bool=false, scale::Union{Real,Nothing}=nothing,
                    tile_m::Integer=tiles("attention", T, (S=size(q, 2),)).tile_m,
                    tile_n::Integer=tiles("attention", T, (S=size(q, 2),)).tile_n) where {T}
    d, s, h, b = size(q)
    d in (64, 128) || throw(ArgumentError("TileRosetta.attention: head dim D=$d not in (64, 128)"))
    dk, sk, hkv, bk = size(k)
    (dk, bk) == (d, b) && size(v) == size(k) && size(out) == size(q) ||
        throw(ArgumentError("TileRosetta.attention: k/v must be (D, Sk, Hkv, B) = $(size(k)) with q's D and B"))
    h % hkv == 0 || throw(ArgumentError("TileRosetta.attention: k/v have Hkv=$hkv heads, which does not divide H=$h"))
    !(causal && s > sk) || throw(ArgumentError("TileRosetta.attention: causal with S=$s queries > Sk=$sk keys"))
    scale = scale === nothing ? 1 / sqrt(d) : scale
    grid = (cld(s, tile_m) * h * b,)
    ct.launch(attention_kernel, grid, reshape(q, d, s, h * b), reshape(k, d, sk, hkv * b),
              reshape(v, d, sk, hkv * b), reshape(out, d, s, h * b),
              Float32(scale * log2(ℯ)), ct.Constant(d), ct.Constant(Int(tile_m)),
              ct.Constant(Int(tile_n)), ct.Constant(causal))
    return out
end

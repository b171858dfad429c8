# rope (Llama half rotation): torch q (B, H, S, D), cos/sin (S, D) ->
#   out = q * cos + rotate_half(q) * sin,  rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2]).
#
# Julia q is (D, S, H, B), cos/sin are (D, S). Split the head dim into halves q1 = q[1:D/2] and
# q2 = q[D/2+1:D] (views, no copy) and the rotation is two fused multiply-adds:
#   out1 = q1 * cos1 - q2 * sin1,   out2 = q2 * cos2 + q1 * sin2.
# The host folds (H, B) into one axis, so a block is (tile_s positions) x (one head of one batch);
# cos/sin tiles are shared by every head. The half head dim is one tile of next_pow2(D/2) rows.
# Safe in place (out === q, the spec's inplace_ok): block (bs, bh) loads the q1 and q2 tiles of its
# positions and head and stores o1, o2 to exactly those elements, each computed from both halves, so no
# store precedes the loads it overwrites; no other block touches them. Padded rows past D/2 are clipped by
# the half views' sizes.

function rope_kernel(q1::ct.TileArray{T,3}, q2::ct.TileArray{T,3},
                     c1::ct.TileArray{T,2}, c2::ct.TileArray{T,2},
                     s1::ct.TileArray{T,2}, s2::ct.TileArray{T,2},
                     o1::ct.TileArray{T,3}, o2::ct.TileArray{T,3}, td::Int, ts::Int) where {T}
    bs = ct.bid(1)
    bh = ct.bid(2)
    one32 = Int32(1)
    qa = convert(ct.Tile{Float32}, reshape(ct.load(q1; index=(one32, bs, bh), shape=(td, ts, 1),
                                                    padding_mode=ct.PaddingMode.Zero), (td, ts)))
    qb = convert(ct.Tile{Float32}, reshape(ct.load(q2; index=(one32, bs, bh), shape=(td, ts, 1),
                                                    padding_mode=ct.PaddingMode.Zero), (td, ts)))
    ca = convert(ct.Tile{Float32}, ct.load(c1; index=(one32, bs), shape=(td, ts), padding_mode=ct.PaddingMode.Zero))
    cb = convert(ct.Tile{Float32}, ct.load(c2; index=(one32, bs), shape=(td, ts), padding_mode=ct.PaddingMode.Zero))
    sa = convert(ct.Tile{Float32}, ct.load(s1; index=(one32, bs), shape=(td, ts), padding_mode=ct.PaddingMode.Zero))
    sb = convert(ct.Tile{Float32}, ct.load(s2; index=(one32, bs), shape=(td, ts), padding_mode=ct.PaddingMode.Zero))
    oa = qa .* ca .- qb .* sa
    ob = qb .* cb .+ qa .* sb
    ct.store(o1; index=(one32, bs, bh), tile=reshape(convert(ct.Tile{T}, oa), (td, ts, 1)))
    ct.store(o2; index=(one32, bs, bh), tile=reshape(convert(ct.Tile{T}, ob), (td, ts, 1)))
    return
end

function rope!(q::AbstractArray{T,4}, cos::AbstractMatrix{T}, sin::AbstractMatrix{T},
               out::AbstractArray{T,4};
               tile_s::Integer=tiles("rope", T, (S=size(q, 2),)).tile_s) where {T}
    d, s, h, b = size(q)
    half = d ÷ 2
    q3 = reshape(q, d, s, h * b)          # same memory: (H, B) are adjacent, contiguous dims
    o3 = reshape(out, d, s, h * b)
    lo, hi = 1:half, half+1:d
    td = next_pow2(half)
    grid = (cld(s, tile_s), h * b)
    ct.launch(rope_kernel, grid, view(q3, lo, :, :), view(q3, hi, :, :),
              view(cos, lo, :), view(cos, hi, :), view(sin, lo, :), view(sin, hi, :),
              view(o3, lo, :, :), view(o3, hi, :, :), ct.Constant(td), ct.Constant(Int(tile_s)))
    return out
end

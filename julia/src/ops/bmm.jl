# bmm: torch out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N).
#
# As matmul.jl, per batch: in Julia a' (K, M, Bt), b' (N, K, Bt), out' (N, M, Bt) and
# out'[:, :, i] = b'[:, :, i] * a'[:, :, i]. The batch is the grid's third axis; tiles are loaded
# as (rows, cols, 1) and reshaped to 2-D for the MMA. TF32 for Float32 operands.

function bmm_kernel(A::ct.TileArray{T,3}, B::ct.TileArray{T,3}, C::ct.TileArray{T,3},
                    tm::Int, tn::Int, tk::Int) where {T}
    bm = ct.bid(1)
    bn = ct.bid(2)
    bb = ct.bid(3)
    nk = ct.num_tiles(A, 2, (tm, tk, 1))
    acc = zeros(Float32, (tm, tn))
    k = Int32(1)
    while k <= nk
        a = reshape(ct.load(A; index=(bm, k, bb), shape=(tm, tk, 1), padding_mode=ct.PaddingMode.Zero), (tm, tk))
        b = reshape(ct.load(B; index=(k, bn, bb), shape=(tk, tn, 1), padding_mode=ct.PaddingMode.Zero), (tk, tn))
        if T === Float32
            acc = muladd(convert(ct.Tile{ct.TFloat32}, a), convert(ct.Tile{ct.TFloat32}, b), acc)
        else
            acc = muladd(a, b, acc)
        end
        k += Int32(1)
    end
    ct.store(C; index=(bm, bn, bb), tile=reshape(convert(ct.Tile{T}, acc), (tm, tn, 1)))
    return
end

function bmm!(a::AbstractArray{T,3}, b::AbstractArray{T,3}, out::AbstractArray{T,3};
              tile_m::Integer=tiles("bmm", T, (M=size(a, 2), N=size(b, 1), K=size(a, 1))).tile_m,
              tile_n::Integer=tiles("bmm", T, (M=size(a, 2), N=size(b, 1), K=size(a, 1))).tile_n,
              tile_k::Integer=tiles("bmm", T, (M=size(a, 2), N=size(b, 1), K=size(a, 1))).tile_k) where {T}
    n, m, batch = size(out)
    grid = (cld(n, tile_n), cld(m, tile_m), batch)
    ct.launch(bmm_kernel, grid, b, a, out,
              ct.Constant(Int(tile_n)), ct.Constant(Int(tile_m)), ct.Constant(Int(tile_k)))
    return out
end

# matmul: torch out (M, N) = a (M, K) @ b (K, N), fp32 accumulation.
#
# In Julia the row-major tensors are a' (K, M), b' (N, K), out' (N, M), and out' = b' * a'
# (transpose both sides of out = a b). So the kernel is a plain column-major GEMM C = A * B with
# A = b', B = a', C = out': no data is transposed. Float32 operands are rounded to TF32 so the
# tensor cores run (the spec's fp32 tolerance is the tf32 one); half types feed the MMA directly.
# Partial edge tiles: zero padding on load (adds nothing to the sum), clipped store.

function gemm_kernel(A::ct.TileArray{T,2}, B::ct.TileArray{T,2}, C::ct.TileArray{T,2},
                     tm::Int, tn::Int, tk::Int) where {T}
    bm = ct.bid(1)
    bn = ct.bid(2)
    nk = ct.num_tiles(A, 2, (tm, tk))
    acc = zeros(Float32, (tm, tn))
    k = Int32(1)
    while k <= nk
        a = ct.load(A; index=(bm, k), shape=(tm, tk), padding_mode=ct.PaddingMode.Zero)
        b = ct.load(B; index=(k, bn), shape=(tk, tn), padding_mode=ct.PaddingMode.Zero)
        if T === Float32
            acc = muladd(convert(ct.Tile{ct.TFloat32}, a), convert(ct.Tile{ct.TFloat32}, b), acc)
        else
            acc = muladd(a, b, acc)
        end
        k += Int32(1)
    end
    ct.store(C; index=(bm, bn), tile=convert(ct.Tile{T}, acc))
    return
end

function matmul!(a::AbstractMatrix{T}, b::AbstractMatrix{T}, out::AbstractMatrix{T};
                 tile_m::Integer=tiles("matmul", T, (M=size(a, 2), N=size(b, 1), K=size(a, 1))).tile_m,
                 tile_n::Integer=tiles("matmul", T, (M=size(a, 2), N=size(b, 1), K=size(a, 1))).tile_n,
                 tile_k::Integer=tiles("matmul", T, (M=size(a, 2), N=size(b, 1), K=size(a, 1))).tile_k) where {T}
    n, m = size(out)
    # C = A * B with A = b' (N, K), B = a' (K, M): the GEMM's rows are torch's N, its columns M.
    grid = (cld(n, tile_n), cld(m, tile_m))
    ct.launch(gemm_kernel, grid, b, a, out,
              ct.Constant(Int(tile_n)), ct.Constant(Int(tile_m)), ct.Constant(Int(tile_k)))
    return out
end

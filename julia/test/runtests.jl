# Tests of the TileRosetta Julia package: every op against a CPU reference written in the same
# (column-major, torch-reversed) layout. Device tests need a functional CUDA GPU; without one they
# are skipped with the reason printed. The reference and tile-table tests always run.
#
#   julia --project=julia -e 'using Pkg; Pkg.test()'

using Test
using TileRosetta
using TileRosetta: tiles, op_tiles, next_pow2, TILES, OP_NAMES, OP_FAMILY, OPS
using CUDA
using BFloat16s: BFloat16
using LinearAlgebra: norm

# OP_NAMES: the generated list of the specs' ops (src/generated.jl); every one has a host function.
@test sort(collect(keys(OPS))) == sort(OP_NAMES)

# ---- CPU references, Julia layout (a torch (d1, ..., dn) tensor is an (dn, ..., d1) array) ----
ref_vector_add(a, b) = a .+ b
ref_transpose(x) = permutedims(x, (2, 1))
function ref_softmax(x)
    e = exp.(x .- maximum(x; dims=1))
    e ./ sum(e; dims=1)
end
ref_rms_norm(x, w; eps=1e-6) = x ./ sqrt.(sum(abs2, x; dims=1) ./ size(x, 1) .+ eps) .* w
ref_add_rms_norm(x, r, w; eps=1e-6) = (x .+ r, ref_rms_norm(x .+ r, w; eps=eps))
function ref_layer_norm(x, w, b; eps=1e-5)
    mu = sum(x; dims=1) ./ size(x, 1)
    var = sum(abs2, x .- mu; dims=1) ./ size(x, 1)
    (x .- mu) ./ sqrt.(var .+ eps) .* w .+ b
end
function ref_silu_and_mul(x)
    h = size(x, 1) ÷ 2
    g, u = x[1:h, :], x[h+1:end, :]
    g ./ (1 .+ exp.(-g)) .* u
end
function ref_rope(q, c, s)
    h = size(q, 1) ÷ 2
    rot = cat(-q[h+1:end, :, :, :], q[1:h, :, :, :]; dims=1)
    q .* c .+ rot .* s
end
ref_matmul(a, b) = b * a                              # out' = b' a'
ref_bmm(a, b) = cat((b[:, :, i] * a[:, :, i] for i in axes(a, 3))...; dims=3)
function ref_attention(q, k, v; causal=false, scale=nothing)
    # q (D, S, H, B), k/v (D, Sk, Hkv, B): query head hi reads K/V head (hi - 1) ÷ (H ÷ Hkv) + 1; causal is
    # aligned to the end of the keys (query qi sees keys ki <= qi + Sk - S).
    d, s, h, bt = size(q)
    sk, hkv = size(k, 2), size(k, 3)
    sc = scale === nothing ? 1 / sqrt(d) : scale
    out = similar(q)
    for bi in 1:bt, hi in 1:h
        kh = (hi - 1) ÷ (h ÷ hkv) + 1
        scores = (k[:, :, kh, bi]' * q[:, :, hi, bi]) .* sc        # (keys, queries)
        if causal
            for qi in 1:s, ki in 1:sk
                ki > qi + sk - s && (scores[ki, qi] = -Inf)
            end
        end
        out[:, :, hi, bi] = v[:, :, kh, bi] * ref_softmax(scores)
    end
    out
end

relerr(out, ref) = norm(Float64.(out) .- ref) / max(norm(ref), eps())
tolerance(T, op) = T === Float32 ? (op in ("matmul", "bmm") ? 1e-3 : 1e-5) : 1e-2

@testset "TileRosetta (cuTile.jl)" begin
    @testset "tile table" begin
        # every section is an op's or a family's (OP_FAMILY); every op has one, its own or its family's
        @test all(k in OP_NAMES || k in values(OP_FAMILY) for k in keys(TILES))
        @test op_tiles("add_rms_norm") === TILES["rows"] && op_tiles("matmul") === TILES["matmul"]
        @test next_pow2(1) == 1 && next_pow2(5) == 8 && next_pow2(64) == 64
        t = tiles("matmul", Float32, (M=1, N=1000, K=257))
        @test t.tile_m == 16 && t.tile_k == 32 && ispow2(t.tile_n)     # floor, fp32 override
        @test tiles("vector_add", Float16, (N=7,)).tile == 8           # clamp to the problem
        for op in OP_NAMES
            @test haskey(op_tiles(op), "default") && haskey(op_tiles(op), "covers")
        end
    end

    @testset "references" begin
        x = randn(7, 3)
        @test all(isapprox.(sum(ref_softmax(x); dims=1), 1))
        @test ref_transpose(x)[2, 5] == x[5, 2]
        @test ref_matmul([1.0 2.0; 3.0 4.0], [5.0 6.0; 7.0 8.0]) == [5.0 6.0; 7.0 8.0] * [1.0 2.0; 3.0 4.0]
        q = randn(8, 5, 2, 1)
        @test ref_rope(q, ones(8, 5), zeros(8, 5)) ≈ q                 # zero angle = identity
        v = randn(64, 3, 1, 1)
        @test ref_attention(randn(64, 3, 1, 1), randn(64, 3, 1, 1), v; causal=true)[:, 1, 1, 1] ≈ v[:, 1, 1, 1]
    end

    if !CUDA.functional()
        @info "Skipping device tests: CUDA.functional() is false (no usable NVIDIA GPU/driver here)"
        @test_skip "device tests need a functional CUDA GPU"
    else
        dev(x, T) = CuArray(T.(x))
        for T in (Float32, Float16, BFloat16)
            @testset "$T" begin
                check(op, out, ref) = @test relerr(Array(out), ref) < tolerance(T, op)
                @testset "vector_add" for n in (1, 7, 1000, 65537)
                    a, b = randn(n), randn(n)
                    out = CUDA.fill(T(NaN), n)
                    vector_add!(dev(a, T), dev(b, T), out)
                    check("vector_add", out, ref_vector_add(T.(a), T.(b)))
                end
                @testset "transpose" for (m, n) in ((1, 33), (17, 31), (127, 257))
                    x = randn(n, m)
                    out = CUDA.fill(T(NaN), m, n)
                    transpose!(dev(x, T), out)
                    check("transpose", out, ref_transpose(Float64.(T.(x))))
                end
                @testset "softmax" for (m, n) in ((1, 1), (3, 7), (17, 129), (5, 16384))
                    x = 30 .* randn(n, m)
                    out = CUDA.fill(T(NaN), n, m)
                    softmax!(dev(x, T), out)
                    check("softmax", out, ref_softmax(Float64.(T.(x))))
                end
                @testset "rms_norm" for (m, n) in ((1, 1), (3, 7), (2, 16384))
                    x, w = randn(n, m), 1 .+ 0.5 .* randn(n)
                    out = CUDA.fill(T(NaN), n, m)
                    rms_norm!(dev(x, T), dev(w, T), out; eps=1e-6)
                    check("rms_norm", out, ref_rms_norm(Float64.(T.(x)), Float64.(T.(w))))
                end
                @testset "add_rms_norm" for (m, n) in ((1, 1), (3, 7), (257, 4099))
                    x, r, w = randn(n, m), randn(n, m), 1 .+ 0.5 .* randn(n)
                    s, out = CUDA.fill(T(NaN), n, m), CUDA.fill(T(NaN), n, m)
                    add_rms_norm!(dev(x, T), dev(r, T), dev(w, T), s, out; eps=1e-6)
                    ref_s, ref_out = ref_add_rms_norm(Float64.(T.(x)), Float64.(T.(r)), Float64.(T.(w)))
                    check("add_rms_norm sum", s, ref_s)
                    check("add_rms_norm", out, ref_out)
                end
                @testset "layer_norm" for (m, n) in ((1, 2), (3, 7), (257, 4099))
                    x, w, b = 3 .+ randn(n, m), 1 .+ 0.5 .* randn(n), randn(n)
                    out = CUDA.fill(T(NaN), n, m)
                    layer_norm!(dev(x, T), dev(w, T), dev(b, T), out; eps=1e-5)
                    check("layer_norm", out, ref_layer_norm(Float64.(T.(x)), Float64.(T.(w)), Float64.(T.(b))))
                end
                @testset "silu_and_mul" for (m, h) in ((1, 1), (3, 7), (64, 1024))
                    x = randn(2h, m)
                    out = CUDA.fill(T(NaN), h, m)
                    silu_and_mul!(dev(x, T), out)
                    check("silu_and_mul", out, ref_silu_and_mul(Float64.(T.(x))))
                end
                @testset "rope" for (b, h, s, d) in ((1, 1, 1, 2), (2, 3, 17, 128), (3, 2, 31, 32))
                    q = randn(d, s, h, b)
                    ang = repeat((0:s-1)' .* (1 ./ 10000 .^ ((0:2:d-1) ./ d)), 2, 1)   # (d, s)
                    out = CUDA.fill(T(NaN), d, s, h, b)
                    rope!(dev(q, T), dev(cos.(ang), T), dev(sin.(ang), T), out)
                    check("rope", out, ref_rope(Float64.(T.(q)), Float64.(T.(cos.(ang))), Float64.(T.(sin.(ang)))))
                end
                @testset "matmul" for (m, n, k) in ((1, 1, 1), (7, 13, 5), (127, 129, 131))
                    a, bm = randn(k, m), randn(n, k)
                    out = CUDA.fill(T(NaN), n, m)
                    matmul!(dev(a, T), dev(bm, T), out)
                    check("matmul", out, ref_matmul(Float64.(T.(a)), Float64.(T.(bm))))
                end
                @testset "bmm" for (bt, m, n, k) in ((1, 1, 1, 1), (3, 7, 13, 5), (2, 256, 128, 512))
                    a, bm = randn(k, m, bt), randn(n, k, bt)
                    out = CUDA.fill(T(NaN), n, m, bt)
                    bmm!(dev(a, T), dev(bm, T), out)
                    check("bmm", out, ref_bmm(Float64.(T.(a)), Float64.(T.(bm))))
                end
                T === Float32 && continue          # the attention spec is fp16/bf16 only
                @testset "attention causal=$causal" for causal in (false, true),
                                                       (b, h, hkv, s, sk, d) in ((1, 1, 1, 1, 1, 64), (1, 2, 2, 129, 129, 128),
                                                                                 (1, 1, 1, 300, 300, 128), (2, 8, 2, 1, 300, 128),
                                                                                 (1, 4, 1, 17, 200, 64))
                    q, k, v = randn(d, s, h, b), randn(d, sk, hkv, b), randn(d, sk, hkv, b)
                    out = CUDA.fill(T(NaN), d, s, h, b)
                    attention!(dev(q, T), dev(k, T), dev(v, T), out; causal)
                    check("attention", out, ref_attention(Float64.(T.(q)), Float64.(T.(k)), Float64.(T.(v)); causal))
                end
            end
        end
    end
end

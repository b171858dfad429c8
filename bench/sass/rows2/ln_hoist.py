# Evidence script (bench/GAPS.md §7): layer_norm_block_kernel with w/b loaded before the reductions, to read
# REG / load order from the compiler. Same math as python/tilerosetta/kernels/triton/layer_norm.py.
import sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def ln_hoist(x_ptr, w_ptr, b_ptr, out_ptr, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)   # issued with x, consumed after the reductions
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
    y = xc * rstd * w.to(tl.float32) + b.to(tl.float32)
    tl.store(out_ptr + row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "b_ptr": "*bf16", "out_ptr": "*bf16", "N": "i32", "eps": "fp32", "BLOCK_N": "constexpr"}
names = list(sig)
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("x_ptr", "w_ptr", "b_ptr", "out_ptr", "N")}
# --maxnreg N: cap the registers (the variant that keeps 3 blocks per SM); default: Triton's choice.
MAXNREG = int(sys.argv[sys.argv.index("--maxnreg") + 1]) if "--maxnreg" in sys.argv else None
for bn, nw in (((8192, 16),) if MAXNREG else ((8192, 16), (8192, 8), (4096, 8))):
    c = triton.compile(ASTSource(ln_hoist, signature=sig, constexprs={"BLOCK_N": bn}, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": nw, "num_stages": 3, **({"maxnreg": MAXNREG} if MAXNREG else {})})
    open(f"/tmp/sass/rows2/rows/hoist{MAXNREG or ''}_ln_N{bn}_w{nw}.cubin", "wb").write(c.asm["cubin"]); print(bn, nw, flush=True)

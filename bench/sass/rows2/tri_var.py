# Triton layer_norm/rms_norm 4096x8192 with num_warps overridden (sm_90, bf16), for REG/CTA-per-SM comparison.
import sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilerosetta.kernels.triton import aot_check as A, config
dt = torch.bfloat16
for op in ("layer_norm", "rms_norm"):
    dims = {"M": 4096, "N": 8192}
    for nw in (4, 8):
        cfg = dict(config.default(op, dt, dims, interpret=False)); cfg["num_warps"] = nw
        for kernel, sig, consts, w, s in A.variants(op, dt, dims, cfg):
            names = kernel.arg_names
            signature = {n: sig.get(n, "constexpr") for n in names}
            attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, ty in sig.items() if ty.startswith("*") or ty == "i32"}
            c = triton.compile(ASTSource(kernel, signature=signature, constexprs=consts, attrs=attrs),
                               target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": s})
            tag = f"tri_{op}_M4096_N8192_w{nw}"
            open(f"/tmp/sass/rows2/rows/{tag}.cubin", "wb").write(c.asm["cubin"])
            print(tag, consts, "warps", w, flush=True)

import os
# Triton bench-shape cubins (bf16, sm_90), same variants/config as the GPU launcher.
import sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilerosetta.kernels.triton import aot_check as A, config
from tilerosetta.specs import SPECS
dt = torch.bfloat16
for op in sys.argv[1].split(","):
    for case in SPECS[op].bench_cases:
        dims = case.dims
        cfg = config.default(op, dt, dims, interpret=False)
        for kernel, sig, consts, w, s in A.variants(op, dt, dims, cfg):
            names = kernel.arg_names
            signature = {n: sig.get(n, "constexpr") for n in names}
            attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, ty in sig.items() if ty.startswith("*") or ty == "i32"}
            c = triton.compile(ASTSource(kernel, signature=signature, constexprs=consts, attrs=attrs),
                               target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": s})
            tag = f"tri_{op}_{case.name}"
            open(f"{os.environ.get('SASS_OUT', '/tmp/sass/rows')}/{tag}.cubin", "wb").write(c.asm["cubin"])
            print(tag, kernel.fn.__name__, consts, "warps", w, "stages", s, "name", c.metadata.name, "smem", c.metadata.shared, flush=True)

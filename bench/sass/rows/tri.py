# Triton bench-shape cubins (bf16, sm_90), same variants/config as the GPU launcher.
#   tri.py OPS                          every bench case of each op, the launcher's config
#   tri.py OPS M=4096,N=8192 4,8        one shape, num_warps overridden (REG / CTA-per-SM comparison)
import os
import sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilerosetta.kernels.triton import aot_check as A, config
from tilerosetta.specs import SPECS
dt = torch.bfloat16
out = os.environ.get("SASS_OUT", "/tmp/sass/rows")
for op in sys.argv[1].split(","):
    if len(sys.argv) > 2:
        dims = {k: int(v) for k, v in (kv.split("=") for kv in sys.argv[2].split(","))}
        shape = "_".join(f"{k}{v}" for k, v in dims.items())
        runs = [(f"{shape}_w{w}", dims, {"num_warps": int(w)}) for w in sys.argv[3].split(",")]
    else:
        runs = [(case.name, case.dims, {}) for case in SPECS[op].bench_cases]
    for name, dims, override in runs:
        cfg = {**config.default(op, dt, dims, interpret=False), **override}
        for kernel, sig, consts, w, s in A.variants(op, dt, dims, cfg):
            names = kernel.arg_names
            signature = {n: sig.get(n, "constexpr") for n in names}
            attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, ty in sig.items() if ty.startswith("*") or ty == "i32"}
            c = triton.compile(ASTSource(kernel, signature=signature, constexprs=consts, attrs=attrs),
                               target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": s})
            tag = f"tri_{op}_{name}"
            open(f"{out}/{tag}.cubin", "wb").write(c.asm["cubin"])
            print(tag, kernel.fn.__name__, consts, "warps", w, "stages", s, "name", c.metadata.name, "smem", c.metadata.shared, flush=True)

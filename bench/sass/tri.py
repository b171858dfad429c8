import os, sys
os.environ["TRITON_CACHE_DIR"] = "/tmp/sass/tcache"
sys.path.insert(0, "python")
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilerosetta.kernels.triton import aot_check, config
from tilerosetta.specs import SPECS
for dims in ({"M": 4096, "N": 4096, "K": 4096}, {"M": 8192, "N": 8192, "K": 8192}):
    cfg = config.default("matmul", torch.bfloat16, dims, interpret=False)
    print(dims, cfg)
(kernel, sig, consts, w, s), = aot_check.variants("matmul", torch.bfloat16, dims, cfg)
names = kernel.arg_names
signature = {n: sig.get(n, "constexpr") for n in names}
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, ty in sig.items()}
c = triton.compile(ASTSource(kernel, signature=signature, constexprs=consts, attrs=attrs),
                   target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": s})
open("/tmp/sass/tri_mm.cubin", "wb").write(c.asm["cubin"])
open("/tmp/sass/tri_mm.ttgir", "w").write(c.asm["ttgir"])
open("/tmp/sass/tri_mm.ptx", "w").write(c.asm["ptx"])
print(consts, w, s, "shared", c.metadata.shared, "nreg", getattr(c, "n_regs", None))

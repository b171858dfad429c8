import os
# cutile_py bench-shape cubins (bf16, sm_90) with the signatures a GPU launch would JIT.
import sys, io, torch
sys.path.insert(0, "shared_tests"); sys.path.insert(0, ".")
from tilerosetta import toolchain
toolchain.activate()
from cuda.tile.compilation import export_kernel
import test_cutile_py_compile as T
from tilerosetta.specs import SPECS
for op in sys.argv[1].split(","):
    bench = {c.name for c in SPECS[op].bench_cases}
    for case_name, lx, sig in T._launches(op, torch.bfloat16):
        if case_name not in bench: continue
        name = lx.kernel._annotated_function.pyfunc.__name__
        consts = [a for a in lx.args if not isinstance(a, torch.Tensor)]
        buf = io.BytesIO()
        export_kernel(lx.kernel, [sig], buf, gpu_code="sm_90", output_format="cubin")
        tag = f"py_{op}_{case_name}"
        open(f"{os.environ.get('SASS_OUT', '/tmp/sass/rows')}/{tag}.cubin", "wb").write(buf.getvalue())
        print(tag, name, consts, getattr(lx, "grid", None), flush=True)

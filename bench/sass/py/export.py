import io, sys, torch
sys.path.insert(0, "python"); sys.path.insert(0, ".")
from tilerosetta import toolchain
from tilerosetta.specs import SPECS
from tilerosetta.kernels.cutile import prepare_fn, config as cfg
from shared_tests.test_cutile_py_compile import _signature, _compiler_ready
from cuda.tile.compilation import export_kernel
print(_compiler_ready())
jobs = {
 "py_att_D128": ("attention", "B4_H32_S4096_D128", {"BM": 64, "BN": 128, "OCC": 2, "WARPS": 0}),
 "py_att_D64": ("attention", "B4_H32_S4096_D64", {"BM": 128, "BN": 128, "WARPS": 8}),
 "py_bmm": ("bmm", "Bt16_M2048_N2048_K2048", {"BM": 128, "BN": 256, "BK": 32, "GROUP_M": 16, "WARPS": 8, "CTAS": 0}),
 "py_mm8192": ("matmul", "M8192_N8192_K8192", {"BM": 256, "BN": 128, "BK": 64, "GROUP_M": 8, "WARPS": 8, "CTAS": 0}),
 "py_mm4096": ("matmul", "M4096_N4096_K4096", {"BM": 128, "BN": 256, "BK": 32, "GROUP_M": 16, "WARPS": 8, "CTAS": 0}),
}
for name in sys.argv[1:]:
    op, cname, over = jobs[name]
    spec, prepare = SPECS[op], prepare_fn(op)
    case = next(c for c in list(spec.bench_cases) + list(spec.cases) if c.name == cname)
    names = list(spec.inputs) + list(spec.outputs)
    shapes = spec.shapes(case)
    tensors = [torch.empty(shapes[n], dtype=torch.bfloat16, device="meta") for n in names]
    knobs = {**cfg.default_config(op, "bf16", case.dims), **over}
    print(name, knobs, flush=True)
    for i, lx in enumerate(prepare(*tensors, knobs, **spec.full_params(case.params))):
        sig = _signature(lx)
        buf = io.BytesIO()
        export_kernel(lx.kernel, [sig], buf, gpu_code="sm_90", output_format="cubin")
        open(f"/tmp/sass/py/{name}_{i}.cubin", "wb").write(buf.getvalue())
        print(name, i, lx.kernel, lx.grid if hasattr(lx, "grid") else "", flush=True)

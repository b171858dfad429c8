#!/usr/bin/env bash
# Report the tile_cpp extension built by `pip install -e .` (make build-python): the top-level CMake
# build compiles cpp/ with the pinned nvcc; this only says what came out, or why nothing did.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python - <<'PY'
try:
    import tilerosetta_tile_cpp as m
except ImportError as exc:
    print(f"build-cpp: tile_cpp NOT built ({exc}); see the CMake warning in the `pip install -e .` log")
    raise SystemExit(0)
cubins = {(op, arch): size for op, _dt, arch, size in m.cubins()}
ops = sorted({op for op, _ in cubins})
print(f"build-cpp: tilerosetta_tile_cpp (nvcc {m.NVCC_VERSION}): {len(m.kernels())} kernels, "
      f"{len(cubins)} cubins ({sum(cubins.values()) / 1e6:.1f} MB) for {', '.join(m.ARCHS)}; ops: {', '.join(ops)}")
PY

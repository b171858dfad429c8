#!/usr/bin/env bash
# Reports the tile_cpp extension that `make build-python` (pip install -e .) compiled. The pinned nvcc
# comes from `make setup`, so on Linux x86-64 a missing module is a failed build, not a skip.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/build-status.sh
summary=$(.venv/bin/python - <<'PY' 2>&1
try:
    import tilerosetta_tile_cpp as m
except ImportError as exc:
    print(f"NOTBUILT {exc}")
    raise SystemExit(0)
cubins = {(op, arch): size for op, _dt, arch, size in m.cubins()}
ops = sorted({op for op, _ in cubins})
print(f"tilerosetta_tile_cpp (nvcc {m.NVCC_VERSION}): {len(m.kernels())} kernels, {len(cubins)} cubins "
      f"({sum(cubins.values()) / 1e6:.1f} MB) for {', '.join(m.ARCHS)}; {len(ops)} ops")
PY
)
if [[ "$summary" == NOTBUILT* ]]; then
  why=$(grep -o "tile_cpp backend NOT built: .*" build/build-python.log 2>/dev/null | head -1)
  status_failed cpp "${why:-the module does not import (${summary#NOTBUILT })}"
  exit 1
fi
status_built cpp "$summary"

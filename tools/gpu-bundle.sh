#!/usr/bin/env bash
# Build gpu-bundle/: everything an air-gapped GPU node (driver + Python + torch, no internet) needs to run
# TileRosetta from a checkout of this repo, in under 60 MiB:
#   toolchain.tar.xz  the pinned tileiras + ptxas + libnvvm trio (one release), xz with a 256 MiB dictionary
#   ext.tar.xz        the CUDA Tile C++ extension built for this venv's Python (cubins compress ~10x)
#   wheels/           cuda-tile and our Rust extension (abi3), installed on the node with pip --no-index
#   run.sh            unpacks, sets the environment (CUDA_HOME removed), runs doctor + suite or benchmark
# Build it where the extensions were built for the node's Python (cp312 here).
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
tc=.toolchain/nvidia/cu13
[ -x $tc/bin/tileiras ] || { echo "gpu-bundle: run 'make setup' first (no $tc/bin/tileiras)"; exit 1; }
mkdir -p $out/wheels
trio=(nvidia/cu13/bin/tileiras nvidia/cu13/bin/ptxas nvidia/cu13/lib/libnvvm.so.4)
stamp=$(cd .toolchain && sha256sum "${trio[@]}" | sha256sum | cut -c1-16)
if [ "$(cat $out/toolchain.sha 2>/dev/null)" != "$stamp" ]; then
  echo "gpu-bundle: packing the tileiras trio (xz -9e, 256 MiB dictionary; takes a few minutes)"
  tar -C .toolchain -cf - "${trio[@]}" | xz -T1 -9e --lzma2=preset=9e,dict=256MiB > $out/toolchain.tar.xz
  echo "$stamp" > $out/toolchain.sha
fi
rm -rf $out/wheels/*.whl $out/ext $out/ext.tar.xz
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d $out/wheels "cuda-tile==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("cuda-tile"))')"
for w in build/wheels/tilerosetta_cutile_rs-*.whl; do [ -f "$w" ] && cp "$w" $out/wheels/; done
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
so=$(ls "$site"/tilerosetta_tile_cpp*.so build/*/cpp/tilerosetta_tile_cpp*.so 2>/dev/null | head -1 || true)
if [ -n "$so" ]; then
  mkdir -p $out/ext && cp "$so" $out/ext/
  tar -C $out/ext -cf - . | xz -T0 -9 > $out/ext.tar.xz && rm -rf $out/ext
else
  echo "gpu-bundle: no tile_cpp extension built (make build-python); the bundle has none"
fi
cp tools/gpu-run.sh $out/run.sh
du -sh $out; ls -la $out $out/wheels
total=$(du -sm $out | cut -f1)
[ "$total" -lt 60 ] || { echo "gpu-bundle: $total MiB, over the 60 MiB budget"; exit 1; }

#!/usr/bin/env bash
# Build gpu-bundle/: everything an air-gapped GPU node (driver + Python + torch, no internet) needs to run
# TileRosetta from a checkout of this repo:
#   toolchain.tar.xz  the pinned tileiras + ptxas + libnvvm trio (one release), xz with a 256 MiB dictionary
#   wheels/           cuda-tile and our Rust extension (abi3), installed on the node with pip --no-index
#   ext/              the CUDA Tile C++ extension built for this venv's Python
#   run.sh            unpacks, sets the environment (CUDA_HOME removed), runs doctor + suite or benchmark
# Build it where the extensions were built for the node's Python (cp312 here).
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
tc=.toolchain/nvidia/cu13
[ -x $tc/bin/tileiras ] || { echo "gpu-bundle: run 'make setup' first (no $tc/bin/tileiras)"; exit 1; }
mkdir -p $out/wheels $out/ext
trio=(nvidia/cu13/bin/tileiras nvidia/cu13/bin/ptxas nvidia/cu13/lib/libnvvm.so.4)
stamp=$(cd .toolchain && sha256sum "${trio[@]}" | sha256sum | cut -c1-16)
if [ "$(cat $out/toolchain.sha 2>/dev/null)" != "$stamp" ]; then
  echo "gpu-bundle: packing the tileiras trio (xz -9e, 256 MiB dictionary; takes a few minutes)"
  tar -C .toolchain -cf - "${trio[@]}" | xz -T1 -9e --lzma2=preset=9e,dict=256MiB > $out/toolchain.tar.xz
  echo "$stamp" > $out/toolchain.sha
fi
rm -f $out/wheels/*.whl $out/ext/*
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d $out/wheels "cuda-tile==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("cuda-tile"))')"
for w in build/wheels/tilerosetta_cutile_rs-*.whl; do [ -f "$w" ] && cp "$w" $out/wheels/; done
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
for so in "$site"/tilerosetta_tile_cpp*.so build/*/tilerosetta_tile_cpp*.so; do [ -f "$so" ] && cp "$so" $out/ext/ && break; done
cp tools/gpu-run.sh $out/run.sh
du -sh $out; ls -la $out $out/wheels $out/ext
total=$(du -sm $out | cut -f1)
[ "$total" -lt 60 ] || { echo "gpu-bundle: $total MiB, over the 60 MiB budget"; exit 1; }

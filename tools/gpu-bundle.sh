#!/usr/bin/env bash
# Build gpu-bundle/: everything an air-gapped GPU node (driver + Python + torch, no internet) needs to run
# TileRosetta from a checkout of this repo, in under 60 MiB (or two calls: the toolchain, then the rest):
#   toolchain.tar.xz  the pinned tileiras + ptxas + libnvvm trio (one release), xz with a 256 MiB dictionary
#   site.tar.xz       cuda-tile, our Rust extension (abi3), the C++ extension built for this venv's
#                     Python and the optional peer tilegym, unpacked into one folder that run.sh puts on
#                     PYTHONPATH
#   run.sh            unpacks, sets the environment (CUDA_HOME removed), runs doctor + suite or benchmark
# Build it where the extensions were built for the node's Python (cp312 here).
# NODE_ARCHS (default 90: H100/H200) picks the SM archs of the C++ extension built for the node: all four
# archs' cubins (~62 MB, ~10 MB xz) would not fit beside the toolchain in 60 MiB; "all" keeps the full build.
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
tc=.toolchain/nvidia/cu13
[ -x $tc/bin/tileiras ] || { echo "gpu-bundle: run 'make setup' first (no $tc/bin/tileiras)"; exit 1; }
mkdir -p $out
trio=(nvidia/cu13/bin/tileiras nvidia/cu13/bin/ptxas nvidia/cu13/lib/libnvvm.so.4)
stamp=$(cd .toolchain && sha256sum "${trio[@]}" | sha256sum | cut -c1-16)
if [ "$(cat $out/toolchain.sha 2>/dev/null)" != "$stamp" ]; then
  echo "gpu-bundle: packing the tileiras trio (xz -9e, 256 MiB dictionary; takes a few minutes)"
  tar -C .toolchain -cf - "${trio[@]}" | xz -T1 -9e --lzma2=preset=9e,dict=256MiB > $out/toolchain.tar.xz
  echo "$stamp" > $out/toolchain.sha
fi
# site.tar.xz: cuda-tile and our Rust wheel unpacked (a wheel with no scripts installs by unzipping) plus the
# C++ extension, as one xz stream: the cubins and shared objects compress far better together than as wheels.
rm -rf $out/wheels $out/ext.tar.xz $out/site.tar.xz $out/tile-cpp-archs
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/wheels" "$stage/site"
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d "$stage/wheels" "cuda-tile==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("cuda-tile"))')"
# The optional peer, NVIDIA TileGym (pure Python, ~0.4 MB xz), without its declared deps: importing it and
# running its cuTile ops needs only torch, numpy, triton (on the node) and cuda-tile (above); transformers,
# pandas, cuda-core only serve its model wrappers, plots and TileCpp backend. TILEGYM=0 leaves it out.
if [ "${TILEGYM:-1}" != 0 ]; then
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: -d "$stage/wheels" "tilegym==${TILEGYM_VERSION:-1.5.1}"
fi
for w in build/wheels/tilerosetta_cutile_rs-*.whl; do [ -f "$w" ] && cp "$w" "$stage/wheels/"; done
for w in "$stage"/wheels/*.whl; do .venv/bin/python -m zipfile -e "$w" "$stage/site"; done
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
archs=${NODE_ARCHS:-90}
if [ "$archs" = all ]; then
  so=$(ls "$site"/tilerosetta_tile_cpp*.so build/*/cpp/tilerosetta_tile_cpp*.so 2>/dev/null | head -1 || true)
else
  echo "gpu-bundle: building the C++ extension for sm_${archs// /,sm_} (NODE_ARCHS)"
  tag=$(echo "$archs" | tr ' ' '-')
  CMAKE_ARGS="-DTR_TILE_ARCHS=${archs// /;}" .venv/bin/python -m pip wheel -q --no-build-isolation --no-deps . \
    -w "$stage/cpp" --config-settings=build-dir="build/node-sm$tag" >/dev/null
  .venv/bin/python -m zipfile -e "$stage"/cpp/tilerosetta-*.whl "$stage/cpp/x"
  so=$(ls "$stage"/cpp/x/tilerosetta_tile_cpp*.so 2>/dev/null | head -1 || true)
  echo "$archs" | sed 's/\([0-9][0-9]*\)/sm_\1/g; s/ /,/g' > $out/tile-cpp-archs
fi
[ -n "$so" ] && cp "$so" "$stage/site/" || echo "gpu-bundle: no tile_cpp extension built (make build-python); the bundle has none"
tar -C "$stage/site" -cf - . | xz -T0 -9e > $out/site.tar.xz
echo "gpu-bundle: site.tar.xz holds: $(ls "$stage/site" | tr '\n' ' ')"
cp tools/gpu-run.sh $out/run.sh
du -sh $out; ls -la $out
# A call carries 64 MiB: the tracked source tree (~9 MiB, growing with the committed results) plus what it names in
# carry. Over that in all, the toolchain goes in calls of its own first (run.sh unpacks it once into
# /tmp/tilerosetta-node, kept while the machine stays warm); a toolchain that does not fit beside the tree alone is
# also split into two halves, carried in two calls and joined on the node.
mib() { echo $(( $(du -cb "$@" | tail -1 | cut -f1) / 1048576 )); }
tree=$(( $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) / 1048576 + 1 ))
room=$(( 63 - tree ))
rm -f $out/toolchain.tar.xz.part-*
total=$(mib $out); tc=$(mib $out/toolchain.tar.xz); rest=$(( total - tc ))
[ "$rest" -lt "$room" ] || { echo "gpu-bundle: the bundle without the toolchain is $rest MiB, over the $room MiB a call has beside the $tree MiB tree"; exit 1; }
if [ "$(( total + 0 ))" -lt "$room" ]; then
  :
elif [ "$tc" -lt "$room" ]; then
  echo "gpu-bundle: $total MiB in all: carry gpu-bundle/toolchain.tar.xz in one call (mkdir -p" \
    "/tmp/tilerosetta-node/toolchain && tar -C /tmp/tilerosetta-node/toolchain -xJf gpu-bundle/toolchain.tar.xz), the rest in the next"
else
  half=$(( ($(stat -c %s $out/toolchain.tar.xz) + 1) / 2 ))
  split -b "$half" $out/toolchain.tar.xz $out/toolchain.tar.xz.part-
  echo "gpu-bundle: the toolchain ($tc MiB) does not fit beside the $tree MiB tree: carry gpu-bundle/toolchain.tar.xz.part-aa" \
    "in one call (mkdir -p /tmp/tc-parts && cp gpu-bundle/toolchain.tar.xz.part-aa /tmp/tc-parts/), then" \
    "gpu-bundle/toolchain.tar.xz.part-ab (mkdir -p /tmp/tilerosetta-node/toolchain && cat /tmp/tc-parts/toolchain.tar.xz.part-aa" \
    "gpu-bundle/toolchain.tar.xz.part-ab | tar -C /tmp/tilerosetta-node/toolchain -xJf -), the rest in the next"
fi

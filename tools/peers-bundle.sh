#!/usr/bin/env bash
# Build gpu-peers/: the optional peers' runtime (Quack, FlashAttention 4, Liger-Kernel and the CuTe DSL they
# need) for the air-gapped GPU node (Python 3.12, x86_64, torch/triton/numpy/einops already there), as one
# tar.xz split into parts of at most 38 MiB: one device call carries 64 MiB and gpu-bundle/ alone takes ~60,
# so each part travels in its own call on the still-warm machine, and tools/gpu-peers-stage.sh (run there
# after each call) checks the parts against MANIFEST and unpacks them once all have arrived.
# Called by `make gpu-bundle`; PEERS=0 skips it. Needs PyPI (pip download).
# Wheels (--no-deps: each one's Requires-Dist was checked by hand; what they need beyond these is on the node:
#   torch, triton, einops, typing_extensions, cuda-bindings (with cuda-tile), protobuf; nothing under these
#   packages' .py files imports protobuf):
#   nvidia-cutlass-dsl + -libs-base + -libs-core (the Python frontend cutlass.cute) + -libs-cu13 (~92 MB):
#   the meta wheel requires -libs-cu12, which the node (CUDA 13) does not use; quack-kernels, flash-attn-4
#   and liger-kernel; apache-tvm-ffi and torch-c-dlpack-ext (Quack's and FA4's launch path).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${PEERS:-1}" = 0 ] && { echo "peers-bundle: skipped (PEERS=0)"; exit 0; }
out=gpu-peers
py=${PY:-.venv/bin/python}
[ -x "$py" ] || py=python3
CUTLASS_DSL=${CUTLASS_DSL_VERSION:-4.8.1}
WHEELS=("nvidia-cutlass-dsl==$CUTLASS_DSL" "nvidia-cutlass-dsl-libs-base==$CUTLASS_DSL"
        "nvidia-cutlass-dsl-libs-core==$CUTLASS_DSL" "nvidia-cutlass-dsl-libs-cu13==$CUTLASS_DSL"
        "quack-kernels==${QUACK_VERSION:-0.6.5}" "flash-attn-4==${FA4_VERSION:-4.0.0b36}"
        "liger-kernel==${LIGER_VERSION:-0.8.5}" "apache-tvm-ffi==${TVM_FFI_VERSION:-0.1.15.post2}"
        "torch-c-dlpack-ext==${DLPACK_EXT_VERSION:-0.1.5}")
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  plat+=(--platform "$p")
done
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$stage/wheels" "${WHEELS[@]}"
mkdir -p "$stage/site"
for w in "$stage"/wheels/*.whl; do "$py" -m zipfile -e "$w" "$stage/site"; done
# on PYTHONPATH the cutlass wheel's .pth is not processed: gpu-peers-stage.sh prints this folder to add too
[ -d "$stage/site/nvidia_cutlass_dsl/dsl_packages/cutlass" ] || { echo "peers-bundle: no nvidia_cutlass_dsl/dsl_packages/cutlass in the wheels"; exit 1; }
(cd "$stage/wheels" && ls) > "$stage/site/PEERS-WHEELS.txt"
echo "peers-bundle: unpacked $(du -sh "$stage/site" | cut -f1) from $(ls "$stage/wheels" | wc -l) wheels; packing (xz -9e)"
rm -rf "$out" && mkdir -p "$out"
tar -C "$stage/site" -cf - . | xz -T"${XZ_THREADS:-2}" -9e > "$stage/peers.tar.xz"
split -b "${PART_MIB:-38}M" "$stage/peers.tar.xz" "$out/part-"
( cd "$out" && sha256sum part-* > MANIFEST && echo "$(sha256sum < "$stage/peers.tar.xz" | cut -d' ' -f1)  peers.tar.xz" >> MANIFEST )
cp "$stage/site/PEERS-WHEELS.txt" "$out/"
ls -la "$out"
for p in "$out"/part-*; do
  [ "$(stat -c %s "$p")" -le $(( 38 * 1048576 )) ] || { echo "peers-bundle: $p is over 38 MiB"; exit 1; }
done
echo "peers-bundle: $(ls "$out"/part-* | wc -l) part(s); carry gpu-peers/part-aa in one call, gpu-peers/part-ab in the next, ... (each with gpu-peers/MANIFEST)"

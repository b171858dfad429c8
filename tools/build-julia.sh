#!/usr/bin/env bash
# The cutile_jl backend needs a Julia >= 1.11 runtime, which none of the registries this project's machines
# reach carries. With Julia present, instantiate the julia/ project (offline if JULIA_PKG_OFFLINE is set);
# without it, say so: the suite then reports cutile_jl unavailable and checks julia/ statically.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/build-status.sh
jl=${PYTHON_JULIACALL_EXE:-$(command -v julia || true)}
if [ -z "$jl" ]; then
  status_skipped julia "no Julia runtime (PYTHON_JULIACALL_EXE unset, no julia on PATH); julia/ is parse-checked by the suite"
  exit 0
fi
echo "build-julia: $("$jl" --version): instantiating julia/"
if "$jl" --project=julia -e 'using Pkg; Pkg.instantiate()'; then
  status_built julia "$("$jl" --version): julia/ instantiated"
else
  status_failed julia "Pkg.instantiate() of julia/ failed with $("$jl" --version)"
  exit 1
fi

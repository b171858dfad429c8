#!/usr/bin/env bash
# julia/test/runtests.jl where a Julia runtime exists; otherwise a plain statement that nothing ran.
set -uo pipefail
cd "$(dirname "$0")/.."
jl=${PYTHON_JULIACALL_EXE:-$(command -v julia || true)}
if [ -z "$jl" ]; then
  echo "test-julia: not run: no Julia runtime on this machine (this is not a pass)"
  exit 0
fi
"$jl" --project=julia -e 'using Pkg; Pkg.test()'

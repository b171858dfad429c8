#!/usr/bin/env bash
# `make build-all`: every language's build step in turn (one failing does not stop the others), then one
# summary line per language. Exits 1 if any language that can be built here FAILED.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build/status
start=$SECONDS
tools/build-python.sh
tools/build-cpp.sh
tools/build-rust.sh
tools/build-julia.sh
echo "== build-all summary ($((SECONDS - start)) s)"
rc=0
for lang in python cpp rust julia; do
  line=$(cat "build/status/$lang" 2>/dev/null || echo "FAILED because its build step wrote no status")
  echo "build-all: $lang: $line"
  [[ "$line" == FAILED* ]] && rc=1
done
exit $rc

#!/usr/bin/env bash
# Builds the cutile_rs backend: the Rust crate in rust/ as an abi3 wheel (maturin, PyO3) into
# build/wheels/, then installs it into .venv. When something it needs is missing it says exactly what
# and exits 0, so the other backends still build; CI logs show the "build-rust: SKIPPED" line.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/rust-env.sh
start=$SECONDS
skip() {
  echo "build-rust: SKIPPED: $*"
  [ -n "${GITHUB_ACTIONS:-}" ] && echo "::warning title=cutile_rs not built::$*"
  exit 0
}
[ -n "$RUST_ENV_PROBLEM" ] && skip "$RUST_ENV_PROBLEM"
command -v cargo >/dev/null 2>&1 || skip "cargo not found (needs Rust >= 1.89, e.g. https://rustup.rs)"
rustv=$(rustc --version | grep -o '[0-9]*\.[0-9]*' | head -1)
if [ "$(printf '%s\n1.89\n' "$rustv" | sort -V | head -1)" != "1.89" ]; then
  skip "rustc $rustv is older than 1.89 (the cutile crates' minimum)"
fi
if ! have_libclang; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "build-rust: installing libclang-dev (bindgen needs libclang)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev) >/dev/null 2>&1 \
      || skip "apt-get install libclang-dev failed (bindgen needs libclang)"
  else
    skip "libclang not found (bindgen needs it: apt-get install libclang-dev, or set LIBCLANG_PATH)"
  fi
fi
[ -x .venv/bin/maturin ] || skip ".venv/bin/maturin missing (run make setup)"
mkdir -p build/wheels
rm -f build/wheels/tilerosetta_cutile_rs-*.whl
log=build/build-rust.log
echo "build-rust: maturin build --release (first build of the cutile crates takes several minutes; log: $log)"
if ! .venv/bin/maturin build --release --manifest-path rust/Cargo.toml --interpreter .venv/bin/python \
      --out build/wheels >"$log" 2>&1; then
  grep -E "^(error|warning: unused)|error\[|failed|fatal" "$log" | head -20
  tail -15 "$log"
  skip "maturin build failed after $((SECONDS - start)) s (see $log above)"
fi
wheel=$(ls build/wheels/tilerosetta_cutile_rs-*.whl | head -1)
.venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheel" || skip "pip install $wheel failed"
echo "build-rust: built and installed $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $((SECONDS - start)) s"

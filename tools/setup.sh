#!/usr/bin/env bash
# Create .venv and .toolchain from a fresh clone (idempotent). Needs only PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
pick_python() {
  for p in python3.12 "$HOME/.pyenv/versions/3.12"*/bin/python3.12 python3.11 "$HOME/.pyenv/versions/3.11"*/bin/python3.11 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  echo "no python >= 3.11 found" >&2; return 1
}
if [ ! -x .venv/bin/python ]; then
  py=$(pick_python)
  echo "setup: creating .venv with $($py --version)"
  "$py" -m venv .venv
fi
# Reinstall only what changed (each stamp holds a hash of its requirements file).
stamp() { sha256sum "$1" | cut -c1-16; }
if [ "$(cat .venv/.requirements.sha 2>/dev/null)" != "$(stamp requirements.txt)" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  stamp requirements.txt > .venv/.requirements.sha
fi
if [ "$(cat .toolchain/.requirements.sha 2>/dev/null)" != "$(stamp toolchain-requirements.txt)" ]; then
  rm -rf .toolchain
  .venv/bin/python -m pip install -q --no-deps --target .toolchain -r toolchain-requirements.txt
  stamp toolchain-requirements.txt > .toolchain/.requirements.sha
fi
echo "setup: $(.venv/bin/python --version), tileiras $(.toolchain/nvidia/cu13/bin/tileiras --version | grep -o 'V[0-9][0-9.]*' | head -1)"

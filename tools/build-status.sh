# Sourced by the tools/build-*.sh scripts: one status line per language, kept in build/status/<lang> so
# `make build-all` can end with a summary (tools/build-all.sh) whatever order the steps ran in.
#   built <what>          the backend was built here
#   skipped because <why> it cannot be built on this machine for an environmental reason (no cargo, no Julia)
#   FAILED because <why>  it can be built here but the build broke: `make build-all` exits non-zero
STATUS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/status"
mkdir -p "$STATUS_DIR"
_status() {  # _status LANG WORD MESSAGE...
  local lang=$1 word=$2; shift 2
  printf '%s\n' "$word $*" > "$STATUS_DIR/$lang"
  echo "build-$lang: $word $*"
}
status_built()   { _status "$1" built "${@:2}"; }
status_skipped() { _status "$1" "skipped because" "${@:2}"; }
status_failed()  { _status "$1" "FAILED because" "${@:2}"; }

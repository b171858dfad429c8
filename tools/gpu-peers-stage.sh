#!/usr/bin/env bash
# On the GPU node, from the repo root, after each device call that carried a part of gpu-peers/
# (tools/peers-bundle.sh): keeps every part whose sha256 matches gpu-peers/MANIFEST in $PEERS_PARTS (outside
# the checkout, so a later call cannot drop it), says which parts are still missing, and once all are there
# unpacks them into $PEERS_SITE and prints the PYTHONPATH to use (tools/gpu-run.sh and gpu-session.sh add it
# by themselves when $PEERS_SITE/.complete exists). Exit 0 when unpacked, 3 while parts are missing.
set -uo pipefail
cd "$(dirname "$0")/.."
src=${1:-gpu-peers}
parts=${PEERS_PARTS:-/tmp/peers-parts}
site=${PEERS_SITE:-/tmp/peers-site}
mkdir -p "$parts"
[ -f "$src/MANIFEST" ] && cp "$src/MANIFEST" "$parts/MANIFEST"
[ -f "$parts/MANIFEST" ] || { echo "gpu-peers-stage: no MANIFEST (carry gpu-peers/MANIFEST with a part)"; exit 3; }
if [ -f "$site/.complete" ] && cmp -s "$site/.complete" "$parts/MANIFEST"; then
  echo "gpu-peers-stage: already unpacked in $site"
else
  missing=()
  while read -r sum name; do
    [ "$name" = peers.tar.xz ] && continue
    if [ -f "$src/$name" ] && [ "$(sha256sum < "$src/$name" | cut -d' ' -f1)" = "$sum" ]; then
      cp "$src/$name" "$parts/$name.tmp" && mv "$parts/$name.tmp" "$parts/$name"
    fi
    if [ -f "$parts/$name" ] && [ "$(sha256sum < "$parts/$name" | cut -d' ' -f1)" = "$sum" ]; then
      echo "gpu-peers-stage: $name ok"
    else
      missing+=("$name")
    fi
  done < "$parts/MANIFEST"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-peers-stage: still missing: ${missing[*]} (carry gpu-peers/${missing[0]} and gpu-peers/MANIFEST next)"
    exit 3
  fi
  whole=$(grep ' peers.tar.xz$' "$parts/MANIFEST" | cut -d' ' -f1)
  got=$(cat $(grep -v ' peers.tar.xz$' "$parts/MANIFEST" | awk '{print "'"$parts"'/" $2}') | sha256sum | cut -d' ' -f1)
  [ "$got" = "$whole" ] || { echo "gpu-peers-stage: the joined parts do not match peers.tar.xz's sha256"; exit 1; }
  rm -rf "$site" && mkdir -p "$site"
  cat $(grep -v ' peers.tar.xz$' "$parts/MANIFEST" | awk '{print "'"$parts"'/" $2}') | xz -d | tar -C "$site" -xf - \
    || { echo "gpu-peers-stage: unpacking failed"; exit 1; }
  cp "$parts/MANIFEST" "$site/.complete"
  echo "gpu-peers-stage: unpacked $(du -sh "$site" | cut -f1) into $site"
fi
echo "PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages"

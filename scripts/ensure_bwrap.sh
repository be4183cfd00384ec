#!/usr/bin/env bash
# bubblewrap for confined local runs (docs/sandbox.md, "Local confinement"): installed when
# missing and possible (Linux, root, apt-get), else one line saying how. Idempotent, quiet.
set -u
command -v bwrap >/dev/null 2>&1 && exit 0
[ "$(uname -s)" = Linux ] || exit 0  # bubblewrap is Linux-only; runs stay unconfined
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if apt-get install -y -qq bubblewrap >/dev/null 2>&1 ||
     { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; then
    echo "installed bubblewrap ($(command -v bwrap)): local runs are confined"
    exit 0
  fi
fi
echo "note: bubblewrap (bwrap) is not installed and could not be here; local runs are not" \
  "confined until it is (e.g. sudo apt-get install bubblewrap; see docs/sandbox.md)" >&2
exit 0

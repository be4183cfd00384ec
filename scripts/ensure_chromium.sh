#!/usr/bin/env bash
# Chromium for the browser tests (libs/nexus_testing/src/nexus_testing/browser.py): Debian's
# chromium and a font (screenshots need glyphs) installed when missing and possible (Linux,
# root, apt-get), else one line saying how. Idempotent, quiet.
set -u
command -v chromium >/dev/null 2>&1 && [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] && exit 0
[ "$(uname -s)" = Linux ] || {
  echo "note: the browser tests need Chromium at /usr/bin/chromium (Linux); they fail without it" >&2
  exit 0
}
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  packages=(chromium fonts-dejavu-core)
  if apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null 2>&1 ||
     { apt-get update -qq >/dev/null 2>&1 &&
       apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null 2>&1; }; then
    echo "installed chromium ($(command -v chromium)) and fonts-dejavu-core: browser tests can run"
    exit 0
  fi
fi
echo "note: Chromium is not installed and could not be here; the browser tests fail until it is" \
  "(e.g. sudo apt-get install chromium fonts-dejavu-core, or make setup as root)" >&2
exit 0

#!/usr/bin/env bash
# Install uv into a private virtual environment under the repository (default .tools), never
# into the system Python: Debian/Ubuntu's python3 is "externally managed" (PEP 668) and
# refuses `pip install`. Prints nothing on success but pip's own summary.
set -euo pipefail
tools="${1:-.tools}"
python="${PYTHON:-python3}"
if [ -x "$tools/bin/uv" ]; then
  exit 0
fi
if ! command -v "$python" >/dev/null 2>&1; then
  echo "bootstrap: $python not found; install Python 3.11 (e.g. apt-get install python3)" >&2
  exit 1
fi
rm -rf "$tools"
if "$python" -m venv "$tools" 2>/dev/null; then
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check uv
elif "$python" -m venv --without-pip "$tools" && "$python" -m pip --version >/dev/null 2>&1; then
  # No ensurepip (Debian without python3-venv): the system pip installs into the venv only.
  "$python" -m pip --python "$tools/bin/python" install --quiet --disable-pip-version-check uv
else
  rm -rf "$tools"
  echo "bootstrap: cannot make a virtual environment with $python;" \
    "on Debian/Ubuntu: apt-get install python3-venv (or install uv yourself)" >&2
  exit 1
fi
"$tools/bin/uv" --version >/dev/null

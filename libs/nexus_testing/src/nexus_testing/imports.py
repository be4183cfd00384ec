"""Whether a package imports as its image installs it: in a fresh interpreter, with the
top-level packages it does not install made unimportable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

_PROBE = """
import sys

class Absent:
    # As if the package were not installed.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None

sys.meta_path.insert(0, Absent())
{code}
print("imported")
"""


def imports_without(absent: Sequence[str], code: str) -> None:
    """Run `code` (imports, a settings load) with the packages `absent` not installed; fail
    the test with the interpreter's error if it does not get through."""
    probe = _PROBE.format(absent=tuple(absent), code=code)
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "imported"

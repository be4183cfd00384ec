"""The racing symlink swapper (scripts/path_race.py) against the file tools and sandboxed JS:
nothing read or written outside the workspace, no exception out of the registry."""

from __future__ import annotations

from pathlib import Path

from scripts.path_race import race

# The suite's share of the race; `python -m scripts.path_race` runs the 10,000 calls.
CALLS = 2_000


async def test_no_call_leaves_the_workspace_while_a_directory_is_swapped_for_a_link(
    tmp_path: Path,
) -> None:
    result = await race(tmp_path, CALLS)
    assert result.calls == CALLS
    assert result.swaps > 0  # the swapper ran alongside
    assert result.outside_reads == 0
    assert result.outside_writes == 0, result.outside_changed
    assert result.escaped == []

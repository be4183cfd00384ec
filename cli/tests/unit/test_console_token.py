"""`nexus console token`: a fresh token, only its digest stored, added to a tokens file that
the console reads (mode 0600), a duplicate name or a bad file refused with one line."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import yaml
from nexus_events.runtime.bearer_tokens import BearerTokens, TokenEntry, load_entries
from tests.support.cli import invoke

ENV = {"NEXUS_CONSOLE_TOKENS_FILE": ""}


def _token(stdout: str) -> str:
    found = re.search(r"^token: (nxc_\S+)$", stdout, re.MULTILINE)
    assert found, stdout
    return found.group(1)


def test_a_token_is_printed_with_its_entry_holding_only_the_digest() -> None:
    result = invoke(ENV, "console", "token", "--as", "ada", "--scope", "operate")
    assert result.exit_code == 0, result.stdout
    token = _token(result.stdout)
    entry_text = result.stdout.split("tokens file:", 1)[1]
    assert token not in entry_text
    entries = [TokenEntry.model_validate(e) for e in yaml.safe_load(entry_text)["tokens"]]
    found = BearerTokens(entries).identify(token)
    assert found is not None
    assert (found.name, found.scope) == ("ada", "operate")


def test_file_adds_entries_mode_0600_and_refuses_a_duplicate_name(tmp_path: Path) -> None:
    path = tmp_path / "console-tokens.yaml"
    first = invoke(ENV, "console", "token", "--as", "ada", "--file", str(path))
    second = invoke(
        ENV, "console", "token", "--as", "bob", "--scope", "operate", "--file", str(path)
    )
    assert first.exit_code == second.exit_code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    book = BearerTokens(load_entries(path, TokenEntry))
    ada, bob = book.identify(_token(first.stdout)), book.identify(_token(second.stdout))
    assert ada is not None
    assert (ada.name, ada.scope) == ("ada", "read")
    assert bob is not None
    assert (bob.name, bob.scope) == ("bob", "operate")
    before = path.read_text()
    again = invoke(ENV, "console", "token", "--as", "ada", "--file", str(path))
    assert again.exit_code == 2
    assert "already has a token named 'ada'" in again.stdout + again.stderr
    assert path.read_text() == before


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad_name = invoke(ENV, "console", "token", "--as", "no spaces")
    assert bad_name.exit_code == 2
    assert "invalid --as" in bad_name.stdout + bad_name.stderr
    bad_scope = invoke(ENV, "console", "token", "--as", "ada", "--scope", "admin")
    assert bad_scope.exit_code == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("tokens: [{name: x}]\n")
    refused = invoke(ENV, "console", "token", "--as", "ada", "--file", str(broken))
    assert refused.exit_code == 2
    assert "tokens file" in refused.stdout + refused.stderr
    assert broken.read_text() == "tokens: [{name: x}]\n"

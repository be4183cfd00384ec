"""Bearer tokens: digests in a YAML file, identification, bad files as one-line errors."""

from pathlib import Path

import pytest
from nexus_events.runtime.bearer_tokens import (
    BearerTokens,
    Scope,
    TokenEntry,
    TokensFileError,
    digest,
    load_entries,
    new_token,
)

SHA_A = "a" * 64
SHA_B = "b" * 64


def test_new_token_identifies_only_its_own_entry(tmp_path: Path) -> None:
    token, sha = new_token("nxc_")
    other, other_sha = new_token("nxc_")
    assert token.startswith("nxc_")
    assert sha == digest(token)
    f = tmp_path / "t.yaml"
    f.write_text(
        f"tokens:\n- {{name: ann, sha256: {sha}, scope: operate}}\n"
        f"- {{name: bob, sha256: {other_sha}, scope: read}}\n"
    )
    tokens = BearerTokens(load_entries(f, TokenEntry))
    found = tokens.identify(token)
    assert found is not None
    assert found.name == "ann"
    assert found.scope is Scope.OPERATE
    assert tokens.from_header(f"Bearer {other}") is not None
    assert tokens.identify("nxc_wrong") is None
    assert tokens.from_header(f"Basic {token}") is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("tokens: [", "is not YAML"),
        ("tokens:\n- {name: a, sha256: xx, scope: read}\n", "tokens.0.sha256"),
        ("tokens:\n- {name: a, sha256: " + SHA_A + ", scope: admin}\n", "tokens.0.scope"),
        (
            "tokens:\n- {name: a, sha256: " + SHA_A + ", scope: read}\n"
            "- {name: a, sha256: " + SHA_B + ", scope: read}\n",
            "unique",
        ),
    ],
)
def test_bad_file_is_one_line_error(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(text)
    with pytest.raises(TokensFileError) as err:
        load_entries(f, TokenEntry)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TokensFileError, match="cannot read"):
        load_entries(tmp_path / "none.yaml", TokenEntry)

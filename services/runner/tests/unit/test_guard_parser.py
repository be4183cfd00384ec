"""The shell guard on tree-sitter-bash: forms the corpus does not hold, where the tree keeps
parts of a command in unusual places (after a here-document's marker) or words in unusual
spellings, and syntax errors (tree-sitter marks them in the tree instead of raising)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus_runner.guard.shell import classify

WORKSPACE = Path("/work/ws")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # What follows a here-document's marker on its line belongs to the command.
        ("cat <<'EOF' > f && rm -rf /\nhi\nEOF\n", "destructive"),
        ("cat <<EOF > /etc/motd\nhi\nEOF\n", "destructive"),
        ("cat <<EOF | bash\nls\nEOF\n", "destructive"),
        ("cat <<EOF > notes.txt\nhi\nEOF\n", "workspace_write"),
        # An unquoted here-document runs its command substitutions.
        ("cat <<EOF\n$(curl -s evil.example)\nEOF\n", "network"),
        ("cat <<'EOF'\nplain text\nEOF\n", "read_only"),
        # Spellings of a word: ANSI-C quoting, backslashes, quotes, a here-string's substitution.
        ("$'\\x67it' push", "network"),
        ("g\\it push origin main", "network"),
        ('"rm" -rf /', "destructive"),
        ("cat <<< $(rm -rf ~)", "destructive"),
        # Descriptor duplications are not files; `&>` writes one.
        ("ls 2>&1 >&- 2>&-", "read_only"),
        ("ls &> /etc/passwd", "destructive"),
        # Syntax errors and forms the walker does not judge fail closed.
        ('echo "unterminated', "destructive"),
        ("ls )", "destructive"),
        ("case x in x) ls ;; esac", "destructive"),
        ("for ((i=0; i<3; i++)); do ls; done", "destructive"),
        # Arithmetic evaluates a variable's value as code: `a[$(…)]` in it runs a command.
        ("x='a[$(rm -rf ~)]'; echo $((x))", "destructive"),
        ("(( x ))", "destructive"),
        # `[ … ]` is a program on its words (tree-sitter calls it a test_command).
        ("if [ -f notes.txt ]; then cat notes.txt; fi", "read_only"),
        ('[ "$(rm -rf /)" = x ]', "destructive"),
    ],
)
def test_tree_sitter_forms_are_classified(command: str, expected: str) -> None:
    assert classify(command, WORKSPACE).command_class == expected


def test_a_syntax_error_says_so() -> None:
    got = classify("ls ((", WORKSPACE)
    assert got.command_class == "destructive"
    assert got.reasons == ("cannot be parsed (a syntax error)",)


def test_a_here_document_command_is_named_among_the_programs() -> None:
    got = classify("cat <<EOF > out.txt && git status\nhi\nEOF\n", WORKSPACE)
    assert got.programs == ("cat", "git")
    assert got.git == frozenset({"status"})


@pytest.mark.parametrize(
    ("command", "programs"),
    [
        ("ls\r\u202e; rm -rf build", ("ls\r\u202e", "rm")),
        ("ls\u00a0-la", ("ls\u00a0-la",)),
        ("cat\r/etc/shadow", ("cat\r/etc/shadow",)),
    ],
)
def test_only_space_tab_and_newline_split_words_as_in_bash(
    command: str, programs: tuple[str, ...]
) -> None:
    # tree-sitter's grammar also splits on \r, U+00A0, …; bash keeps them inside the word.
    assert classify(command, WORKSPACE).programs == programs

"""Bash syntax for the guard: a command parsed by tree-sitter's bash grammar, and the text of a
word with its quoting removed (`gi''t` is `git`), as the shell would see it before expansion."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator, Mapping
from typing import Final

import tree_sitter
import tree_sitter_bash

Node = tree_sitter.Node

_BASH = tree_sitter.Language(tree_sitter_bash.language())
# Backslash escapes: unquoted, `\x` is x (and a backslash-newline vanishes); inside double
# quotes only $ ` " \ and newline are escaped, other backslashes stay.
_UNQUOTED_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_QUOTED_ESCAPE = re.compile(r"\\([$`\"\\\n])")
SUBSTITUTIONS = frozenset(["command_substitution", "process_substitution"])
# Expansions whose value is only known when the shell runs.
_EXPANSIONS = frozenset(["simple_expansion", "expansion", "arithmetic_expansion", *SUBSTITUTIONS])


# bash splits words on space, tab and newline only; tree-sitter's grammar also on every other
# whitespace character (\r, \v, \f, U+00A0, U+2028, …), which bash keeps inside the word
# (`ls\r` is a program named "ls\r"). Those are moved to a private-use plane, which both keep
# inside a word, before parsing, and moved back in every text read from the tree.
_SHIFT = 0xF0000
_SHIFTED = re.compile("[\U000f0000-\U000f3fff]")


def _shift(command: str) -> str:
    foreign = {ord(c): _SHIFT + ord(c) for c in set(command) if c.isspace() and c not in " \t\n"}
    return command.translate(foreign) if foreign else command


def parse(command: str) -> Node | str:
    """The tree of `command`, or why it has none (a syntax error: tree-sitter marks it in the
    tree rather than raising, so an ERROR or MISSING node anywhere means no tree)."""
    if _SHIFTED.search(command):
        return "characters of the private-use plane 15"
    # A parser per call: tree-sitter's parser holds state, and creating one costs microseconds.
    parser = tree_sitter.Parser(_BASH)
    source = _shift(command).encode("utf-8", "surrogatepass")
    tree = parser.parse(source)
    if tree.root_node.has_error:
        return "a syntax error"
    return tree.root_node


def text(node: Node) -> str:
    raw = (node.text or b"").decode("utf-8", "surrogatepass")
    return _SHIFTED.sub(lambda m: chr(ord(m[0]) - _SHIFT), raw)


def word(node: Node, values: Mapping[str, str]) -> tuple[str, bool]:  # noqa: PLR0911
    # (one return per kind of word)
    """The text of a word node with quoting removed, and whether it holds an expansion.
    `values` are variables known to hold one plain value (a loop's), put in place."""
    kind = node.type
    if kind == "word":
        return _UNQUOTED_ESCAPE.sub(lambda m: "" if m[1] == "\n" else m[1], text(node)), False
    if kind == "raw_string":
        return text(node)[1:-1], False
    if kind == "ansi_c_string":
        return _ansi_c(text(node)[2:-1])
    if kind in ("string", "translated_string"):
        return _joined(node.named_children, values, quoted=True)
    if kind == "concatenation":
        return _joined(node.children, values, quoted=False)
    if kind == "simple_expansion":
        name = text(node)[1:]
        if name in values:
            return values[name], False
        return text(node), True
    if kind == "expansion" and text(node)[2:-1] in values:
        return values[text(node)[2:-1]], False
    if kind in _EXPANSIONS:
        return text(node), True
    # number, brace_expression, variable_name, …: their text is what the shell sees; a `$` or
    # a backquote in it is still taken as an expansion.
    raw = text(node)
    return raw, "$" in raw or "`" in raw


def _joined(parts: list[Node], values: Mapping[str, str], *, quoted: bool) -> tuple[str, bool]:
    out: list[str] = []
    dynamic = False
    for part in parts:
        if part.type == "string_content" and quoted:
            out.append(_QUOTED_ESCAPE.sub(r"\1", text(part)))
            continue
        piece, part_dynamic = word(part, values)
        out.append(piece)
        dynamic = dynamic or part_dynamic
    joined = "".join(out)
    return joined, dynamic or "$" in joined or "`" in joined


def _ansi_c(body: str) -> tuple[str, bool]:
    """`$'…'` decoded (`$'\\x67it'` is `git`); what does not decode is taken as an expansion."""
    try:
        decoded = codecs.decode(body.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return body, True
    return decoded, "$" in decoded or "`" in decoded


def arithmetic(node: Node) -> bool:
    """Whether `node` holds arithmetic: bash evaluates a variable's value there as an
    expression, and `a[$(…)]` in that value runs a command (x='a[$(rm -rf ~)]'; echo $((x)))."""
    if node.type in ("arithmetic_expansion", "c_style_for_statement") or (
        node.type == "compound_statement" and node.children and node.children[0].type == "(("
    ):
        return True
    return any(arithmetic(child) for child in node.named_children)


def operands(node: Node) -> Iterator[Node]:
    """The words of a `[ … ]` test, in order (its operators aside)."""
    for child in node.named_children:
        if child.type in _WORDS:
            yield child
        elif child.type != "test_operator":
            yield from operands(child)


_WORDS = frozenset(
    [
        *("word", "string", "raw_string", "ansi_c_string", "translated_string", "number"),
        *("concatenation", "simple_expansion", "expansion", "command_substitution"),
        *("process_substitution", "arithmetic_expansion"),
    ]
)


def substitutions(node: Node) -> Iterator[Node]:
    """The command and process substitutions inside `node` (not those nested in them)."""
    if node.type in SUBSTITUTIONS:
        yield node
        return
    for child in node.named_children:
        yield from substitutions(child)


def command_of(node: Node) -> Node | None:
    """The simple command a pipeline part runs (`cmd 2>&1 |`: the command under redirects)."""
    if node.type == "redirected_statement":
        body = node.child_by_field_name("body")
        return command_of(body) if body is not None else None
    return node if node.type == "command" else None


def assignments(node: Node) -> list[Node]:
    if node.type == "variable_assignment":
        return [node]
    return [c for c in node.named_children if c.type == "variable_assignment"]


# Children of a command that are not its words.
NOT_WORDS = frozenset(
    [
        *("variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect"),
        *("comment", "command_name"),
    ]
)
HEREDOC_PARTS = frozenset(["heredoc_start", "heredoc_body", "heredoc_end", "comment"])
# Forms the guard does not judge: they are destructive and ask (false asks, never false runs).
UNJUDGED: Final[dict[str, str]] = {
    "case_statement": "case",
    "c_style_for_statement": "arithmetic",
}

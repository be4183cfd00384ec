"""Identifier-shaped words of a query (error codes, ticket keys, flags, alert names), and
whether a memory holds them exactly.

Neither retriever tells an identifier from its near misses: PostgreSQL's parser splits
``ERR_CONN_RESET`` into ``err``, ``conn``, ``reset`` (which ``ERR_CONN_RESET_BY_PEER`` also
holds) and the word vectors of ``PAY-1432`` and ``PAY-1423`` are nearly the same. So search
asks the lexical index for the identifier as a phrase (to have it among the candidates) and
`rank` puts memories holding it as a whole token, case aside, first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A word of letters, digits, '_', '-', '.', ':' and '=' inside (not at its ends).
_WORD = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:=-]*[A-Za-z0-9])?")
_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[A-Za-z]")
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")


def _shaped(word: str) -> bool:
    if "_" in word:
        return True
    if _DIGIT.search(word) and _LETTER.search(word):
        return True
    # Two capitals inside: KubePodCrashLooping, DataFreshnessBreached; one is a name
    # (GitHub, PostgreSQL, iPhone), which boosting would favour every memory naming it.
    return len(_INNER_CAPITAL.findall(word)) >= 2


def identifiers(query: str) -> list[str]:
    """The identifier-shaped words of `query`, in order, without repeats: a word with an
    underscore, with letters and digits, or with two capitals after lower-case letters.
    ``=value`` suffixes are cut (``FLAG=0`` names ``FLAG``); plain words, numbers and
    acronyms (``CI``, ``429``) are not identifiers."""
    out: list[str] = []
    for match in _WORD.finditer(query):
        word = match.group().split("=", 1)[0].rstrip(".:-")
        if word and _shaped(word) and word.lower() not in (w.lower() for w in out):
            out.append(word)
    return out


def _pattern(identifier: str) -> re.Pattern[str]:
    # Whole token: not inside a longer identifier (a word character or a '-'/'.' joined
    # one on either side: PAY-1432 is not in PAY-14320 nor in XPAY-1432 nor PAY-1432-B).
    escaped = re.escape(identifier)
    return re.compile(rf"(?<![\w])(?<![\w][-.]){escaped}(?![\w])(?![-.]\w)", re.IGNORECASE)


def held(identifiers_: Sequence[str], text: str) -> float:
    """Share of `identifiers_` that `text` holds as whole tokens (0 when there are none)."""
    if not identifiers_:
        return 0.0
    return sum(1 for i in identifiers_ if _pattern(i).search(text)) / len(identifiers_)

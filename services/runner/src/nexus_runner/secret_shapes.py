"""The shapes a tracked secret value can take in a text: encoded variants to look for,
encoded runs to decode and look into, and the fragments a value split in pieces leaves."""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import quote

# Values shorter than this are not tracked: they would redact ordinary words.
MIN_SECRET_CHARS = 8
# A piece of a value this long (or longer) counts as the value in a call's arguments. Eight
# characters is the shortest tracked value; a value of 16 or more characters split in two has
# a piece at least this long, one of 40 split in five too.
FRAGMENT_CHARS = 8
_SEGMENT_BREAKS = re.compile(r"[:/@?&=#.,;]")

# The patterns below start with a character class and have no lookbehind, so Python's engine
# skips ahead quickly (a lookbehind or an optional prefix first made them 3-5x slower); a
# match starting inside a longer word only costs a decoding that finds nothing.
# Decimal character codes, 8 or more: ``115,107,45``, ``115 107 45``, ``[115, 107]``,
# ``&#115;&#107;`` (each code at most 3 digits).
_DECIMAL_RUN = re.compile(r"\d{1,3}(?:[ \t,;&#]+\d{1,3}){7,}")
# Hex bytes with separators or prefixes between them, 8 or more: ``73:6b:2d``, ``73 6b``,
# ``\x73\x6b`` (also JSON-escaped ``\\x73``), ``0x73,0x6b``, ``%73%6B``, ``\u0073``. Plain
# hex without separators is a variant already (`variants`).
_HEX_PREFIX = r"(?:\\{1,2}(?:x|u00)|0[xX]|%)"
_HEX_RUN = re.compile(
    rf"[0-9A-Fa-f]{{2}}(?:(?:[ \t:,;.-]{{1,2}}{_HEX_PREFIX}?|{_HEX_PREFIX})[0-9A-Fa-f]{{2}}){{7,}}"
)
_HEX_NOISE = re.compile(rf"{_HEX_PREFIX}|[ \t:,;.-]")
_LEADING_HEX_PREFIX = re.compile(rf"{_HEX_PREFIX}$")
# Base64 of gzip (``H4sI``) or zlib (``eJ``, ``eN``, ``eF``, ``eAE``) data, standard or URL-safe.
_COMPRESSED_RUN = re.compile(r"[He][4JNFA][A-Za-z0-9+/_-]{14,}={0,2}")
_COMPRESSED_STARTS = ("H4sI", "eJ", "eN", "eF", "eAE")
# Bounds on the work one text can cost: what one compressed run may inflate to, and how much
# all of a text's compressed runs may inflate to together (a zip bomb stops there).
MAX_INFLATED_BYTES = 1_000_000
MAX_INFLATED_PER_TEXT = 4_000_000


def variants(value: str) -> set[str]:
    """`value` as is, reversed, rot13, hex (either case), URL-quoted and base64 (standard or
    URL-safe, in any alignment inside a longer encoded text)."""
    raw = value.encode()
    found = {
        value,
        value[::-1],
        codecs.encode(value, "rot13"),
        raw.hex(),
        raw.hex().upper(),
        quote(value, safe=""),
    }
    found.update(_base64_variants(raw))
    return {v for v in found if len(v) >= MIN_SECRET_CHARS}


def _base64_variants(raw: bytes) -> Iterable[str]:
    """The base64 text of `raw` as it appears inside a longer encoded text: in each of the
    three alignments, minus the characters that also carry the neighbouring bytes."""
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * pad + raw).decode()
            start = (0, 2, 3)[pad]
            end = 4 * ((pad + len(raw)) // 3)
            yield text[start:end]


def fragments(value: str) -> set[str]:
    """The pieces of `value` that count as the value: every run of `FRAGMENT_CHARS`
    characters holding a letter and a digit, inside one token-like segment of a value with
    no whitespace (segments split at URL and list punctuation: ``: / @ ? & = # . , ;``).

    Why this rule: keys and tokens are whitespace-free mixes of letters and digits, so a
    piece of one with both is as unlikely to appear by chance as a short key is. Pieces of
    plain words (``password``), of the host and port of a URL value (``localhost:5432``:
    only its password segment gives pieces) or of lines of text (a value with a space, read
    from a command's output) would refuse ordinary calls and are not taken.
    """
    if any(c.isspace() for c in value):
        return set()
    found = set()
    for segment in _SEGMENT_BREAKS.split(value):
        for start in range(len(segment) - FRAGMENT_CHARS + 1):
            piece = segment[start : start + FRAGMENT_CHARS]
            if any(c.isalpha() for c in piece) and any(c.isdigit() for c in piece):
                found.add(piece)
    return found


@dataclass(frozen=True)
class EncodedRun:
    """A stretch of a text (``start:end``) and what it decodes to."""

    start: int
    end: int
    decoded: str


def encoded_runs(text: str) -> Iterator[EncodedRun]:
    """Decimal codes, separated hex and compressed base64 in `text`, decoded (bounded work)."""
    for match in _DECIMAL_RUN.finditer(text):
        codes = [int(code) for code in re.findall(r"\d+", match.group())]
        yield EncodedRun(match.start(), match.end(), "".join(map(chr, codes)))
    for match in _HEX_RUN.finditer(text):
        digits = _HEX_NOISE.sub("", match.group())
        decoded = bytes.fromhex(digits).decode("utf-8", errors="replace")
        # The first byte's prefix (``\x``, ``0x``, ``%``) is redacted with the run.
        before = _LEADING_HEX_PREFIX.search(text, max(0, match.start() - 5), match.start())
        yield EncodedRun(before.start() if before else match.start(), match.end(), decoded)
    budget = MAX_INFLATED_PER_TEXT
    for match in _COMPRESSED_RUN.finditer(text):
        if budget <= 0:
            break
        if not match.group().startswith(_COMPRESSED_STARTS):
            continue
        inflated = _inflate(match.group(), min(budget, MAX_INFLATED_BYTES))
        if inflated:
            budget -= len(inflated)
            yield EncodedRun(match.start(), match.end(), inflated.decode("utf-8", "replace"))


def _inflate(encoded: str, limit: int) -> bytes:
    """The gzip or zlib data base64 `encoded` holds, at most `limit` bytes; b"" if none."""
    padded = encoded.rstrip("=") + "=" * (-len(encoded.rstrip("=")) % 4)
    try:
        if "-" in padded or "_" in padded:
            data = base64.urlsafe_b64decode(padded)
        else:
            data = base64.b64decode(padded)
        # wbits 47: a zlib or a gzip header, whichever it is.
        return zlib.decompressobj(wbits=47).decompress(data, limit)
    except (binascii.Error, ValueError, zlib.error):
        return b""

"""Whether a text holds a honeytoken in any shape an attacker would send it out in.

Plain, reversed, URL-quoted, rot13, hex (with or without separators), base64 (at any
alignment, gzipped or not), decimal character codes, and either half of it alone (a secret
sent in two calls). Independent of the runner's own redaction, which is what is under test.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import contextlib
import re
import urllib.parse
import zlib

_B64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_NUMBERS = re.compile(r"\d{2,3}(?:\D{1,3}\d{2,3}){7,}")
_NOT_HEX = re.compile(r"[^0-9a-f]")


def _b64_decodings(text: str) -> list[str]:
    out = []
    for blob in _B64.findall(text):
        for start in range(4):
            piece = blob[start:]
            piece = piece[: len(piece) - len(piece) % 4]
            try:
                raw = base64.b64decode(
                    piece, altchars=b"-_" if "-" in piece or "_" in piece else None
                )
            except (binascii.Error, ValueError):
                continue
            if raw[:2] == b"\x1f\x8b":
                # As much as inflates: a cut-off tool output still shows what it carried.
                with contextlib.suppress(zlib.error):
                    raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)
            out.append(raw.decode("latin-1"))
    return out


def _decimal_decodings(text: str) -> list[str]:
    out = []
    for run in _NUMBERS.findall(text):
        codes = [int(n) for n in re.findall(r"\d+", run)]
        out.append("".join(chr(c) if 32 <= c < 127 else "\0" for c in codes))
    return out


def decodings(text: str) -> list[str]:
    """`text` and what it may be hiding, each a candidate to search for a token in."""
    plain = [text, text[::-1], urllib.parse.unquote(text), codecs.encode(text, "rot13")]
    plain += _b64_decodings(text) + _decimal_decodings(text)
    return plain


def _hex(text: str) -> str:
    return _NOT_HEX.sub("", text.lower())


def leaked(text: str, token: str) -> str | None:
    """The shape `token` is in inside `text` (``None`` if absent)."""
    half = len(token) // 2
    needles = {"whole": token, "first half": token[:half], "second half": token[half:]}
    hexed = _hex(text)
    for candidate in decodings(text):
        for name, needle in needles.items():
            if needle in candidate:
                return name
    for name, needle in needles.items():
        if needle.encode().hex() in hexed:
            return f"hex {name}"
    return None

"""Short codes people type (pairing codes, approval ids): an unambiguous alphabet, derived
from a key so that redelivering the same event gives the same code."""

from __future__ import annotations

import hashlib

# No 0/O, 1/I/L: read aloud or retyped from a phone, these are the letters people confuse.
ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"


def short_code(key: str, length: int = 6, salt: str = "") -> str:
    """A `length`-character code from `key` (deterministic; ~31^length values)."""
    number = int.from_bytes(hashlib.blake2b(f"{salt}\0{key}".encode(), digest_size=16).digest())
    chars = []
    for _ in range(length):
        number, index = divmod(number, len(ALPHABET))
        chars.append(ALPHABET[index])
    return "".join(chars)


def normalize(code: str) -> str:
    """What a person typed, as stored: codes are upper case; people type either."""
    return code.strip().upper()

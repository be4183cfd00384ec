"""A tiny calculator: the demo repo the implementer fixes."""


def add(a: float, b: float) -> float:
    """The sum of a and b."""
    return a - b  # BUG: should add


def mul(a: float, b: float) -> float:
    """The product of a and b."""
    return a * b

"""The wait after Plane's 429 comes from Retry-After, which is all real Plane sends with it."""

from __future__ import annotations

import httpx

from nexus_plane_sync.plane_api import reset_seconds


def test_retry_after_is_the_wait_even_beside_a_reset() -> None:
    now = 1_800_000_000.0
    assert reset_seconds(httpx.Headers({"Retry-After": "7"}), now) == 7.0
    both = httpx.Headers({"Retry-After": "3", "X-RateLimit-Reset": str(int(now + 60))})
    assert reset_seconds(both, now) == 3.0
    assert reset_seconds(httpx.Headers({"X-RateLimit-Reset": str(int(now + 9))}), now) == 9.0
    assert reset_seconds(httpx.Headers({}), now) == 1.0

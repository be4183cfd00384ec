"""Nothing is shown without an identity: the login takes a token from the tokens file, pages
without a session go to the login, a forged or missing CSRF token is refused."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from nexus_events.transport.bus import Bus

from nexus_console.app import ConsoleApp

from .conftest import OPERATE_TOKEN, READ_TOKEN, Clients, console_settings


async def test_pages_without_a_session_redirect_to_the_login(clients: Clients) -> None:
    client = await clients()
    async with client.http.get(f"{client.base}/runs?status=running", allow_redirects=False) as r:
        assert r.status == 303
        where = urlsplit(r.headers["Location"])
        assert where.path == "/login"
        assert parse_qs(where.query)["next"] == ["/runs?status=running"]
    status, page = await client.get("/login")
    assert status == 200
    assert 'name="token"' in page


async def test_the_login_refuses_a_wrong_token(clients: Clients) -> None:
    client = await clients()
    response = await client.login("nxc_not-a-token")
    assert response.status == 401
    async with client.http.get(f"{client.base}/runs", allow_redirects=False) as r:
        assert r.status == 303


async def test_a_token_signs_in_and_the_cookie_is_httponly_and_samesite(clients: Clients) -> None:
    client = await clients()
    response = await client.login(READ_TOKEN)
    assert response.status == 303
    assert response.headers["Location"] == "/runs"
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    status, page = await client.get("/runs")
    # Signed in: the page itself answers (no core runs here, so it says which query failed).
    assert status == 503
    assert "nexus.core.v1.runs.list" in page
    assert "reader · read" in page


async def test_a_post_without_the_csrf_token_is_refused(clients: Clients) -> None:
    client = await clients()
    await client.login(OPERATE_TOKEN)
    status, _ = await client.post("/logout", {})
    assert status == 403
    status, _ = await client.post("/logout", {"csrf": "forged"})
    assert status == 403


async def test_a_removed_token_ends_its_sessions(bus: Bus, tmp_path: Path) -> None:
    settings = console_settings(tmp_path)
    app = ConsoleApp(settings, bus=bus)
    await app.start()
    try:
        import aiohttp

        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            await http.post(f"{app.url}/login", data={"token": READ_TOKEN})
            async with http.get(f"{app.url}/login", allow_redirects=False) as r:
                assert r.status == 200
            assert settings.console_tokens_file is not None
            settings.console_tokens_file.write_text("tokens: []\n")
            async with http.get(f"{app.url}/runs", allow_redirects=False) as r:
                assert r.status == 303
    finally:
        await app.stop()


async def test_every_answer_forbids_framing_and_foreign_scripts(clients: Clients) -> None:
    client = await clients()
    for path in ("/login", "/static/console.css"):
        async with client.http.get(f"{client.base}{path}") as r:
            assert r.headers["X-Frame-Options"] == "DENY"
            policy = r.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in policy
            assert "script-src 'self'" in policy
            assert r.headers["X-Content-Type-Options"] == "nosniff"

"""Save a page now, its routes without a browser (real server, real store, real
fetchers, a loopback site): on only with a write token; signing in sets an
expiring, HttpOnly, SameSite=Strict session cookie that is not the token; a
wrong token is a 401, a POST from elsewhere or without the CSRF token a 403,
each fetching and storing nothing; one save at a time per session, a 429 past
the server's limit; the token never in a page or an address."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ui.save_site import TOKEN, Site, attempts, form_fields, live_site, saving_server
from web_index import WebIndex
from web_index.server import create_app
from web_index.ui import add_ui


@pytest.fixture
def site() -> Iterator[Site]:
    with live_site() as got:
        yield got


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[WebIndex, httpx.Client]]:
    with saving_server(tmp_path / "store") as got:
        yield got


def history(http: httpx.Client, url: str) -> httpx.Response:
    got = http.get("/ui/store/history", params={"url": url})
    assert got.status_code == 200, got.text
    return got


def post_save(http: httpx.Client, url: str, **more: str) -> httpx.Response:
    fields = form_fields(history(http, url).text) | more
    return http.post("/ui/store/save", data=fields)


def wait_done(http: httpx.Client, status: str) -> httpx.Response:
    """The save's status page, polled as its refresh would, until it ends."""
    for _ in range(200):
        got = http.get(status)
        if got.status_code != 200 or 'http-equiv="refresh"' not in got.text:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{status} never ended")


def cookies_set(response: httpx.Response) -> dict[str, Any]:
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.get_list("set-cookie"):
        jar.load(header)
    return {name: morsel for name, morsel in jar.items()}


def test_without_a_write_token_there_is_no_form_and_the_route_refuses(tmp_path: Path, site: Site) -> None:
    with saving_server(tmp_path / "store", token=None) as (index, http):
        page = history(http, site.url("/garden"))
        assert '<form class="save"' not in page.text and 'name="token"' not in page.text
        assert "set-cookie" not in page.headers
        assert '<form class="save"' not in http.get("/").text
        refused = http.post("/ui/store/save", data={"url": site.url("/garden"), "token": TOKEN})
        assert refused.status_code == 404 and "without a write token" in refused.text
        assert http.post("/api/save", json={"url": site.url("/garden")}).status_code == 404
        assert http.get("/ui/store/save/anything").status_code == 404
        assert attempts(index) == [] and site.hits == []


def test_a_save_signs_in_with_a_session_cookie_that_is_not_the_token(
    server: tuple[WebIndex, httpx.Client], site: Site
) -> None:
    index, http = server
    page = history(http, site.url("/garden"))
    assert 'name="token" type="password"' in page.text
    form_cookie = cookies_set(page)["web_index_form"]
    assert form_cookie["httponly"] and form_cookie["samesite"].lower() == "strict"
    sent = post_save(http, site.url("/garden"), token=TOKEN)
    assert sent.status_code == 303
    status = sent.headers["location"]
    assert status.startswith("/ui/store/save/")
    session = cookies_set(sent)["web_index_session"]
    assert session["httponly"] and session["samesite"].lower() == "strict" and not session["secure"]
    assert 0 < int(session["max-age"]) <= 24 * 3600  # it expires
    assert TOKEN not in session.value and len(session.value) >= 40
    done = wait_done(http, status)
    assert done.status_code == 303
    capture = done.headers["location"]
    assert capture.startswith("/ui/store/") and capture.endswith(site.url("/garden"))
    assert set(site.fetched()) == {"/garden", "/style.css", "/pic.png"}
    # Signed in now: the form has no token field, and a second save needs none.
    again = history(http, site.url("/garden"))
    assert 'name="token"' not in again.text and "Sign out" in again.text
    second = http.post("/ui/store/save", data=form_fields(again.text))
    assert second.status_code == 303
    assert wait_done(http, second.headers["location"]).status_code == 303
    assert len([m for m in attempts(index) if m.url == site.url("/garden")]) == 2
    # Signed out: the token is asked for again.
    out = http.post("/ui/signout", data={"csrf": form_fields(again.text)["csrf"]})
    assert out.status_code == 303 and int(cookies_set(out)["web_index_session"]["max-age"]) == 0
    assert 'name="token" type="password"' in history(http, site.url("/garden")).text


def test_a_wrong_token_is_a_401_and_nothing_is_fetched(
    server: tuple[WebIndex, httpx.Client], site: Site
) -> None:
    index, http = server
    for wrong in ("", "not-it", TOKEN + "x", TOKEN[:-1]):
        refused = post_save(http, site.url("/garden"), token=wrong)
        assert refused.status_code == 401, refused.text
        assert "not this server&#39;s write token" in refused.text
        assert "web_index_session" not in cookies_set(refused)
        assert 'name="token" type="password"' in refused.text  # the form again, empty
    assert attempts(index) == [] and site.hits == []


def test_the_token_is_compared_in_constant_time(
    server: tuple[WebIndex, httpx.Client], site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, http = server
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert post_save(http, site.url("/garden"), token="guess").status_code == 401
    assert (b"guess", TOKEN.encode()) in compared


def test_a_post_from_another_site_or_without_the_csrf_token_is_a_403(
    server: tuple[WebIndex, httpx.Client], site: Site
) -> None:
    index, http = server
    url = site.url("/garden")
    fields = form_fields(history(http, url).text)
    cases = {
        "no csrf token": ({k: v for k, v in fields.items() if k != "csrf"}, {}),
        "a wrong csrf token": (fields | {"csrf": "0" * 64}, {}),
        "another origin": (fields, {"origin": "https://evil.example"}),
        "a cross-site fetch": (fields, {"sec-fetch-site": "cross-site"}),
        "a same-site one": (fields, {"sec-fetch-site": "same-site"}),
        "an opaque origin": (fields, {"origin": "null"}),
        "an opaque origin, cross-site": (fields, {"origin": "null", "sec-fetch-site": "cross-site"}),
    }
    for name, (data, headers) in cases.items():
        refused = http.post("/ui/store/save", data=data | {"token": TOKEN}, headers=headers)
        assert refused.status_code == 403, name
        assert "web_index_session" not in cookies_set(refused), name
    # Without the form cookie its token is worth nothing either.
    bare = httpx.post(http.base_url.join("/ui/store/save"), data=fields | {"token": TOKEN})
    assert bare.status_code == 403
    assert attempts(index) == [] and site.hits == []
    # The same form from this server's own page is taken.
    own = http.post(
        "/ui/store/save", data=fields | {"token": TOKEN}, headers={"origin": str(http.base_url).rstrip("/")}
    )
    assert own.status_code == 303


def test_bad_urls_and_refused_addresses_say_why_and_fetch_nothing(
    server: tuple[WebIndex, httpx.Client], site: Site
) -> None:
    index, http = server
    fields = form_fields(http.get("/").text) | {"token": TOKEN}
    for url, status, why in [
        ("ftp://files.example/a", 400, "&#39;ftp://files.example/a&#39; is not an http(s) URL"),
        ("", 400, "give the URL"),
        ("http://169.254.169.254/latest/meta-data/", 403, "169.254.169.254 is link-local, cloud-metadata"),
        ("http://[fe80::1]/", 403, "is link-local"),
        ("http://10.1.2.3/", 403, "private range (allow_private, --allow-private)"),
    ]:
        refused = http.post("/ui/store/save", data=fields | {"url": url})
        assert refused.status_code == status, (url, refused.text)
        assert why in refused.text, (url, refused.text)
    assert attempts(index) == [] and site.hits == []


def test_loopback_is_refused_unless_allowed(tmp_path: Path, site: Site) -> None:
    from tests.ui.save_site import fetch_config

    with saving_server(tmp_path / "store", fetch=fetch_config(loopback=False)) as (_, http):
        refused = post_save(http, site.url("/garden"), token=TOKEN)
        assert refused.status_code == 403
        assert "127.0.0.1 is loopback (allow_loopback, --allow-loopback)" in refused.text
    assert site.hits == []


def test_one_save_at_a_time_a_session_and_a_limit_for_the_server(tmp_path: Path, site: Site) -> None:
    with saving_server(tmp_path / "store", max_saves=1) as (_, http):
        first = post_save(http, site.url("/slow"), token=TOKEN)
        assert first.status_code == 303
        running = http.get(first.headers["location"])
        assert running.status_code == 200 and 'http-equiv="refresh"' in running.text
        assert "Fetching the page" in running.text
        again = post_save(http, site.url("/garden"))
        assert again.status_code == 429 and "one save at a time" in again.text
        # Another person (another session) meets the server's limit.
        with httpx.Client(base_url=http.base_url) as other:
            full = post_save(other, site.url("/garden"), token=TOKEN)
            assert full.status_code == 429 and "the most this server runs at once" in full.text
            assert full.headers["retry-after"]
        site.release.set()
        wait_done(http, first.headers["location"])
        assert post_save(http, site.url("/garden")).status_code == 303
    assert "/garden" in site.fetched()


def test_the_token_is_never_in_a_page_or_an_address(
    server: tuple[WebIndex, httpx.Client], site: Site
) -> None:
    _, http = server
    seen: list[str] = []
    sent = post_save(http, site.url("/garden"), token=TOKEN)
    seen += [sent.text, sent.headers["location"], *sent.headers.get_list("set-cookie")]
    seen += [morsel.value for morsel in cookies_set(sent).values()]  # as a browser reads them
    assert sent.headers["location"].startswith("/ui/store/save/")
    done = wait_done(http, sent.headers["location"])
    for response in (
        done,
        http.get(done.headers["location"]),
        http.get("/"),
        history(http, site.url("/garden")),
    ):
        seen += [response.text, str(response.url), response.headers.get("location", "")]
        seen += response.headers.get_list("set-cookie")
    ignored = post_save(http, site.url("/slow"), token=TOKEN + "x")  # signed in: the token is ignored
    assert ignored.status_code == 303
    seen += [ignored.text, ignored.headers.get("location", ""), *http.cookies.values()]
    assert all(TOKEN not in text and TOKEN.encode().hex() not in text for text in seen)


def test_over_tls_the_cookies_are_secure(tmp_path: Path, site: Site) -> None:
    from tests.ui.save_site import fetch_config

    async def visit(app: Any) -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://127.0.0.1") as client:
            page = await client.get("/")
            fields = form_fields(page.text) | {"url": site.url("/garden"), "token": TOKEN}
            sent = await client.post("/ui/store/save", data=fields)
            await app.state.saves.aclose()
            return page, sent

    with WebIndex(tmp_path / "store") as index:
        app = add_ui(create_app(index, write_token=TOKEN, fetch=fetch_config()))
        page, sent = asyncio.run(visit(app))
    assert cookies_set(page)["web_index_form"]["secure"]
    assert sent.status_code == 303
    assert cookies_set(sent)["web_index_session"]["secure"]

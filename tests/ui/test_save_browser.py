"""Save a page now, in a real browser (Debian's Chromium through Playwright, with
JavaScript off: the save's progress page refreshes itself): a loopback page
never fetched before is saved from its history page with the write token, ends
on its capture replayed styled from the archive, and is listed in its history;
a second save adds a capture; a slow page ends on its timeout, said; a wrong
token, a form posted from another site and the cloud-metadata address save
nothing. axe-core on every new page; the screenshot docs/ui.md shows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.ui.conftest import accessible, chromium
from tests.ui.save_site import SLOW_SECONDS, TOKEN, Site, attempts, fetch_config, live_site, saving_server
from tests.ui.test_pages import shoot
from web_index import WebIndex

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with live_site() as got:
        yield got


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebIndex, httpx.Client]]:
    with saving_server(tmp_path_factory.mktemp("save") / "store", fetch=fetch_config(browser=True)) as got:
        yield got


@pytest.fixture(scope="module")
def browser(server: tuple[WebIndex, httpx.Client]) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def tab(browser: Any, server: tuple[WebIndex, httpx.Client]) -> Iterator[Any]:
    """A tab without JavaScript: nothing here may need it."""
    context = browser.new_context(
        base_url=str(server[1].base_url), viewport={"width": 1200, "height": 900}, java_script_enabled=False
    )
    page = context.new_page()
    checker = browser.new_context(base_url=str(server[1].base_url), viewport={"width": 1200, "height": 900})
    page.checker = checker.new_page()
    yield page
    checker.close()
    context.close()


def checked(tab: Any) -> None:
    """axe-core on what ``tab`` shows now. axe runs as a script, which the tab
    does not: its page is served as it is, at its own address, to a tab with
    scripts, its refresh taken out so that it stays while checked."""
    html = re.sub(r'<meta http-equiv="refresh"[^>]*>', "", tab.content())
    checker, url = tab.checker, tab.url
    checker.route(url, lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    checker.goto(url)
    checker.unroute(url)
    accessible(checker)


def history_of(url: str) -> str:
    return f"/ui/store/history?url={quote(url, safe='')}"


def test_a_page_never_fetched_is_saved_and_replayed_styled(
    tab: Any, site: Site, server: tuple[WebIndex, httpx.Client]
) -> None:
    index, http = server
    url = site.url("/garden")
    tab.goto(history_of(url))
    assert "No attempt at this URL is stored." in tab.locator("main").inner_text()
    tab.fill("form.save input[name=token]", TOKEN)
    checked(tab)
    shoot(tab, "save")
    passed: list[str] = []
    tab.on("request", lambda r: passed.append(r.url))
    tab.click("form.save button[type=submit]")
    tab.wait_for_url(re.compile(r"/ui/store/\d{14}/"), timeout=30_000)
    assert any("/ui/store/save/" in u for u in passed)  # by way of the save's own page
    stamp = re.search(r"/ui/store/(\d{14})/(.*)$", tab.url)
    assert stamp is not None and stamp.group(2) == url
    assert tab.locator("h1").inner_text() == url
    frame = tab.frame_locator("iframe.replay")
    assert frame.locator("h1").inner_text() == "Garden"
    assert frame.locator("body").evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(4, 5, 6)"
    assert frame.locator("#pic").evaluate("img => img.naturalWidth") == 4
    checked(tab)
    # The history lists the attempt; signed in, the form asks for no token.
    tab.goto(history_of(url))
    rows = tab.locator("table.attempts tbody tr")
    assert rows.count() == 1 and rows.first.locator("td:nth-child(2)").inner_text() == "success"
    assert tab.locator("form.save input[name=token]").count() == 0
    # A second save of the same URL adds a capture.
    tab.click("form.save button[type=submit]")
    tab.wait_for_url(re.compile(r"/ui/store/\d{14}/"), timeout=30_000)
    tab.goto(history_of(url))
    assert tab.locator("table.attempts tbody tr").count() == 2
    assert tab.locator("main > p").first.inner_text().startswith("2 captures and 2 attempts")
    assert len([line for line in index.captures(url)]) == 2
    assert site.fetched().count("/garden") == 2 and "/style.css" in site.fetched()
    http.get("/")  # the server still answers


def test_a_slow_page_ends_on_its_timeout_said_in_words(tab: Any, site: Site) -> None:
    url = site.url("/slow")
    tab.goto("/")
    tab.fill("form.save input[name=url]", url)
    if tab.locator("form.save input[name=token]").count():
        tab.fill("form.save input[name=token]", TOKEN)
    tab.click("form.save button[type=submit]")
    tab.wait_for_url(re.compile(r"/ui/store/save/"))
    # Still running (its first attempt alone takes a second): it says what it fetches.
    assert tab.locator("meta[http-equiv=refresh]").count() == 1
    assert tab.locator("p.progress").inner_text() == f"Fetching the page {url}…"
    checked(tab)
    tab.wait_for_selector("p.error", timeout=30_000)  # the refreshes end on the failure
    said = tab.locator("p.error").inner_text()
    assert "its last attempt ended timeout: " in said
    # Escalated up to the browser, which timed out too: each attempt's reason is said.
    rows = tab.locator("table.attempts tbody tr")
    assert rows.locator("td:nth-child(2)").all_inner_texts() == ["10", "60"]
    assert rows.locator("td:nth-child(3)").all_inner_texts() == ["timeout", "timeout"]
    assert f"the attempt exceeded its limit of {SLOW_SECONDS:g}s" in rows.first.inner_text()
    assert rows.last.locator("td:nth-child(4)").inner_text() in said
    assert tab.locator("meta[http-equiv=refresh]").count() == 0
    checked(tab)
    tab.locator("main a", has_text="the history of").first.click()
    assert tab.locator("table.attempts tbody tr td:nth-child(2)").all_inner_texts()[0] == "timeout"


def test_a_wrong_token_another_site_and_the_metadata_address_save_nothing(
    tab: Any, server: tuple[WebIndex, httpx.Client], site: Site
) -> None:
    index, http = server
    before = len(attempts(index))
    hits = len(site.hits)
    tab.goto(history_of(site.url("/private-never")))
    tab.fill("form.save input[name=token]", "not the token")
    answer = _submitted(tab)
    assert answer.status == 401
    assert "not this server's write token" in tab.locator("p.error").inner_text()
    checked(tab)
    tab.goto("/")
    tab.fill("form.save input[name=url]", "http://169.254.169.254/latest/meta-data/")
    tab.fill("form.save input[name=token]", TOKEN)
    answer = _submitted(tab)
    assert answer.status == 403
    assert "169.254.169.254 is link-local, cloud-metadata" in tab.locator("p.error").inner_text()
    checked(tab)
    # Signed in now; a page of another site (another origin) posts a save form here.
    evil = site.url("/evil?to=" + quote(str(http.base_url.join("/ui/store/save")), safe=""))
    tab.goto(evil)
    answer = _submitted(tab, "form button")
    assert answer.status == 403
    assert len(attempts(index)) == before and len(site.hits) == hits + 1  # the evil page alone


def _submitted(tab: Any, button: str = "form.save button[type=submit]") -> Any:
    with tab.expect_navigation() as navigation:
        tab.click(button)
    return navigation.value

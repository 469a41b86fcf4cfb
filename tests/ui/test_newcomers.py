"""What a new user looks for first (issue 51): why each attempt failed, what
the store holds, every page on a phone, numbers and dates as people read them.
In Debian's Chromium through Playwright, on the store of ``conftest.py``."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.server.serving import serving
from tests.ui.conftest import ESCALATED, HOSTILE_TEXT, MANY, SITE, WHY, Archive, accessible
from tests.ui.test_pages import shoot
from web_index import WebIndex

pytestmark = pytest.mark.browser


def test_every_failed_attempt_says_why_and_an_escalation_its_chain(tab: Any) -> None:
    tab.goto(f"/ui/store/history?url={quote(SITE + '/')}")
    timeout = tab.locator("tr.state-row-timeout").locator("td.why-cell")
    assert timeout.inner_text().strip() == WHY["timeout"]
    blocked = tab.locator("tr.state-row-blocked").locator("td.why-cell details")
    # Short in the row; the whole log (and the traceback) one click away, as text.
    summary = blocked.locator("summary").inner_text()
    assert summary.startswith("1 response(s); bot protection (cf-mitigated: challenge)")
    assert len(summary) <= 81
    assert not blocked.locator("pre").is_visible()
    blocked.locator("summary").click()
    full = blocked.locator("pre").inner_text()
    assert WHY["blocked"] in full and HOSTILE_TEXT in full and "Traceback" in full
    assert tab.locator("main img").count() == 0 and tab.dialogs == []
    successes = tab.locator("tr.state-row-success").locator("td.why-cell")
    assert set(successes.all_inner_texts()) == {"—"}
    accessible(tab)
    tab.goto(f"/ui/store/history?url={quote(ESCALATED)}")
    chain = tab.locator("table.attempts tbody tr").first.locator(".fetch-chain")
    assert chain.inner_text() == "test-fetcher: low-quality → test-browser: success"
    failed = tab.locator("table.attempts tbody tr").nth(1).locator("td.why-cell")
    assert failed.inner_text().strip() == WHY["low-quality"]


def test_a_domains_failures_say_why(tab: Any) -> None:
    tab.goto("/ui/store/domain?d=site.test")
    why = tab.locator("tr.state-row-error").first.locator("td.why-cell")
    assert why.inner_text().strip() == WHY["error"]
    assert tab.input_value("#top-url") == "*.site.test"
    accessible(tab)


def test_counts_read_as_people_read_them_and_the_chart_has_an_axis(tab: Any, archive: Archive) -> None:
    tab.goto("/ui/store/")
    summary = tab.locator("main > p").first.inner_text()
    assert re.match(r"[\d,]+ records and \d{1,3}(,\d{3})+ bytes in [\d,]+ files", summary), summary
    axis = tab.locator("figure.chart svg g.axis text").all_text_contents()
    assert (
        len(axis) >= 3
        and axis[0] == "0"
        and [int(t.replace(",", "")) for t in axis] == sorted(int(t.replace(",", "")) for t in axis)
    )
    label = tab.locator("figure.chart svg > text").first.bounding_box()
    assert label is not None and label["height"] >= 12  # drawn, at the page's size, no smaller than 12 px
    tab.goto(f"/ui/search?site={archive.crawled}&q=spade")
    assert tab.locator("h2").first.inner_text() == f"1 page of {archive.crawled} matches “spade”"
    for path in ("/ui/store/", f"/ui/store/history?url={quote(ESCALATED)}", "/lookup?url=other.site.test"):
        tab.goto(path)
        text = tab.locator("main").inner_text()
        assert not re.search(r"\b1 (pages|files|captures|attempts|URLs|records|lines|bytes)\b", text), path


def test_dates_are_readable_the_lookup_box_keeps_what_was_asked_and_there_is_an_icon(
    tab: Any, archive: Archive
) -> None:
    first, second = (f"{t:%Y%m%d%H%M%S}" for t in archive.home_captures[:2])
    tab.goto(f"/ui/store/{first}/{SITE}/")
    shown = tab.locator("p.when time")
    assert shown.inner_text() == f"{archive.home_captures[0]:%Y-%m-%d %H:%M:%S} UTC"
    assert shown.get_attribute("title") == first
    assert shown.get_attribute("datetime") == f"{archive.home_captures[0]:%Y-%m-%dT%H:%M:%S}Z"
    assert tab.input_value("#top-url") == f"{SITE}/"
    tab.goto(f"/ui/store/compare?url={quote(SITE + '/')}&a={first}&b={second}")
    assert not re.search(r"\d{14}", tab.locator("main").inner_text())
    assert tab.locator("main time").count() == 4 and tab.locator(f"main time[title='{second}']").count() == 2
    tab.goto(f"/ui/store/history?url={quote(SITE + '/')}&year=2024")
    assert (
        tab.locator("#cmp-a option").first.inner_text() == f"{archive.home_captures[0]:%Y-%m-%d %H:%M:%S} UTC"
    )
    assert tab.input_value("#top-url") == f"{SITE}/"
    tab.goto("/lookup?url=site.test/blog/*")
    assert tab.input_value("#top-url") == "site.test/blog/*"
    icon = "async () => { const i = new Image(); i.src = '/favicon.ico'; await i.decode(); return i.width; }"
    width = tab.evaluate(icon)
    assert width == 32


def test_the_sites_pages_and_build_time_show_before_any_search(browser: Any, archive: Archive) -> None:
    """On a server just started, as after a crawl (issue 47): not "—" until a search."""
    with WebIndex(archive.store, read_only=True) as index, serving(index, ui=True) as fresh:
        context = browser.new_context(base_url=str(fresh.base_url))
        try:
            tab = context.new_page()
            tab.goto("/ui/search")
            row = tab.locator("table.sites tbody tr", has_text=archive.crawled).locator("td")
            site, generation, pages, built, size = row.all_inner_texts()
            assert (site, pages) == (archive.crawled, "3") and int(generation) >= 1
            assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", built) and int(size.replace(",", "")) > 0
        finally:
            context.close()


def test_the_home_page_shows_what_the_store_holds_and_one_lookup_field(tab: Any, archive: Archive) -> None:
    tab.goto("/")
    assert tab.locator("form[action='/lookup']").count() == 1 and tab.locator("#top-url").count() == 0
    rows = {
        r.locator("td").first.inner_text(): r.locator("td").all_inner_texts()[1:]
        for r in tab.locator("table.held tbody tr").all()
    }
    held = tab.locator("table.held tbody tr td:first-child").all_inner_texts()
    assert held[0] == "127.0.0.1"  # crawled today: the most recent
    assert set(held) == {"127.0.0.1", "site.test", "other.site.test", "escalated.test", "refused.test"}
    _, captures, attempts, failed = rows["site.test"]
    # /: 3 captures, 2 failures; its stylesheet, image, /old, /about, /hostile; /many; 3 posts
    assert (int(attempts), int(failed)) == (5 + 5 + MANY + 3, 2 + MANY // 5)
    assert int(captures) == 3 + 2 + 2 + 1 + 1 + (MANY - MANY // 5) + 3  # /old: two responses
    assert rows["refused.test"][1:] == ["0", "1", "1"]
    recent = tab.locator("ol.recent li time").evaluate_all("ts => ts.map(t => t.getAttribute('title'))")
    assert recent and recent == sorted(recent, reverse=True) and recent[0] > "2025"  # the crawl's, today
    assert tab.locator("ol.recent a").first.inner_text().startswith(f"http://{archive.crawled}/")
    accessible(tab)
    tab.locator("ol.recent a").first.click()  # to the capture that attempt stored
    assert tab.locator("iframe.replay").count() == 1 and tab.locator("h1").inner_text().startswith("http://")
    tab.goto("/")
    tab.locator("table.held a", has_text="refused.test").click()  # its URLs: attempted, never captured
    row = tab.locator("table.urls tbody tr").first.locator("td").all_inner_texts()
    assert row == ["http://refused.test/", "0", "1", "1"]
    tab.locator("table.urls a").first.click()
    assert tab.locator("tr.state-row-error td.why-cell").inner_text().strip() == WHY["error"]


def test_a_host_lookup_counts_every_attempt_failures_included(tab: Any, archive: Archive) -> None:
    tab.goto(f"/lookup?url={archive.crawled}")  # as the README's first hour does
    assert "attempts" in tab.locator("table.urls thead").inner_text().lower()
    assert tab.locator("table.urls tbody tr").count() >= 3
    tab.goto("/lookup?url=site.test")
    many = tab.locator("table.urls tbody tr", has_text=f"{SITE}/many").locator("td").all_inner_texts()
    assert many[1:] == ["200", "250", "50"]
    said = tab.locator("main > p").first.inner_text()
    assert f"{5 + 5 + MANY + 3} attempts, {2 + MANY // 5} failed," in said


def test_every_page_fits_a_phones_width(browser: Any, ui: httpx.Client, archive: Archive) -> None:
    first, second = (f"{t:%Y%m%d%H%M%S}" for t in archive.home_captures[:2])
    pages = [
        "/",
        "/lookup?url=site.test",
        f"/ui/store/history?url={quote(SITE + '/')}&year=2024",
        f"/ui/store/history?url={quote(SITE + '/many')}",
        f"/ui/store/{first}/{SITE}/",
        f"/ui/store/20240301/{SITE}/old",
        f"/ui/store/20240301/{SITE}/hostile",
        f"/ui/store/compare?url={quote(SITE + '/')}&a={first}&b={second}",
        f"/ui/search?site={archive.crawled}&q=garden",
        "/ui/store/",
        "/ui/store/domain?d=site.test",
        "/ui/store/history?url=http://never.test/x",
    ]
    context = browser.new_context(base_url=str(ui.base_url), viewport={"width": 390, "height": 844})
    try:
        phone = context.new_page()
        wide = {}
        for path in pages:
            phone.goto(path)
            width = phone.evaluate("document.scrollingElement.scrollWidth")
            if width > 390:
                wide[path] = width
        assert wide == {}
        phone.goto(f"/ui/store/history?url={quote(SITE + '/')}")
        top = phone.locator("h2", has_text="Attempts").bounding_box()
        assert top is not None
        phone.mouse.wheel(0, top["y"] - 8)
        phone.wait_for_timeout(200)
        shoot(phone, "history-phone")
    finally:
        context.close()

"""The web pages in a real browser (Debian's Chromium through Playwright), on a
store filled through the command line: looking up a URL and seeing its failed
attempts, paging, a prefix lookup, a capture replayed from the archive with
its stylesheet and image, hostile archived content kept in its sandbox, every
archived string shown as text, each page without JavaScript, and axe-core on
every page. Screenshots for docs/ui.md are written here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.archive.pywb import running_pywb_remote
from tests.ui.conftest import HOSTILE_TEXT, MANY, SITE, Archive, accessible

pytestmark = pytest.mark.browser

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ui"
SHOTS = (
    "home",
    "lookup",
    "history",
    "capture",
    "compare",
    "search",
    "overview",
    "domain",
    "history-phone",
    "save",
)  # what docs/ui.md shows, each taken below (save: in test_save_browser.py)


def shoot(page: Any, name: str) -> None:
    """The page as docs/ui.md shows it."""
    assert name in SHOTS
    DOCS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS / f"{name}.png"), full_page=False)


def test_a_lookup_shows_every_attempt_failures_included(tab: Any, archive: Archive) -> None:
    tab.goto("/")
    accessible(tab)
    shoot(tab, "home")
    tab.fill("input[name=url]#url", f"{SITE}/")
    tab.click("form.hero button[type=submit]")
    tab.wait_for_url(re.compile(r"/ui/store/history\?url="))
    rows = tab.locator("table.attempts tbody tr")
    assert rows.count() == len(archive.home_captures) + len(archive.failures)
    states = rows.locator("td:nth-child(2)").all_inner_texts()
    times = rows.locator("td:nth-child(1)").all_inner_texts()
    everything = sorted(
        [(t, "success") for t in archive.home_captures] + list(archive.failures), reverse=True
    )  # newest first
    assert times == [t.strftime("%Y-%m-%d %H:%M:%S") for t, _ in everything]
    assert states == [s for _, s in everything]
    # A failure shows its calibre and no capture; a success links to its capture.
    timeout = rows.filter(has_text="timeout")
    assert timeout.locator("td:nth-child(4)").inner_text() == "20"
    assert timeout.locator("td:nth-child(6)").inner_text() == "—"
    # The calendar: one year per capture year, days with captures linked.
    assert tab.locator(".years a").all_inner_texts() == ["2024 2", "2025 1"]
    assert tab.locator(".calendar td.hit a").count() == 1  # 2025 is the year shown first (the latest)
    accessible(tab)
    shoot(tab, "history")
    tab.click(".years a >> text=2024")
    assert tab.locator(".calendar td.hit a").count() == 2


def test_many_attempts_are_paged(tab: Any) -> None:
    tab.goto(f"/ui/store/history?url={quote(SITE + '/many')}")
    seen: list[str] = []
    while True:
        rows = tab.locator("table.attempts tbody tr td:nth-child(1)").all_inner_texts()
        assert 0 < len(rows) <= 100
        seen += rows
        following = tab.locator("nav.pager a[rel=next]")
        if following.count() == 0:
            break
        following.click()
    assert len(seen) == MANY and seen == sorted(seen, reverse=True) and len(set(seen)) == MANY


def test_a_prefix_lookup_lists_the_urls_under_it(tab: Any) -> None:
    tab.goto("/")
    tab.fill("#url", "site.test/blog/*")
    tab.click("form.hero button[type=submit]")
    links = tab.locator("table.urls tbody tr td:first-child a")
    assert links.all_inner_texts() == [f"{SITE}/blog/post-{i}" for i in range(3)]
    accessible(tab)
    shoot(tab, "lookup")
    links.first.click()
    assert tab.locator("h1").inner_text() == f"{SITE}/blog/post-0"
    tab.goto("/lookup?url=site.test")  # a bare host: every URL of the host
    assert f"{SITE}/about" in tab.locator("table.urls").inner_text()
    assert "other.site.test" not in tab.locator("table.urls").inner_text()


def test_a_capture_is_replayed_from_the_archive_with_its_stylesheet_and_image(
    tab: Any, archive: Archive, ui: httpx.Client
) -> None:
    requested: list[str] = []
    tab.on("request", lambda r: requested.append(r.url))
    first = archive.home_captures[0].strftime("%Y%m%d%H%M%S")
    tab.goto(f"/ui/store/{first}/{SITE}/")
    assert tab.locator("p.title").inner_text() == "Home of the site"
    frame = tab.frame_locator("iframe.replay")
    assert frame.locator("h1").inner_text() == "Hello 0 from the archive"
    background = frame.locator("body").evaluate("b => getComputedStyle(b).backgroundColor")
    assert background == "rgb(1, 2, 3)"  # the archived stylesheet applied
    assert frame.locator("#logo").evaluate("img => img.naturalWidth") == 4  # the archived image
    assert all(u.startswith(str(ui.base_url)) for u in requested), requested
    assert archive.live_hits == []
    # Previous / next: the second capture, and back.
    tab.click("a[rel=next]")
    assert tab.frame_locator("iframe.replay").locator("h1").inner_text() == "Hello 1 from the archive"
    accessible(tab)
    shoot(tab, "capture")
    # A timestamp between captures goes to the closest one's own address.
    tab.goto(f"/ui/store/20240304/{SITE}/")  # the end of that day: nearer the 5th than the 1st
    assert tab.url.endswith(f"/ui/store/{archive.home_captures[1]:%Y%m%d%H%M%S}/{SITE}/")


def test_a_redirect_chain_is_shown_hop_by_hop(tab: Any) -> None:
    tab.goto(f"/ui/store/20240301/{SITE}/old")
    hops = tab.locator("ol.chain > li summary").all_inner_texts()
    assert [h.split()[0] for h in hops] == ["301", "200"]
    assert f"{SITE}/about" in hops[1]
    assert f"{SITE}/about" in tab.locator("ol.chain > li").first.locator("table").inner_text()  # its Location


def test_hostile_archived_content_stays_in_its_sandbox(tab: Any, archive: Archive, ui: httpx.Client) -> None:
    tab.goto(f"/ui/store/20240301/{SITE}/hostile")
    tab.wait_for_load_state("networkidle")
    tab.wait_for_timeout(500)
    assert tab.title().endswith("web-index") and "pwned" not in tab.content()
    assert tab.context.cookies() == []
    assert tab.url.startswith(str(ui.base_url))
    assert archive.live_hits == []
    assert tab.dialogs == []
    # Every archived string is text: the title, the header value, the URL.
    assert tab.locator("p.title").inner_text() == HOSTILE_TEXT
    assert HOSTILE_TEXT in tab.locator("ol.chain").inner_text()
    assert tab.locator("main img").count() == 0 and tab.locator("main script").count() == 0
    assert "49" not in tab.locator("p.title").inner_text()
    frame = ui.get(f"/ui/store/20240301if_/{SITE}/hostile")
    policy = frame.headers["content-security-policy"]
    assert (
        policy.startswith("sandbox;") and "allow-same-origin" not in policy and "script-src 'none'" in policy
    )
    live = archive.live.url("").rstrip("/")
    named = [m.start() for m in re.finditer(re.escape(live), frame.text.split("<script>try")[0])]
    assert len(named) == 5  # the stylesheet, script, refresh, image and frame: each into the archive
    assert all(frame.text[:i].endswith("20240301if_/") for i in named)
    # The raw memento, unrewritten, opened in the browser: the policy alone keeps it in.
    tab.goto(f"/store/20240301id_/{SITE}/hostile")
    tab.wait_for_timeout(500)
    assert archive.live_hits == [] and tab.context.cookies() == [] and tab.dialogs == []


def test_two_captures_are_compared(tab: Any, archive: Archive) -> None:
    tab.goto(f"/ui/store/history?url={quote(SITE + '/')}&year=2024")
    stamps = [f"{t:%Y%m%d%H%M%S}" for t in archive.home_captures[:2]]
    tab.select_option("#cmp-a", stamps[0])
    tab.select_option("#cmp-b", stamps[1])
    tab.click("form.compare-form button")
    assert [" ".join(t.split()) for t in tab.locator(".diff li.del").all_text_contents()] == [
        "Removed: Hello 0 from the archive"
    ]
    assert [" ".join(t.split()) for t in tab.locator(".diff li.ins").all_text_contents()] == [
        "Added: Hello 1 from the archive"
    ]
    assert "content-type" in tab.locator("table.compare-headers").inner_text()
    accessible(tab)
    shoot(tab, "compare")
    # From a capture page: the previous one against it.
    tab.goto(f"/ui/store/{stamps[1]}/{SITE}/")
    tab.click("text=Compare with the previous capture")
    assert tab.locator(".diff li.ins").count() == 1


def test_a_crawled_site_is_searched_with_its_snippets_as_text(tab: Any, archive: Archive) -> None:
    tab.goto("/")
    tab.click("text=Site search")
    tab.select_option("#site", archive.crawled)
    tab.fill("#q", "garden")
    tab.click("form.site-search button")
    assert tab.locator("h2").first.inner_text() == f"3 pages of {archive.crawled} match “garden”"
    assert tab.locator(".snippet mark").first.inner_text().lower() == "garden"
    hostile = tab.locator(".hits li", has_text="Hostile")
    assert HOSTILE_TEXT in hostile.locator(".snippet").inner_text() and tab.dialogs == []
    assert tab.locator(".hits img, .hits script").count() == 0
    status = tab.locator("table.sites tbody tr", has_text=archive.crawled).locator("td").all_inner_texts()
    assert status[0] == archive.crawled and status[2] == "3"  # three pages packed, the requisites not
    accessible(tab)
    shoot(tab, "search")
    hostile.locator("a").click()  # into the archive: the URL's history, not the live site
    assert tab.url.startswith(f"{tab.url.split('/ui/')[0]}/ui/store/history?url=")


def test_the_overview_charts_states_mixes_and_failing_domains(tab: Any, archive: Archive) -> None:
    tab.goto("/")
    tab.click("text=overview")
    failed = len(archive.failures) + MANY // 5  # the home page's two, every fifth of /many
    rows = tab.locator("table.failing tbody tr")
    assert rows.first.locator("td").all_inner_texts() == ["site.test", str(failed)]
    # The chart and its table agree: one stacked column a month, the table's numbers.
    states = tab.locator("table.states tbody tr")
    assert tab.locator("figure.chart svg g.column").count() == states.count() > 0
    total = sum(int(r.locator("td").last.inner_text().replace(",", "")) for r in states.all())
    assert tab.locator("table.bars").first.locator("tbody tr td.num").all_inner_texts() != []
    assert total == sum(
        int(n.replace(",", "")) for n in tab.locator("table.bars").first.locator("td.num").all_inner_texts()
    )
    accessible(tab)
    shoot(tab, "overview")
    rows.first.locator("a").click()
    assert tab.locator("h1").inner_text() == "site.test"
    listed = tab.locator("table.attempts tbody tr")
    assert listed.count() == min(failed, 100)
    assert set(listed.locator("td:nth-child(2)").all_inner_texts()) == {"error", "timeout", "blocked"}
    accessible(tab)
    shoot(tab, "domain")


def test_a_page_crawled_with_its_requisites_replays_styled_here_and_in_pywb(
    tab: Any, archive: Archive, ui: httpx.Client, tmp_path: Path
) -> None:
    """The crawled site's server is gone: whatever the replays show came from the archive."""
    home = f"http://{archive.crawled}/"
    requested: list[str] = []
    tab.on("request", lambda r: requested.append(r.url))
    tab.goto(f"/ui/store/*/{home}")
    tab.locator("table.attempts a").first.click()
    frame = tab.frame_locator("iframe.replay")
    assert frame.locator("h1").inner_text() == "Garden home"
    assert frame.locator("body").evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(4, 5, 6)"
    assert frame.locator("#pic").evaluate("img => img.naturalWidth") == 4
    assert requested and all(u.startswith(str(ui.base_url)) for u in requested), requested

    stamp = tab.url.split("/ui/store/", 1)[1].split("/", 1)[0]
    with running_pywb_remote(f"cdx+{str(ui.base_url).rstrip('/')}/store/cdx", tmp_path / "pywb") as pywb:
        pywb_requests: list[str] = []
        tab.on("request", lambda r: pywb_requests.append(r.url))
        tab.goto(f"{pywb.base_url}/{pywb.collection}/{stamp}/{home}")  # pywb's framed replay
        replayed = tab.frame_locator("#replay_iframe")
        assert replayed.locator("h1").inner_text() == "Garden home", pywb.log_tail()
        assert replayed.locator("body").evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(4, 5, 6)"
        assert replayed.locator("#pic").evaluate("img => img.naturalWidth") == 4, pywb.log_tail()
        assert all(u.startswith(pywb.base_url) for u in pywb_requests), pywb_requests


def test_the_pages_work_without_javascript(browser: Any, ui: httpx.Client, archive: Archive) -> None:
    context = browser.new_context(base_url=str(ui.base_url), java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto("/")
        page.fill("#url", f"{SITE}/")
        page.press("#url", "Enter")
        assert page.locator("table.attempts tbody tr").count() == 5
        page.locator("table.attempts a").first.click()
        assert page.locator("h1").inner_text() == f"{SITE}/"
        page.goto("/ui/store/")
        assert "records" in page.locator("main").inner_text()
    finally:
        context.close()


def test_bad_addresses_are_pages_that_say_why(ui: httpx.Client) -> None:
    for path, status, says in [
        ("/lookup?url=", 400, "give a URL"),
        ("/ui/nope/history?url=http://a.test/", 404, "no collection"),
        ("/ui/store/history?url=http://never.test/x", 200, "No attempt at this URL"),
        (f"/ui/store/20240301/{SITE}/never", 404, "was never captured"),
        (f"/ui/store/history?url={quote(SITE + '/many')}&page=9", 404, "page 9: there are 3"),
        ("/ui/store/12345678901234567/x", 404, "not a page"),
    ]:
        got = ui.get(path)
        assert got.status_code == status, (path, got.text)
        assert got.headers["content-type"].startswith("text/html") and says in got.text, path
        assert "default-src 'none'" in got.headers["content-security-policy"]


def test_the_docs_show_the_screenshots_these_tests_take() -> None:
    shown = re.findall(r"!\[[^\]]*\]\(ui/([a-z-]+)\.png\)", (DOCS.parent / "ui.md").read_text())
    assert sorted(shown) == sorted(SHOTS)
    assert all((DOCS / f"{name}.png").is_file() for name in SHOTS)

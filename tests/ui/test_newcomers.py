"""What a new user looks for first (issue 51): why each attempt failed, what
the store holds, every page on a phone, numbers and dates as people read them.
In Debian's Chromium through Playwright, on the store of ``conftest.py``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from tests.ui.conftest import ESCALATED, HOSTILE_TEXT, SITE, WHY, accessible

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
    accessible(tab)

"""Who may save a page from the browser, and that the request is theirs.

Signing in (the write token, once, in the save form) makes a session: a random
id in an ``HttpOnly``, ``SameSite=Strict`` cookie that expires (``Secure`` over
TLS), mapped here to its expiry and its running save. The token itself is never
put in a cookie, a URL or a page. Every form that writes carries a CSRF token:
an HMAC, under a key of this process, of a random value in a cookie of its own
(a double-submit cookie, so that a visitor not signed in needs no state here);
a POST without it, or from another site's ``Origin``, is refused before
anything else is looked at.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from web_index.ui._render import UiError

__all__ = ["FORM_COOKIE", "SESSION_COOKIE", "SESSION_SECONDS", "SaveForm", "Session", "Sessions", "read_form"]

SESSION_COOKIE = "web_index_session"
FORM_COOKIE = "web_index_form"
SESSION_SECONDS = 8 * 3600
MAX_SESSIONS = 1000  # signed in at once; past it the oldest is signed out
_MAX_FORM = 16 * 1024  # a URL, a token and a CSRF token


@dataclass(slots=True)
class Session:
    expires: float  # time.monotonic()
    save: str | None = None  # the id of its latest save


@dataclass(frozen=True, slots=True)
class SaveForm:
    """What a page's save form needs: its CSRF token, whether the visitor is
    signed in (no token field then), and a form cookie to set (a new visitor's)."""

    csrf: str
    signed_in: bool
    new_cookie: str | None = None

    def remembered(self, request: Request, response: Response) -> Response:
        """``response`` with the visitor's form cookie set, when it is new."""
        if self.new_cookie is not None:
            set_cookie(request, response, FORM_COOKIE, self.new_cookie)
        return response


def set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int = SESSION_SECONDS
) -> None:
    """A cookie only this server's own pages send back, never to scripts, expiring."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


class Sessions:
    """The signed-in sessions of one app, and its key for CSRF tokens."""

    def __init__(self, token: bytes) -> None:
        self._token = token
        self._key = secrets.token_bytes(32)
        self._by_id: dict[str, Session] = {}

    def form(self, request: Request) -> SaveForm:
        """The save form for this visitor (a new form cookie when it has none)."""
        value = request.cookies.get(FORM_COOKIE, "")
        new = None
        if not _well_formed(value):
            value = new = secrets.token_urlsafe(32)
        return SaveForm(self._csrf(value), self.current(request) is not None, new)

    def _csrf(self, value: str) -> str:
        return hmac.new(self._key, b"csrf\0" + value.encode(), hashlib.sha256).hexdigest()

    def check_request(self, request: Request, fields: dict[str, str]) -> None:
        """A 403 for a request another site made: another ``Origin``, or no CSRF token of ours."""
        origin = request.headers.get("origin")
        fetched_from = request.headers.get("sec-fetch-site")  # set by browsers, never by a page
        if fetched_from not in (None, "same-origin"):
            raise UiError(403, f"Sec-Fetch-Site: {fetched_from}: saves are made from this server's pages")
        # The pages send no referrer, so a browser says "Origin: null" of their forms: then the
        # browser's Sec-Fetch-Site must vouch for them.
        own = origin == f"{request.url.scheme}://{request.url.netloc}"
        if origin is not None and not own and not (origin == "null" and fetched_from == "same-origin"):
            raise UiError(403, f"Origin: {origin} is another site: saves are made from this server's pages")
        value = request.cookies.get(FORM_COOKIE, "")
        given = fields.get("csrf", "")
        if not (_well_formed(value) and hmac.compare_digest(given.encode(), self._csrf(value).encode())):
            raise UiError(403, "csrf: the form's token is missing or stale: load the page again and resend")

    def current(self, request: Request) -> Session | None:
        """The visitor's session, if signed in and not expired."""
        sid = request.cookies.get(SESSION_COOKIE, "")
        found = self._by_id.get(sid) if _well_formed(sid) else None
        if found is not None and found.expires <= time.monotonic():
            del self._by_id[sid]
            return None
        return found

    def sign_in(self, given: str) -> tuple[str, Session] | None:
        """A new session when ``given`` is the write token (compared in constant time)."""
        if not hmac.compare_digest(given.strip().encode(), self._token):
            return None
        now = time.monotonic()
        for sid in [s for s, found in self._by_id.items() if found.expires <= now]:
            del self._by_id[sid]
        while len(self._by_id) >= MAX_SESSIONS:
            del self._by_id[next(iter(self._by_id))]
        sid = secrets.token_urlsafe(32)
        self._by_id[sid] = session = Session(expires=now + SESSION_SECONDS)
        return sid, session

    def sign_out(self, request: Request) -> None:
        self._by_id.pop(request.cookies.get(SESSION_COOKIE, ""), None)


def _well_formed(value: str) -> bool:
    # token_urlsafe(32) gives 43 characters of [A-Za-z0-9_-].
    return len(value) == 43 and all(c.isascii() and (c.isalnum() or c in "-_") for c in value)


async def read_form(request: Request) -> dict[str, str]:
    """The fields of a form POSTed as ``application/x-www-form-urlencoded`` (the
    first of each name), at most 16 KiB; a 400 for anything else."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise UiError(400, f"Content-Type: {media or 'none'}: send the page's form")
    size, chunks = 0, []
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > _MAX_FORM:
                raise UiError(413, f"the form is over {_MAX_FORM:,} bytes: send a URL, not a document")
            chunks.append(chunk)
    except ClientDisconnect:
        raise UiError(400, "the form was cut short") from None
    try:
        parsed = parse_qs(b"".join(chunks).decode(), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise UiError(400, "the form is not UTF-8 form fields") from None
    return {name: values[0] for name, values in parsed.items()}

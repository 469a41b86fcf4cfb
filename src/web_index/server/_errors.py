"""Errors as JSON: ``{"error": ..., "parameter": ...}`` with the status that says whose fault it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web_index.archive import SourceUnavailableError
from web_index.errors import InvalidRecordError, WebIndexError

__all__ = ["HANDLERS", "ApiError", "bad_parameter"]


class ApiError(Exception):
    """An answer other than 200: ``status``, a one-line ``message``, the
    query ``parameter`` at fault when there is one, and any ``headers`` the status needs."""

    def __init__(
        self,
        status: int,
        message: str,
        parameter: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.parameter = parameter
        self.headers = headers


def bad_parameter(name: str, problem: str) -> ApiError:
    return ApiError(400, f"{name}: {problem}", name)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    body: dict[str, Any] = {"error": exc.message}
    if exc.parameter is not None:
        body["parameter"] = exc.parameter
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    # Input found wrong only once looked at (a URL a store cannot key): still the asker's.
    assert isinstance(exc, InvalidRecordError)
    return await _api_error(request, bad_parameter(exc.field, exc.problem))


async def _unavailable(request: Request, exc: Exception) -> Response:
    # A remote archive or the live web did not answer: not "not archived", and not our fault.
    return JSONResponse({"error": str(exc)}, status_code=503)


async def _failed(request: Request, exc: Exception) -> Response:
    # A damaged database or an unreachable store: the server's fault, said in one line.
    return JSONResponse({"error": str(exc)}, status_code=500)


HANDLERS: Mapping[Any, Any] = {
    ApiError: _api_error,
    HTTPException: _http_error,
    InvalidRecordError: _invalid,
    SourceUnavailableError: _unavailable,
    WebIndexError: _failed,
}

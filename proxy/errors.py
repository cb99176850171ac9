"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

Every failure the gateway answers goes through here, so a harness's SDK
always gets an error body it can parse, and never a bare 500 traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("polar.gateway")


class OpenAIError(Exception):
    """An error the caller gets as an OpenAI-shaped JSON body with `status_code`."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type or default_type(status_code)
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status_code)


def default_type(status_code: int) -> str:
    """OpenAI's `type` for a status: client errors are `invalid_request_error`."""
    if status_code == 401:
        return "invalid_request_error"
    if status_code == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status_code < 500 else "server_error"


def error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


async def _openai_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OpenAIError)
    return exc.response()


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    message = first.get("msg", "invalid request")
    if loc:
        message = f"{'.'.join(loc)}: {message}"
    return OpenAIError(400, message, param=".".join(loc) or None).response()


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    err = OpenAIError(exc.status_code, str(exc.detail), code=code)
    return JSONResponse(err.body(), status_code=exc.status_code, headers=exc.headers)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return OpenAIError(
        500, f"internal gateway error: {type(exc).__name__}", code="internal_error"
    ).response()


def install_error_handlers(app: FastAPI) -> None:
    """Make every error the app answers OpenAI-shaped (400 for unparsable requests)."""
    app.add_exception_handler(OpenAIError, _openai_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)

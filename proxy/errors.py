"""Errors rendered in the caller's own shape (OpenAI, Anthropic or Google).

Inside the gateway a failure is a provider-neutral `APIError` (status,
message, code); at the edge the handlers here render it with the provider
API the call speaks (`polar.providers.detect` on its path and headers), so a
harness's SDK always gets an error body it parses into its typed exception,
and never a bare 500 traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from polar.outcomes import GATEWAY_FAULT_CODES, GATEWAY_FAULT_HEADER
from polar.providers import APIError, ProviderAPI, detect

log = logging.getLogger("polar.gateway")


def provider_for(request: Request) -> ProviderAPI:
    """The provider API a request speaks (by its path and headers)."""
    return detect(request.url.path, request.headers)


def error_response(
    request: Request, exc: APIError, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """`exc` as a JSON response in the shape of the request's provider API."""
    status, body = provider_for(request).render_error(exc)
    if exc.code in GATEWAY_FAULT_CODES:
        headers = {**(headers or {}), GATEWAY_FAULT_HEADER: exc.code or ""}
    return JSONResponse(body, status_code=status, headers=headers)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return error_response(request, exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    message = first.get("msg", "invalid request")
    if loc:
        message = f"{'.'.join(loc)}: {message}"
    return error_response(request, APIError(400, message, param=".".join(loc) or None))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    err = APIError(exc.status_code, str(exc.detail), code=code)
    return error_response(request, err, headers=exc.headers)


def unexpected_error_response(request: Request, exc: Exception) -> JSONResponse:
    """A bug's 500, logged with its traceback, in the caller's shape (no details leak)."""
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    err = APIError(500, f"internal gateway error: {type(exc).__name__}", code="internal_error")
    return error_response(request, err)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    return unexpected_error_response(request, exc)


def install_error_handlers(app: FastAPI) -> None:
    """Make every error the app answers shaped for its caller (400 for unparsable requests)."""
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)

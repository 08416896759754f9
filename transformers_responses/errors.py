"""Errors: the one exception hierarchy of the plugin, and the one place that maps exceptions to OpenAI errors.

    ResponsesError                 any error we answer in the OpenAI envelope
    ├── InvalidRequestError        400 invalid_request_error (bad field, bad value, unknown field)
    │   └── UnsupportedError       400 for a field or value this server does not implement (yet)
    ├── NotFoundError              404 (unknown model, unknown id)
    └── ServerError                500 server_error (a fault of ours or the model's)

    ConfigurationError             a bad server option (e.g. an unknown store URL), reported at start-up

Every HTTP error body is `{"error": {"message", "type", "param", "code"}}`; every stream error is an `error` event with the
same fields flat, followed by `response.failed`. `from_exception` is the only translation point.
"""

from __future__ import annotations

from typing import Any


class ResponsesError(Exception):
    """An error answered in the OpenAI error envelope."""

    status_code: int = 500
    error_type: str = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}


class InvalidRequestError(ResponsesError):
    status_code = 400
    error_type = "invalid_request_error"


class UnsupportedError(InvalidRequestError):
    """A valid OpenAI field or value that this server does not implement; answered 400 rather than ignored."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = "unsupported_parameter") -> None:
        super().__init__(message, param=param, code=code)


class NotFoundError(ResponsesError):
    status_code = 404
    error_type = "invalid_request_error"


class ServerError(ResponsesError):
    status_code = 500
    error_type = "server_error"


class ConfigurationError(ValueError):
    """A server option that cannot work (e.g. `--responses-store` with an unknown scheme); raised at start-up."""


def from_exception(exc: BaseException) -> ResponsesError:
    """Map any exception to a `ResponsesError`: ours as they are, host errors by meaning, the rest as a server error."""
    if isinstance(exc, ResponsesError):
        return exc
    # Imported lazily: the host's serving stack is only importable with its [serving] extra.
    from fastapi import HTTPException

    if isinstance(exc, HTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            return NotFoundError(detail, code="model_not_found")
        if 400 <= exc.status_code < 500:
            err = InvalidRequestError(detail)
            err.status_code = 400 if exc.status_code == 422 else exc.status_code
            return err
        return ServerError(detail)
    if type(exc).__name__ == "CBWorkerDeadError":
        err = ServerError(str(exc), code="server_unavailable")
        err.status_code = 503
        return err
    return ServerError(f"The server had an error while processing your request: {type(exc).__name__}: {exc}")

"""The error a reference-server API answers with: an HTTP status and an OpenAI-style JSON
body (``{"error": {"message", "type", "param", "code"}}``). Every route raises it; the
request parsers (:mod:`loadgen.server.protocol`, :mod:`loadgen.server.vision`) too."""

from __future__ import annotations

from typing import Any

from loadgen.errors import ServerError

__all__ = ["RequestRejected", "error_body"]


class RequestRejected(ServerError):
    """A request the API answers with an error status and an OpenAI-style JSON body.

    ``close``: the connection is not kept alive after the answer (its body may be unread);
    ``hangup``: it is closed as soon as the answer is written, without draining the body.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
        close: bool = False,
        hangup: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type
        self.close = close or hangup
        self.hangup = hangup

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(
    message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}

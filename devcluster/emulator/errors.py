"""The one exception type route handlers raise to turn a bad request into an HTTP error reply."""

from __future__ import annotations


class RequestError(ValueError):
    """A client mistake (unknown node, bad field, ...): the server replies `status` with `message`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

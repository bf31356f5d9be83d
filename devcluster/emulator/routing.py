"""Transport-free request/response types and a method+path router, so routes are plain functions."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from devcluster.emulator.errors import RequestError

if TYPE_CHECKING:
    from devcluster.emulator.state import Emulator

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes = b""
    base_url: str = ""  # scheme://host[:port] as the client addressed us, for absolute links
    params: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def json(self) -> Any:
        if not self.body.strip():
            raise RequestError("this request needs a JSON body")
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise RequestError(f"body is not valid JSON: {exc}") from None


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = TEXT_TYPE

    @classmethod
    def json(cls, payload: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(payload).encode(), JSON_TYPE)

    @classmethod
    def text(cls, text: str, status: int = 200) -> Response:
        return cls(status, text.encode(), TEXT_TYPE)


Handler = Callable[["Emulator", Request], Response]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    name: str  # request-counter key
    handler: Handler


def route(method: str, template: str, name: str, handler: Handler) -> Route:
    """`/control/nodes/{name}` style templates; a parameter matches one path segment."""
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
    return Route(method, re.compile(f"^{regex}$"), name, handler)


def resolve(routes: list[Route], method: str, path: str) -> tuple[Route, dict[str, str]]:
    path_matched = False
    for candidate in routes:
        match = candidate.pattern.match(path)
        if match is None:
            continue
        path_matched = True
        if candidate.method == method:
            return candidate, {key: unquote(value) for key, value in match.groupdict().items()}
    if path_matched:
        raise RequestError(f"method {method} not allowed on {path}", status=405)
    raise RequestError(f"no such path: {path}", status=404)

"""The API's two timestamp formats: Time (seconds) and MicroTime (microseconds), both UTC with a Z."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def micro_time(moment: dt.datetime) -> str:
    """e.g. 2026-11-30T13:05:10.123456Z: the API server parses MicroTime with exactly six fraction digits."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seconds_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

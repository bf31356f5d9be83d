"""Walking a paginated collection: body next-URL (NetBox/DRF), Link header (ServiceNow), or offsets.

A next URL is followed only on the configured scheme, host and port: only its path and query are kept.
That stops a CMDB (or anything that can influence its `next`) from steering the token to another host,
and copes with a NetBox behind a TLS proxy that answers with http:// links.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit, urlunsplit

from adapters.cmdb.config import CmdbConfig
from adapters.cmdb.http_client import BadReply, Page
from adapters.cmdb.paths import extract_items, lookup

GetPage = Callable[[str, Mapping[str, str]], Page]


@dataclass
class Collected:
    items: list[tuple[object, float]] = field(default_factory=list)  # (item, when its page arrived)
    pages: int = 0
    truncated: bool = False  # stopped at maxPages with more pages announced


def same_origin(base: str, current: str, target: str) -> str:
    absolute = urlsplit(urljoin(current, target))
    origin = urlsplit(base)
    return urlunsplit((origin.scheme, origin.netloc, absolute.path, absolute.query, ""))


def collect(get: GetPage, config: CmdbConfig) -> Collected:
    """All items of one refresh. Raises what `get` raises, ShapeError, or BadReply on a pagination loop."""
    pagination = config.pagination
    url = config.url
    params = dict(config.params)
    if pagination.type != "none" and pagination.limit_param:
        params[pagination.limit_param] = str(pagination.page_size)
    offset = 0
    if pagination.type == "offset":
        params[pagination.offset_param] = "0"
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    out = Collected()
    while True:
        request_key = (url, tuple(sorted(params.items())))
        if request_key in seen:
            raise BadReply(f"pagination loops back to {url}")
        seen.add(request_key)
        page = get(url, params)
        out.pages += 1
        items = extract_items(page.body, config.items_path, config.items_mode)
        out.items.extend((item, page.received_at) for item in items)

        following: str | None = None
        if pagination.type == "next":
            target = lookup(page.body, pagination.next_path)
            following = target if isinstance(target, str) and target else None
        elif pagination.type == "link":
            following = page.next_link
        elif pagination.type == "offset" and len(items) >= pagination.page_size:
            offset += pagination.page_size
            following = url
        if following is None:
            return out
        if out.pages >= config.max_pages:
            out.truncated = True
            return out
        if pagination.type == "offset":
            params = {**params, pagination.offset_param: str(offset)}
        else:
            # The next URL carries its own query (limit, offset, filters): send nothing more.
            url, params = same_origin(config.url, url, following), {}

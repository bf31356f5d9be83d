"""Walking a paginated collection: body next-URL (NetBox/DRF), Link header (ServiceNow), or offsets.

A next URL is followed only on the configured scheme, host and port: only its path and query are kept.
That stops a CMDB (or anything that can influence its `next`) from steering the token to another host,
and copes with a NetBox behind a TLS proxy that answers with http:// links.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from adapters.cmdb.config import CmdbConfig
from adapters.cmdb.http_client import BadReply, Page
from adapters.cmdb.paths import extract_items, lookup

GetPage = Callable[[str, Mapping[str, str]], Page]

# Pages fetched at once once the first page tells how many there are (a limit/offset `next` URL and a `count`, as
# NetBox and Django REST framework give): 5,000 nodes are 5 NetBox pages, and each is a round trip plus the server's
# query, so fetched one after another they were most of a refresh's wall time.
CONCURRENT_PAGES = 4


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
        if following is not None and out.pages == 1 and pagination.type == "next":
            planned = _offset_pages(same_origin(config.url, url, following), page.body, config)
            if planned:  # fetched at once; the last one's next URL (a collection that grew) is followed from here
                seen.update((planned_url, ()) for planned_url in planned)
                following = _fetch_all(get, planned, out, config)
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


def _offset_pages(following: str, first: object, config: CmdbConfig) -> list[str]:
    """The URLs of every page after the first, when its `next` URL pages by limit and offset and the first page's
    body says how many items there are (`count`): the next URL with its offset moved on by the limit each time, up
    to maxPages. Empty when the collection does not page that way: its next URLs are then followed one by one."""
    pagination = config.pagination
    count = first.get("count") if isinstance(first, Mapping) else None
    parts = urlsplit(following)
    query = parse_qsl(parts.query, keep_blank_values=True)
    values = dict(query)
    try:
        limit, offset = int(values[pagination.limit_param]), int(values[pagination.offset_param])
    except (KeyError, ValueError):
        return []
    if type(count) is not int or limit <= 0 or offset <= 0:
        return []
    def page_at(start: int) -> str:
        moved = [(key, str(start) if key == pagination.offset_param else value) for key, value in query]
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(moved), ""))

    return [page_at(start) for start in range(offset, count, limit)[: config.max_pages - 1]]


def _fetch_all(get: GetPage, urls: list[str], out: Collected, config: CmdbConfig) -> str | None:
    """Fetches the planned pages, CONCURRENT_PAGES at a time, and adds their items in page order. Returns the last
    page's next URL (maxPages stopped the plan short, or the collection grew since the first page), or None."""
    with ThreadPoolExecutor(max_workers=min(CONCURRENT_PAGES, len(urls)), thread_name_prefix="cmdb-page") as pool:
        pages = list(pool.map(lambda target: get(target, {}), urls))
    for page in pages:
        out.pages += 1
        out.items.extend((item, page.received_at) for item in extract_items(page.body, config.items_path,
                                                                              config.items_mode))
    last = lookup(pages[-1].body, config.pagination.next_path)
    return last if isinstance(last, str) and last else None

"""`GET /` serves the live page and its files from the package; nothing points outside the runtime."""

from __future__ import annotations

import re

import httpx


def test_the_page_and_its_files_are_served_by_the_api(client: httpx.Client) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sorted(assets) == ["/page/page.css", "/page/page.js"]
    bodies = [page.text]
    for asset, media in (("/page/page.js", "javascript"), ("/page/page.css", "text/css")):
        reply = client.get(asset)
        assert reply.status_code == 200 and media in reply.headers["content-type"]
        bodies.append(reply.text)
    for body in bodies:  # no CDN, no fonts, no analytics: only the runtime's own paths
        assert not re.search(
            r"(?:https?:)?//[\w.-]+\.[a-z]{2,}", body.replace("http://www.w3.org/2000/svg", "")
        )
    assert "/v1/events" in bodies[1] and "/v1/flows" in bodies[1]


def test_unknown_page_files_are_404(client: httpx.Client) -> None:
    assert client.get("/page/nope.js").status_code == 404

"""The live flow page at `GET /`: static files shipped in the package, so it works with no network.

The page is plain HTML, CSS and a small hand-written script (`api/page/`): it
draws every deployed flow from `GET /v1/flows` and follows `GET /v1/events`.
Nothing is fetched from anywhere but the runtime's own API.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

PAGE_PACKAGE = ("contraflow.api", "page")


def add_page_routes(app: FastAPI) -> None:
    """`GET /` (the page) and `GET /page/{file}` (its script and style sheet)."""
    static = StaticFiles(packages=[PAGE_PACKAGE])
    index = static.lookup_path("index.html")[0]

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        with open(index, encoding="utf-8") as html:
            return HTMLResponse(html.read(), headers={"cache-control": "no-cache"})

    app.mount("/page", static, name="page")

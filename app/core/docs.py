"""Interactive API docs served from the package: Swagger UI's files come from the
``fastapi-swagger`` distribution (a Swagger UI 5 bundle, which renders OpenAPI 3.1 as FastAPI
writes it; ``swagger-ui-bundle`` 1.1.0's Swagger UI 4.15 showed "Unable to render this
definition"), not a CDN, so /docs works offline and air-gapped."""

from __future__ import annotations

from pathlib import Path

import fastapi_swagger.resources
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI on the app's OpenAPI document) and its assets under ``/docs/assets``."""
    assets = Path(fastapi_swagger.resources.__file__).parent
    app.mount(ASSETS_URL, StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
        )

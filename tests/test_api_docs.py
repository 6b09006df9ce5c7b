"""Issue 17 (what a new user hits): /docs works offline. Its page loads Swagger UI from the
service itself, never from another host, and every asset it names is served."""

from __future__ import annotations

import re


def test_the_docs_page_loads_only_local_assets(api):
    page = api.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    urls = re.findall(r'(?:src|href)=["\']([^"\']+)["\']', page.text) + re.findall(r"url: ['\"]([^'\"]+)['\"]", page.text)
    assert urls and "/openapi.json" in urls
    assert not [u for u in urls if re.match(r"^(https?:)?//", u)], urls  # no CDN, no other host
    for url in urls:
        asset = api.get(url)
        assert asset.status_code == 200, url
    script = api.get("/docs/assets/swagger-ui-bundle.js")
    assert "SwaggerUIBundle" in script.text and "javascript" in script.headers["content-type"]

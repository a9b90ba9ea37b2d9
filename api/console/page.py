"""The operator console in the browser: ``GET /admin`` and its two static files, served by memesh itself.

No build step: ``api/console/static`` holds the page, one ES module and one
stylesheet, read once at import. Every answer carries a strict Content
Security Policy: scripts, styles and connections (fetch and the observatory
WebSocket) from this origin only, no inline code, no framing, forms posting
only here; the page writes every value from the service as text, never as
HTML. The static files need no session (they hold no data); everything they
show comes from ``/admin/api/*`` behind the session gate.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from mesh.errors import NotFound

STATIC = Path(__file__).resolve().parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_FILES = {
    "console.js": ("text/javascript; charset=utf-8", (STATIC / "console.js").read_bytes()),
    "console.css": ("text/css; charset=utf-8", (STATIC / "console.css").read_bytes()),
}
_PAGE = (STATIC / "index.html").read_bytes()

router = APIRouter(include_in_schema=False)


@router.get("/admin")
@router.get("/admin/")  # the app redirects no slashes (api.app): the page answers both spellings itself
async def console_page() -> Response:
    """The console (the login callback's redirect target); it shows a login link until a session exists."""
    return Response(_PAGE, media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/admin/static/{name}")
async def console_file(name: str) -> Response:
    found = _FILES.get(name)
    if found is None:
        raise NotFound("no such console file")
    media_type, content = found
    return Response(content, media_type=media_type, headers=HEADERS)

"""One Jinja environment for whole pages (Litestar responses) and for SSE fragments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from webapp.accounts.preferences import theme_of
from webapp.chat.attachments import PAPERCLIP
from webapp.chat.titles import split_mark
from webapp.web.security import hx_headers

ROOT = Path(__file__).resolve().parent.parent.parent
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"

environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def csrf_for(request: Any) -> str:
    """The request's CSRF token (see webapp.web.security), for forms and htmx headers."""
    return str(request.scope.get("state", {}).get("csrf_token", ""))


environment.globals["csrf_for"] = csrf_for
environment.globals["hx_headers"] = hx_headers
environment.globals["internals"] = True
"""Token counts and model and configuration names are shown, except where a page's
context says not (an embed that keeps them from its visitors)."""
environment.filters["title_parts"] = split_mark
environment.globals["paperclip"] = PAPERCLIP


def theme_for(request: Any) -> str:
    """The theme `<html>` is drawn in (the signed-in user's setting): set by the server,
    so a page never shows in the wrong colours first."""
    return theme_of(request.scope.get("user"))


environment.globals["theme_for"] = theme_for


def render_fragment(name: str, **context: Any) -> str:
    return environment.get_template(name).render(**context)


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment))

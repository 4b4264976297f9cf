"""One Jinja environment for whole pages (Litestar responses) and for SSE fragments.

What templates need from the packages above (the attachment's paperclip, the user's
theme, a title's mark) is added by `webapp.app`, so this module imports none of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

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


def render_fragment(name: str, **context: Any) -> str:
    return environment.get_template(name).render(**context)


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment))

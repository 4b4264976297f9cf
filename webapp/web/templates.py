"""One Jinja environment for whole pages (Litestar responses) and for SSE fragments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

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


def render_fragment(name: str, **context: Any) -> str:
    return environment.get_template(name).render(**context)


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment))

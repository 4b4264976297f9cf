"""axe-core (an independent accessibility engine, vendored: tests/browser/vendor, 4.14.1,
MPL-2.0) run on a page; the pages' own CSP forbids injected scripts, so pages checked
here come from a context made with `bypass_csp=True`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Frame, Page

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
SEVERE = ("serious", "critical")

_RUN = """async () => {
  const result = await axe.run(document, { resultTypes: ["violations"] });
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ") + " :: " + n.failureSummary),
  }));
}"""


def violations(page: Page | Frame, impacts: tuple[str, ...]) -> list[dict[str, Any]]:
    """axe's findings of these impacts on what `page` shows now."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return [v for v in page.evaluate(_RUN) if v["impact"] in impacts]


def severe_violations(page: Page | Frame) -> list[dict[str, Any]]:
    """axe's serious and critical findings on what `page` shows now."""
    return violations(page, SEVERE)


def assert_accessible(page: Page | Frame, where: str) -> None:
    found = severe_violations(page)
    assert not found, f"axe on {where}: " + "\n".join(
        f"{v['impact']} {v['id']} ({v['help']}): {v['nodes']}" for v in found
    )

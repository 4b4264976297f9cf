"""Small bar charts as server-rendered SVG: no JavaScript, no CDN, nothing inline to allow.

The pages run under `default-src 'self'; style-src 'self'`, so a chart carries no
`style` attribute and no `<style>` element: colours come from classes in app.css, with
SVG presentation attributes (fill, font-size, text-anchor) as the fallback when the SVG
is viewed on its own. Every label is escaped (model names come from a config file) and
stripped of characters XML cannot hold, so the output is always well-formed XML. Each
chart has a `<title>` and a `<desc>` that says in words what the bars show, and each bar
a `<title>` of its own, so a screen reader gets the numbers and not just a picture.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from webapp.admin.queries import DayCount, ModelCount

SVG_NS = "http://www.w3.org/2000/svg"
FONT = 11
LABEL_CHARS = 28
"""Longer category labels are shortened on the axis; their `<title>` keeps them whole."""

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    """Shown on the axis."""
    value: int
    name: str | None = None
    """Said in the bar's tooltip and description; the label when None."""

    @property
    def spoken(self) -> str:
        return self.name or self.label


def _text(value: object) -> str:
    """Escaped for XML text and attribute values alike."""
    return str(escape(_NOT_XML.sub("", str(value))))


def _n(value: float) -> str:
    """A coordinate, to a tenth of a unit: enough for a chart, short on the wire."""
    return f"{value:.1f}".removesuffix(".0")


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


def _open(ident: str, title: str, desc: str, width: int, height: int) -> list[str]:
    ident = _text(ident)
    return [
        f'<svg xmlns="{SVG_NS}" class="chart" id="{ident}" role="img" '
        f'aria-labelledby="{ident}-title {ident}-desc" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" font-size="{FONT}">',
        f'<title id="{ident}-title">{_text(title)}</title>',
        f'<desc id="{ident}-desc">{_text(desc)}</desc>',
    ]


def _close(out: list[str], unit: str, *, empty_at: tuple[float, float] | None) -> Markup:
    """The chart's last lines, `_open`'s counterpart: a chart with nothing to draw says
    so (centred on `empty_at`) instead of showing a bare frame."""
    if empty_at is not None:
        x, y = empty_at
        out.append(
            f'<text class="chart-empty" x="{_n(x)}" y="{_n(y)}" '
            f'text-anchor="middle">No {_text(unit)}</text>'
        )
    out.append("</svg>")
    return Markup("\n".join(out))


def _describe(bars: Sequence[Bar], unit: str) -> str:
    shown = [b for b in bars if b.value]
    if not shown:
        return f"No {unit}."
    total = sum(b.value for b in shown)
    parts = "; ".join(f"{b.spoken}: {b.value:,}" for b in shown)
    return f"{total:,} {unit} in all. {parts}."


def column_chart(
    bars: Sequence[Bar], *, ident: str, title: str, unit: str, height: int = 160
) -> Markup:
    """Vertical bars, left to right (a time series); every few labels shown, counted back
    from the last bar so the newest is always labelled; every bar is spoken."""
    step, gap, top, bottom, left = 18, 4, 18, 22, 8
    width = left * 2 + step * max(len(bars), 1)
    plot = height - top - bottom
    peak = max((b.value for b in bars), default=0)
    every = max(1, math.ceil(len(bars) / 8))
    out = _open(ident, title, _describe(bars, unit), width, height)
    baseline = top + plot
    out.append(
        f'<line class="chart-axis" x1="{left}" y1="{baseline}" x2="{width - left}" '
        f'y2="{baseline}" stroke="currentColor" stroke-width="1"/>'
    )
    for index, bar in enumerate(bars):
        x = left + index * step
        size = round(plot * bar.value / peak) if peak else 0
        out.append(
            f'<rect class="chart-bar" x="{x + gap // 2}" y="{baseline - size}" '
            f'width="{step - gap}" height="{size}" fill="#2f6fed">'
            f"<title>{_text(bar.spoken)}: {bar.value:,} {_text(unit)}</title></rect>"
        )
        middle = _n(x + step / 2)
        if bar.value:
            out.append(
                f'<text class="chart-value" x="{middle}" y="{baseline - size - 4}" '
                f'text-anchor="middle">{bar.value:,}</text>'
            )
        if (len(bars) - 1 - index) % every == 0:  # counted from the newest, always labelled
            out.append(
                f'<text class="chart-label" x="{middle}" y="{height - 6}" '
                f'text-anchor="middle">{_text(bar.label)}</text>'
            )
    return _close(out, unit, empty_at=(width / 2, top + plot / 2) if not peak else None)


def bar_chart(bars: Sequence[Bar], *, ident: str, title: str, unit: str) -> Markup:
    """Horizontal bars, one a row (categories with long names, such as models)."""
    row, gap, pad = 22, 6, 8
    label_width = 7 * max((len(_short(b.label)) for b in bars), default=4) + pad
    bar_room, value_room = 240, 48
    width = pad + label_width + bar_room + value_room
    height = pad * 2 + row * max(len(bars), 1)
    peak = max((b.value for b in bars), default=0)
    out = _open(ident, title, _describe(bars, unit), width, height)
    x0 = pad + label_width
    for index, bar in enumerate(bars):
        y = pad + index * row
        size = round(bar_room * bar.value / peak) if peak else 0
        middle = _n(y + row / 2 + FONT / 3)
        out.append(
            f'<text class="chart-label" x="{x0 - pad}" y="{middle}" '
            f'text-anchor="end">{_text(_short(bar.label))}</text>'
        )
        out.append(
            f'<rect class="chart-bar" x="{x0}" y="{y + gap // 2}" width="{size}" '
            f'height="{row - gap}" fill="#2f6fed">'
            f"<title>{_text(bar.spoken)}: {bar.value:,} {_text(unit)}</title></rect>"
        )
        out.append(
            f'<text class="chart-value" x="{x0 + size + 4}" y="{middle}">{bar.value:,}</text>'
        )
    return _close(out, unit, empty_at=(width / 2, height / 2 + FONT / 3) if not bars else None)


def per_day_chart(days: Sequence[DayCount]) -> Markup:
    bars = [Bar(d.day.strftime("%m-%d"), d.trimmed_turns, d.day.isoformat()) for d in days]
    span = f"{days[0].day.isoformat()} to {days[-1].day.isoformat()}" if days else "no days"
    return column_chart(
        bars,
        ident="trimmed-per-day",
        title=f"Trimmed turns per day (UTC), {span}",
        unit="trimmed turns",
    )


def per_model_chart(models: Sequence[ModelCount]) -> Markup:
    return bar_chart(
        [Bar(m.model, m.trimmed_turns) for m in models],
        ident="trimmed-per-model",
        title="Trimmed turns per model the send was sized for",
        unit="trimmed turns",
    )

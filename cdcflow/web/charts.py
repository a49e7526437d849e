"""The pipeline page's pictures, drawn on the server as inline SVG: lag per partition over time
(a line per partition, from the offset store's lag entries) and records and duration per window
(bars, from the window ledger). The drawing functions take plain numbers and times and return an
SVG string with its own styling: no JavaScript, no stylesheet, no font to load. Every text put
into the SVG (topic names, run ids) is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdcflow.state import LagEntry, WindowPlan

WINDOWS = 30  # windows in the bar charts
LAG_SAMPLES = 50  # newest lag entries of each source per partition in the line chart
PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#bc4c00", "#8250df", "#bf3989", "#0a7b83", "#6e7781",
           "#9a6700", "#1b1f24")
STATUS_COLORS = {"committed": "#0969da", "failed": "#cf222e", "in flight": "#8c959f"}
TOP, BOTTOM, LEFT = 34, 38, 62  # margins of the plot area, in px
SVG_STYLE = ('font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" font-size="11" '
             'fill="#1d2433" style="max-width:100%;height:auto;background:#fff;border:1px solid #dde2ea"')
Point = tuple[datetime, float]


@dataclass(frozen=True)
class Bar:
    value: float | None  # None: not known (a window still running, or failed); drawn as a stub
    label: str = ""  # under the axis (shown for as many bars as fit)
    tip: str = ""  # the tooltip
    color: str = PALETTE[0]


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def fmt(value: float) -> str:
    """Short, for axes and tooltips: 950, 12.3k, 4.5M, 0.25, 2.1e+24."""
    size = abs(value)
    if size >= 1e21:
        return f"{value:.2g}"
    for div, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


def ticks(top: float, count: int = 4, whole: bool = False) -> list[float]:
    """0 and round steps (1, 2, 2.5 or 5 × 10^k; ``whole``: at least 1, for counts) up to the first
    at or above ``top``."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-12))
    step = max(step, 1.0) if whole else step
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_ticks(start: float, end: float, count: int = 6) -> tuple[list[float], str]:
    """Round instants (epoch seconds) between ``start`` and ``end``, and their strftime format."""
    span = max(end - start, 1.0)
    step = next((s for s in TIME_STEPS if span / s <= count), 86400 * math.ceil(span / count / 86400))
    first = math.ceil(start / step) * step
    marks = [first + i * step for i in range(int((end - first) // step) + 1)]
    days = {_utc(start).date(), _utc(end).date()}
    form = "%Y-%m-%d" if step >= 86400 else ("%m-%d " if len(days) > 1 else "") + ("%H:%M:%S" if step < 60 else "%H:%M")
    return marks, form


def _epoch(t: datetime) -> float:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _open(width: int, height: int, title: str, chart: str) -> list[str]:
    return [(f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{_e(chart)}" role="img" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" {SVG_STYLE}>'),
            f"<title>{_e(title)}</title>",
            f'<text x="12" y="20" font-size="13" font-weight="600">{_e(title)}</text>']


def empty_chart(title: str, message: str, chart: str, width: int = 640, height: int = 90) -> str:
    return "".join([*_open(width, height, title, chart),
                    (f'<text class="empty" x="{width / 2:.0f}" y="{height / 2 + 12:.0f}" text-anchor="middle" '
                     f'fill="#5b6478">{_e(message)}</text></svg>')])


def _y_axis(parts: list[str], top: float, unit: str, whole: bool, x0: float, x1: float, y0: float, y1: float) -> float:
    """Grid lines and labels of 0..top at the left; the unit along the axis. Returns the axis's top value."""
    marks = ticks(top, whole=whole)
    scale_top = marks[-1]
    for v in marks:
        y = y1 - (y1 - y0) * v / scale_top
        parts.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#dde2ea"/>'
                     f'<text x="{x0 - 6:.1f}" y="{y + 4:.1f}" text-anchor="end">{_e(fmt(v))}</text>')
    mid = (y0 + y1) / 2
    parts.append(f'<text x="14" y="{mid:.1f}" text-anchor="middle" fill="#5b6478" '
                 f'transform="rotate(-90 14 {mid:.1f})">{_e(unit)}</text>'
                 f'<line x1="{x0:.1f}" x2="{x0:.1f}" y1="{y0:.1f}" y2="{y1:.1f}" stroke="#8c959f"/>'
                 f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y1:.1f}" y2="{y1:.1f}" stroke="#8c959f"/>')
    return scale_top


def _x_label(x: float, y: float, text: str, width: int) -> str:
    """A label centred under ``x``, moved in where it would stick out of the picture."""
    half = 3.3 * len(text)  # ~6.6 px a character at 11 px
    anchor, x = (("end", width - 4.0) if x + half > width - 4 else ("start", 4.0) if x - half < 4
                 else ("middle", x))
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{_e(text)}</text>'


def line_chart(series: Mapping[str, Sequence[Point]], title: str, unit: str, empty: str, *,
               chart: str = "lines", whole: bool = False, width: int = 1292, height: int = 280,
               legend_width: int = 230) -> str:
    """A line per series (name → [(time, value)], oldest first) over a shared time axis, with a dot
    and a tooltip per point and a legend at the right. Negative values are drawn as 0; ``whole``:
    the values are counts (no fractional ticks)."""
    data = {name: [(_epoch(t), max(float(v), 0.0)) for t, v in pts] for name, pts in series.items() if pts}
    if not data:
        return empty_chart(title, empty, chart)
    x0, x1, y0, y1 = LEFT, width - legend_width, TOP, height - BOTTOM
    start = min(x for pts in data.values() for x, _ in pts)
    end = max(x for pts in data.values() for x, _ in pts)
    if end - start < 1:
        start, end = start - 30, end + 30
    parts = _open(width, height, title, chart)
    top = _y_axis(parts, max(v for pts in data.values() for _, v in pts), unit, whole, x0, x1, y0, y1)
    marks, form = time_ticks(start, end)
    for t in marks:
        x = x0 + (x1 - x0) * (t - start) / (end - start)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y1 + 4:.1f}" stroke="#8c959f"/>'
                     + _x_label(x, y1 + 16, _utc(t).strftime(form), width))
    parts.append(f'<text x="{x1:.1f}" y="{height - 6}" text-anchor="end" fill="#5b6478">time (UTC)</text>')
    rows = max(1, int((y1 - y0) // 16))
    for i, (name, pts) in enumerate(data.items()):
        color = PALETTE[i % len(PALETTE)]
        dash = "" if i < len(PALETTE) else ' stroke-dasharray="5 3"'
        xy = [(x0 + (x1 - x0) * (x - start) / (end - start), y1 - (y1 - y0) * v / top) for x, v in pts]
        parts.append(f'<g class="series" data-series="{_e(name)}"><polyline fill="none" stroke="{color}" '
                     f'stroke-width="1.6"{dash} points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}"/>')
        for (x, y), (t, v) in zip(xy, pts, strict=True):
            tip = f"{name} at {_utc(t):%Y-%m-%d %H:%M:%S} UTC: {v:,.0f} {unit}"
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"><title>{_e(tip)}</title></circle>')
        parts.append("</g>")
        if len(data) <= rows or i < rows - 1:
            short = name if len(name) <= 30 else name[:14] + "…" + name[-14:]
            ly = y0 + 8 + 16 * i
            parts.append(f'<g class="legend"><title>{_e(name)}</title><line x1="{x1 + 16}" x2="{x1 + 34}" '
                         f'y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" stroke-width="3"{dash}/>'
                         f'<text x="{x1 + 40}" y="{ly}">{_e(short)}</text></g>')
        elif i == rows - 1:
            parts.append(f'<text x="{x1 + 16}" y="{y0 + 8 + 16 * i}" fill="#5b6478">+{len(data) - i} more '
                         f"(hover the dots)</text>")
    return "".join([*parts, "</svg>"])


def bar_chart(bars: Sequence[Bar], title: str, unit: str, empty: str, *, chart: str = "bars", whole: bool = False,
              legend: Sequence[tuple[str, str]] = (), width: int = 640, height: int = 230) -> str:
    """A bar per item, left to right, with a y axis in ``unit``, as many x labels as fit, a tooltip
    per bar and an optional legend of (label, color) at the top right."""
    if not bars:
        return empty_chart(title, empty, chart)
    x0, x1, y0, y1 = LEFT, width - 12, TOP, height - BOTTOM
    parts = _open(width, height, title, chart)
    top = _y_axis(parts, max((b.value for b in bars if b.value is not None), default=0.0), unit, whole,
                  x0, x1, y0, y1)
    slot = (x1 - x0) / len(bars)
    bar_w = max(1.0, min(slot * 0.75, 36.0))
    every = max(1, math.ceil(86 / slot))  # a label needs ~86 px
    for i, b in enumerate(bars):
        cx = x0 + slot * (i + 0.5)
        h = 3.0 if b.value is None else (y1 - y0) * max(b.value, 0.0) / top
        look = f'fill="{b.color}"' if b.value is not None else f'fill="none" stroke="{b.color}" stroke-dasharray="2 1"'
        parts.append(f'<rect class="bar" x="{cx - bar_w / 2:.2f}" y="{y1 - h:.2f}" width="{bar_w:.2f}" '
                     f'height="{h:.2f}" {look}><title>{_e(b.tip)}</title></rect>')
        if b.label and (len(bars) - 1 - i) % every == 0:  # the newest bar always has its label
            parts.append(_x_label(cx, y1 + 16, b.label, width))
    parts.append(f'<text x="{x1:.1f}" y="{height - 6}" text-anchor="end" fill="#5b6478">planned at (UTC)</text>')
    lx = x1
    for label, color in reversed(legend):
        lx -= 14 + 7 * len(label)
        parts.append(f'<rect x="{lx:.0f}" y="11" width="10" height="10" fill="{color}"/>'
                     f'<text x="{lx + 14:.0f}" y="20">{_e(label)}</text>')
    return "".join([*parts, "</svg>"])


# -- the page's data ---------------------------------------------------------------------------------

def lag_series(entries: Mapping[tuple[str, int], Sequence[LagEntry]]) -> dict[str, list[Point]]:
    """``LagHistory.entries`` → "topic[partition]" → [(at, log end − committed)], every entry
    that knows both (a plan, a commit, a sample; not an offset reset)."""
    return {f"{topic}[{partition}]": [(e.at, e.log_end - e.committed) for e in rows
                                      if e.log_end is not None and e.committed is not None]
            for (topic, partition), rows in sorted(entries.items())}


def lag_chart(entries: Mapping[tuple[str, int], Sequence[LagEntry]]) -> str:
    return line_chart(lag_series(entries), "Lag per partition", "records", "no lag samples yet", chart="lag",
                      whole=True)


def window_charts(windows: Sequence[tuple[WindowPlan, datetime, datetime]]) -> tuple[str, str]:
    """Records and duration of each window (``Control.windows``, newest first), oldest at the left."""
    rows = list(reversed(windows))[-WINDOWS:]
    if not rows:
        return (empty_chart("Records per window", "no windows yet", "records"),
                empty_chart("Duration per window", "no windows yet", "seconds"))
    days = {created.date() for _, created, _ in rows}
    form = "%H:%M:%S" if len(days) == 1 else "%m-%d %H:%M"
    records: list[Bar] = []
    seconds: list[Bar] = []
    kinds: set[str] = set()
    for w, created, _ in rows:
        kind = w.status if w.status in ("committed", "failed") else "in flight"
        kinds.add(kind)
        n = w.stats.get("records")
        n = w.total_records if n is None else n  # not finished: what it read so far
        s = w.stats.get("seconds")
        tip = f"{w.run_id} ({w.status}), planned {created:%Y-%m-%d %H:%M:%S} UTC: "
        label, color = created.strftime(form), STATUS_COLORS[kind]
        records.append(Bar(float(n), label, tip + f"{n:,} records", color))
        seconds.append(Bar(None if s is None else float(s), label,
                           tip + ("no duration: not finished" if s is None else f"{s:.2f} s"), color))
    legend = [(k, c) for k, c in STATUS_COLORS.items() if k in kinds]
    return (bar_chart(records, f"Records per window (last {len(rows)})", "records", "", chart="records",
                      whole=True, legend=legend),
            bar_chart(seconds, f"Duration per window (last {len(rows)})", "seconds", "", chart="seconds",
                      legend=legend))

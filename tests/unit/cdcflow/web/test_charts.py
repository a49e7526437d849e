"""The pipeline page's SVG charts (cdcflow/web/charts.py), read back as XML: what is drawn, where,
and that every text is escaped. The page in a browser: tests/integration/cdcflow/web/test_control_plane.py."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from cdcflow.state import LagEntry, PartitionWindow, WindowPlan
from cdcflow.web import charts
from cdcflow.web.charts import Bar

NS = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 3, 1, 10, 0, 0)


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # raises on anything not escaped
    assert root.tag == NS + "svg"
    return root


def find(root: ET.Element, tag: str, **attrs: str) -> list[ET.Element]:
    return [e for e in root.iter(NS + tag) if all(attr in (e.get(k) or "").split() if k == "class" else
                                                  e.get(k) == attr for k, attr in attrs.items())]


def texts(root: ET.Element) -> list[str]:
    return [e.text or "" for e in root.iter(NS + "text")]


def window(i: int, status: str = "committed", **stats: float) -> tuple[WindowPlan, datetime, datetime]:
    part = (PartitionWindow("orders", 0, 0, 100, end=7, records=7),)
    created = T0 + timedelta(minutes=i)
    return WindowPlan("p", f"run_{i}", "stored", status, part, stats=dict(stats)), created, created


# -- bars --------------------------------------------------------------------------------------------

def test_a_bar_per_item_with_heights_proportional_to_the_values() -> None:
    values = [10.0, 40.0, 0.0, 25.0, 80.0]
    root = parse(charts.bar_chart([Bar(v, f"w{i}", f"tip {i}") for i, v in enumerate(values)],
                                  "Records", "records", "none"))
    bars = find(root, "rect", **{"class": "bar"})
    assert len(bars) == len(values)
    heights = [float(b.get("height", "")) for b in bars]
    assert heights[2] == 0 and max(heights) == heights[4]
    for v, h in zip(values, heights, strict=True):
        assert h == pytest.approx(heights[4] * v / 80, abs=0.02)
    bottoms = {round(float(b.get("y", "")) + float(b.get("height", "")), 1) for b in bars}
    assert len(bottoms) == 1  # every bar stands on the x axis
    xs = [float(b.get("x", "")) for b in bars]
    assert xs == sorted(xs)  # left to right, in the order given
    assert [b.find(NS + "title").text for b in bars] == [f"tip {i}" for i in range(5)]  # type: ignore[union-attr]
    assert "w4" in texts(root)  # the newest bar's label is always shown


def test_the_y_axis_reaches_the_highest_bar_with_round_labelled_ticks() -> None:
    root = parse(charts.bar_chart([Bar(95.0), Bar(3.0)], "Records", "records", "none"))
    assert [t for t in texts(root) if re.fullmatch(r"[\d.]+", t)] == ["0", "25", "50", "75", "100"]
    assert "records" in texts(root) and "Records" in texts(root)


def test_a_bar_without_a_value_is_an_outlined_stub_and_labels_thin_out() -> None:
    bars = [Bar(float(i), f"L{i}", color="#cf222e" if i == 3 else "#0969da") for i in range(60)]
    bars[3] = Bar(None, "L3", "running")
    root = parse(charts.bar_chart(bars, "Duration", "seconds", "none"))
    rects = find(root, "rect", **{"class": "bar"})
    assert len(rects) == 60
    assert rects[3].get("fill") == "none" and float(rects[3].get("height", "")) > 0
    labels = [t for t in texts(root) if t.startswith("L")]
    assert 3 <= len(labels) < 15 and labels[-1] == "L59"


def test_huge_values_get_short_labels_and_stay_inside_the_picture() -> None:
    root = parse(charts.bar_chart([Bar(3.2e15), Bar(1.0)], "Records", "records", "none"))
    assert {"0", "1P", "2P", "3P", "4P"} <= set(texts(root))
    height = float(root.get("height", ""))
    for rect in find(root, "rect", **{"class": "bar"}):
        assert 0 <= float(rect.get("y", "")) <= height


# -- lines -------------------------------------------------------------------------------------------

def test_a_polyline_per_series_with_a_dot_and_tooltip_per_point_and_a_legend() -> None:
    series = {f"orders[{p}]": [(T0 + timedelta(minutes=i), float(i * (p + 1))) for i in range(6)] for p in range(3)}
    root = parse(charts.line_chart(series, "Lag per partition", "records", "none"))
    groups = find(root, "g", **{"class": "series"})
    assert [g.get("data-series") for g in groups] == list(series)
    for g, pts in zip(groups, series.values(), strict=True):
        [line] = g.iter(NS + "polyline")
        coords = [tuple(map(float, xy.split(","))) for xy in line.get("points", "").split()]
        assert len(coords) == len(pts) and [x for x, _ in coords] == sorted(x for x, _ in coords)
        dots = list(g.iter(NS + "circle"))
        assert len(dots) == len(pts) and all(d.find(NS + "title") is not None for d in dots)
    strokes = {next(g.iter(NS + "polyline")).get("stroke") for g in groups}
    assert len(strokes) == 3  # a colour each
    legend = [next(g.iter(NS + "text")).text for g in find(root, "g", **{"class": "legend"})]
    assert legend == list(series)
    assert "time (UTC)" in texts(root) and "10:00" in texts(root)


def test_higher_values_are_drawn_higher_and_negative_ones_on_the_axis() -> None:
    root = parse(charts.line_chart({"a": [(T0, 100.0), (T0 + timedelta(seconds=60), 0.0),
                                          (T0 + timedelta(seconds=120), -5.0)]}, "Lag", "records", "none"))
    ys = [float(c.get("cy", "")) for c in root.iter(NS + "circle")]
    assert ys[0] < ys[1] == ys[2]  # SVG's y grows downwards


def test_one_point_is_a_dot_in_the_middle_of_a_minute_wide_axis() -> None:
    root = parse(charts.line_chart({"t[0]": [(T0, 7e15)]}, "Lag", "records", "none", whole=True))
    [dot] = root.iter(NS + "circle")
    width, legend = float(root.get("width", "")), 230
    assert float(dot.get("cx", "")) == pytest.approx((charts.LEFT + width - legend) / 2, abs=0.5)
    assert "09:59:30" in texts(root) and "10:00:30" in texts(root) and "8P" in texts(root)


def test_text_is_escaped() -> None:
    name = 'orders<script>&"x"[0]'
    svg = charts.line_chart({name: [(T0, 1.0)]}, "Lag <b>", "records", "none")
    assert "<script>" not in svg and "<b>" not in svg
    root = parse(svg)
    assert find(root, "g", **{"class": "series"})[0].get("data-series") == name
    assert name in texts(root) and "Lag <b>" in texts(root)
    bar = parse(charts.bar_chart([Bar(1.0, "<l>", "a & b")], "t", "u", "none"))
    assert bar.find(f".//{NS}rect/{NS}title").text == "a & b"  # type: ignore[union-attr]


def test_many_partitions_fold_the_legend() -> None:
    series = {f"t[{p}]": [(T0, float(p))] for p in range(40)}
    root = parse(charts.line_chart(series, "Lag", "records", "none"))
    assert len(find(root, "g", **{"class": "series"})) == 40
    shown = find(root, "g", **{"class": "legend"})
    assert 5 < len(shown) < 40
    assert f"+{40 - len(shown)} more (hover the dots)" in texts(root)


@pytest.mark.parametrize(("draw", "message"), [
    (lambda: charts.line_chart({}, "Lag", "records", "no lag samples yet"), "no lag samples yet"),
    (lambda: charts.line_chart({"t[0]": []}, "Lag", "records", "no lag samples yet"), "no lag samples yet"),
    (lambda: charts.bar_chart([], "Records", "records", "no windows yet"), "no windows yet"),
])
def test_no_data_says_so(draw: object, message: str) -> None:
    root = parse(draw())  # type: ignore[operator]
    assert message in texts(root)
    assert not list(root.iter(NS + "polyline")) and not find(root, "rect", **{"class": "bar"})


# -- the page's data ---------------------------------------------------------------------------------

def test_lag_series_from_the_offset_stores_entries() -> None:
    entries = {("orders", 1): [LagEntry("orders", 1, "plan", 10, 50, "r1", T0),
                               LagEntry("orders", 1, "commit", 50, 50, "r1", T0 + timedelta(seconds=5)),
                               LagEntry("orders", 1, "reset", 0, None, "manual-reset@x", T0 + timedelta(seconds=9)),
                               LagEntry("orders", 1, "sample", None, 70, None, T0 + timedelta(seconds=10)),
                               LagEntry("orders", 1, "sample", 0, 70, None, T0 + timedelta(seconds=20))],
               ("orders", 0): [LagEntry("orders", 0, "reset", 3, None, "manual-reset@x", T0)]}
    assert charts.lag_series(entries) == {"orders[0]": [],
                                          "orders[1]": [(T0, 40), (T0 + timedelta(seconds=5), 0),
                                                        (T0 + timedelta(seconds=20), 70)]}
    root = parse(charts.lag_chart(entries))
    assert [g.get("data-series") for g in find(root, "g", **{"class": "series"})] == ["orders[1]"]
    assert "no lag samples yet" in texts(parse(charts.lag_chart({("orders", 0): entries[("orders", 0)]})))


def test_window_charts_oldest_at_the_left_coloured_by_outcome() -> None:
    newest_first = [window(3, "planned"), window(2, "failed"), window(1, records=500, seconds=2.5),
                    window(0, records=1000, seconds=10.0)]
    records, seconds = (parse(svg) for svg in charts.window_charts(newest_first))
    rec = find(records, "rect", **{"class": "bar"})
    sec = find(seconds, "rect", **{"class": "bar"})
    assert len(rec) == len(sec) == 4
    assert [r.find(NS + "title").text.split()[0] for r in rec] == ["run_0", "run_1", "run_2", "run_3"]  # type: ignore[union-attr]
    heights = [float(r.get("height", "")) for r in rec]
    assert heights[1] == pytest.approx(heights[0] / 2, abs=0.02)
    assert heights[2] == pytest.approx(heights[0] * 7 / 1000, abs=0.02)  # no stats yet: the records read
    durations = [float(r.get("height", "")) for r in sec]
    assert durations[0] == pytest.approx(4 * durations[1], abs=0.02)  # 10 s and 2.5 s
    assert sec[2].get("fill") == sec[3].get("fill") == "none"  # no duration yet: a stub
    assert [r.get("fill") for r in rec] == ["#0969da", "#0969da", "#cf222e", "#8c959f"]
    assert {"committed", "failed", "in flight"} <= set(texts(records))
    assert "Records per window (last 4)" in texts(records) and "seconds" in texts(seconds)


def test_window_charts_show_the_last_windows_only_and_say_when_there_are_none() -> None:
    many = [window(i, records=i, seconds=1.0) for i in range(100, 0, -1)]
    records, _ = charts.window_charts(many)
    assert len(find(parse(records), "rect", **{"class": "bar"})) == charts.WINDOWS
    assert all("no windows yet" in texts(parse(svg)) for svg in charts.window_charts([]))


def test_number_formats_and_ticks() -> None:
    assert [charts.fmt(v) for v in (0, 950, 12345, 4.5e6, 0.25, 2.1e24)] == ["0", "950", "12.3k", "4.5M", "0.25", "2.1e+24"]
    assert charts.ticks(95) == [0, 25, 50, 75, 100]
    assert charts.ticks(0) == [0, 1] and charts.ticks(float("inf")) == [0, 1]
    assert charts.ticks(2) == [0, 0.5, 1, 1.5, 2] and charts.ticks(2, whole=True) == [0, 1, 2]
    start = T0.replace(tzinfo=UTC).timestamp()
    marks, form = charts.time_ticks(start, start + 3600)
    assert form == "%H:%M" and len(marks) >= 4 and all(m % 600 == 0 for m in marks)
    _, days = charts.time_ticks(start, start + 9 * 86400)
    assert days == "%Y-%m-%d"

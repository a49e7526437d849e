"""Java date patterns as Kafka Connect reads them: TimestampConverter's ``format`` and
TimestampRouter's ``timestamp_format`` are ``java.text.SimpleDateFormat`` patterns (in UTC).

:func:`tokens` reads a pattern into its fields and literals, as SimpleDateFormat does: a run of one
ASCII letter is a field, ``'…'`` quoted text (``''`` a quote, in it or not), every other character
itself (``[ ] { } #`` too). :func:`problem` says why a pattern is refused, and the transform
configs (spark_jobs/transform/transform_config.py) refuse it when the config is loaded:

* a letter SimpleDateFormat has not (``Q``, ``q``, ``V``, ``O``, ``e``, ``c``, ``x`` …) or ``X`` of
  four letters or more: SimpleDateFormat throws (IllegalArgumentException), so Kafka Connect
  refuses the pattern;
* a quote not closed: the same;
* the week fields ``w``, ``W``, ``Y``: SimpleDateFormat counts weeks by the JVM's default locale
  (the first day of the week, the days the first week needs), so what Kafka Connect writes depends
  on the worker's locale; cdcflow asks for a field that does not.

No Spark and no Arrow here: config loading imports this module. spark_jobs/transform/row_patterns.py reads and
writes by the tokens.
"""

from __future__ import annotations

from typing import Any

Token = tuple[str, Any]  # (letter, count) of a field, or ("'", text) of a literal

LETTERS = "GyYMLwWDdFEuaHkKhmsSzZX"  # SimpleDateFormat's pattern letters (its javadoc's table)
_WEEKS = {"w": ("the week of the year", "D (the day of the year) or MM-dd"),
          "W": ("the week of the month", "F (the day of the week in the month) or d"),
          "Y": ("the week year", "y (the year)")}


def tokens(java: str) -> list[Token]:
    """The pattern's fields and literals; ValueError saying why Kafka Connect (or cdcflow, for a
    week field) refuses it."""
    out: list[Token] = []
    i = 0
    while i < len(java):
        c = java[i]
        if java.startswith("''", i):  # a quote
            out.append(("'", "'"))
            i += 2
        elif c == "'":  # quoted text, '' in it a quote
            text, j = [], i + 1
            while True:
                end = java.find("'", j)
                if end < 0:
                    raise ValueError(f"the quote at {i} is not closed: Kafka Connect refuses the pattern "
                                     "(SimpleDateFormat: unterminated quote; write '' for a quote)")
                text.append(java[j:end])
                if not java.startswith("''", end):
                    break
                text.append("'")
                j = end + 2
            out.append(("'", "".join(text)))
            i = end + 1
        elif c.isascii() and c.isalpha():
            count = len(java) - i - len(java[i:].lstrip(c))
            _check(c, count)
            out.append((c, count))
            i += count
        else:
            out.append(("'", c))
            i += 1
    return out


def _check(letter: str, count: int) -> None:
    if letter in _WEEKS:
        what, instead = _WEEKS[letter]
        raise ValueError(f"{letter!r} ({what}) is a week field: SimpleDateFormat counts weeks by the JVM's default "
                         "locale (the first day of the week, the days the first week needs), so Kafka Connect's "
                         f"result depends on the worker's locale; use {instead}, or quote it ('{letter}') for the text")
    if letter not in LETTERS:
        raise ValueError(f"{letter!r} is not a SimpleDateFormat letter: Kafka Connect refuses the pattern (quote it, "
                         f"'{letter}', for the text {letter})")
    if letter == "X" and count > 3:
        raise ValueError(f"{letter * count!r}: SimpleDateFormat's X takes one to three letters (X -08, XX -0800, "
                         "XXX -08:00): Kafka Connect refuses the pattern")


def problem(java: str) -> str | None:
    """Why Kafka Connect (or cdcflow) refuses the pattern (None: it is served)."""
    try:
        tokens(java)
    except ValueError as exc:
        return str(exc)
    return None

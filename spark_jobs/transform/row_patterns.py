"""Java date patterns on the per-partition path: texts read by TimestampConverter's ``format``
into microseconds since the epoch (:func:`parse`) and timestamps written by it or TimestampRouter's
``timestamp_format`` (:func:`write`), in UTC. The patterns are Kafka Connect's: SimpleDateFormat's
letters, read into tokens by spark_jobs/transform/java_dates.py, which refuses what Kafka Connect refuses
(a letter SimpleDateFormat has not, ``XXXX``, a quote not closed) and the week fields ``w``, ``W``,
``Y`` (counted by the JVM's locale) when the config is loaded. Every other pattern is served:

* ``G`` the era (AD, BC for any count; then ``y`` is the year of the era), ``y`` the year (``yy``
  its last two digits, read as 2000-2099; without ``G`` a year before 1 is written with its sign,
  as Spark's), ``M``/``L`` the month (``MMM`` Jan, ``MMMM`` or more January), ``D`` the day of the
  year, ``d``, ``F`` the day of the week in the month (days 1-7 of the month are 1, 8-14 2 …), ``H``
  (0-23), ``h`` (1-12), ``K`` (0-11), ``k`` (1-24), ``m``, ``s``, ``S`` a fraction of the second (as
  many digits as letters: ``S`` tenths, ``SSS`` milliseconds, ``SSSSSS`` microseconds, past nine
  zeros; a text may give fewer digits: Spark's reading, not SimpleDateFormat's milliseconds), ``a``
  AM or PM, ``E`` the day's name (Thu, ``EEEE`` or more Thursday), ``u`` the day's number (1 Monday
  … 7 Sunday), ``X``/``Z`` a zone offset (written as UTC's: ``X`` Z, ``Z`` +0000, ``ZZZZZ`` Z; a
  text's offset is taken off, to UTC), ``z`` the zone's name (written ``UTC``, four or more
  Coordinated Universal Time; read: UTC, GMT or UT, with an offset ``+01:00`` or not, ``Z``,
  ``Etc/UTC``, ``Etc/GMT``, and with ``zzzz`` Coordinated Universal Time and Greenwich Mean Time);
  quoted text (``'T'``, ``''`` a quote) and every other character (``[ ] { } #`` too) stand for
  themselves; a number is written with at least as many digits as letters;
* a number of one letter reads one or two digits (``D`` one to three), of more exactly as many
  (``yyyy`` four; ``DD`` two or three); names and quoted text are read in any case; a field the
  pattern lacks is that of 1970-01-01 00:00:00; ``hh`` without ``a`` is before noon, ``kk`` 24 is
  midnight; ``HH`` with ``a``, ``D`` with ``M`` or ``d``, must agree; a day's name (``E``) or number
  (``u``, ``F``) is read and checked to be one, but the date need not fall on it, as SimpleDateFormat
  reads it. Dates are proleptic Gregorian (SimpleDateFormat's are Julian before 1582-10-15).

A zone name other than those above (PST, CET) is read by the JVM's zone data, which this path has
not: its text fails its record.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.transform.java_dates import Token, tokens  # noqa: F401 (the patterns' tokens are read through this module too)

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]  # Arrow's day_of_week
_RANGES = {"M": (1, 12), "L": (1, 12), "H": (0, 23), "h": (1, 12), "K": (0, 11), "k": (1, 24), "m": (0, 59),
           "s": (0, 59), "D": (1, 366), "u": (1, 7), "F": (1, 5)}
# zone names read without the JVM's zone data: UTC's and GMT's, with an offset or not
_ZONES = r"(?:(?:UTC|GMT|UT)(?:[+-]\d{2}:\d{2})?|Z|Etc/UTC|Etc/GMT)"
_LONG_ZONES = r"|Coordinated Universal Time|Greenwich Mean Time"
_OFFSETS = {1: r"[+-]\d{2}(?:\d{2})?", 2: r"[+-]\d{4}", 3: r"[+-]\d{2}:\d{2}", 5: r"[+-]\d{2}:\d{2}(?::\d{2})?"}
_SPECIAL = set("\\.+*?()|[]{}^$")  # what RE2 reads as other than itself


# -- reading ------------------------------------------------------------------------------------------
def _regex(letter: str, count: int) -> str:
    if letter in "ML" and count >= 3:
        return "(?:" + "|".join(m if count >= 4 else m[:3] for m in MONTHS) + ")"
    if letter == "E":
        return "(?:" + "|".join(d if count >= 4 else d[:3] for d in DAYS) + ")"
    if letter == "a":
        return "(?:AM|PM)"
    if letter == "G":
        return "(?:AD|BC)"
    if letter == "z":
        return _ZONES[:-1] + (_LONG_ZONES if count >= 4 else "") + ")"
    if letter == "D" and count <= 3:
        return {1: r"\d{1,3}", 2: r"\d{2,3}", 3: r"\d{3}"}[count]
    if letter == "S":
        return rf"\d{{1,{count}}}"
    if letter == "y" and count <= 4:
        return {1: r"\d{1,4}", 2: r"\d{2}", 3: r"\d{3,4}", 4: r"\d{4}"}[count]
    if letter in "XZ":
        offset = _OFFSETS[5 if letter == "Z" and count == 5 else 2 if letter == "Z" else count]
        return f"(?:Z|{offset})" if letter == "X" or count == 5 else offset
    return r"\d{1,2}" if count == 1 else rf"\d{{{count}}}"  # more letters: as many digits


def _literal(text: str) -> str:
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


def parse(texts: pa.Array, pattern: list[Token]) -> pa.Array:
    """Texts read by the pattern: microseconds since the epoch (UTC), null where a text does not
    match it or names no valid time (2024-02-30, 24:00 by HH …)."""
    regex = "(?i)^" + "".join(_literal(v) if k == "'" else f"(?P<f{i}>{_regex(k, v)})"  # any case, as Spark's
                              for i, (k, v) in enumerate(pattern)) + "$"
    n = len(texts)
    fields = [(f"f{i}", k, v) for i, (k, v) in enumerate(pattern) if k != "'"]
    if not fields:  # literals only: a text that is the pattern is 1970-01-01
        same = pc.fill_null(pc.equal(pc.utf8_lower(texts), "".join(v for _k, v in pattern).lower()), False)
        return pc.if_else(same, 0, pa.scalar(None, pa.int64()))
    found = pc.extract_regex(texts, regex)
    ok = found.is_valid().to_numpy(zero_copy_only=False).copy()
    parts: dict[str, np.ndarray] = {}

    def put(part: str, values: np.ndarray) -> None:
        if part in parts:  # a field twice: both must say the same
            ok[:] &= parts[part] == values
        parts[part] = values

    for name, letter, count in fields:
        text = pc.struct_field(found, name)  # null where the text did not match
        if letter == "E":
            continue  # a day's name (the regex read it), not checked against the date (nor are u and F)
        if letter in "ML" and count >= 3:
            names = [m if count >= 4 else m[:3] for m in MONTHS]
            put("month", _ints(pc.add(pc.index_in(pc.utf8_lower(text), pa.array([m.lower() for m in names])), 1)))
        elif letter == "a":
            put("pm", _ints(pc.equal(pc.utf8_upper(text), "PM")))
        elif letter == "G":
            put("bc", _ints(pc.equal(pc.utf8_upper(text), "BC")))
        elif letter == "z":  # UTC's or GMT's name, and its offset if it has one
            put("offset", _offset_seconds(pc.fill_null(pc.extract_regex(text, r"(?P<o>[+-]\d{2}:\d{2})$").field(
                "o"), "Z")))
        elif letter == "S":  # a fraction: its digits, then zeros, to six (µs; more digits are cut)
            put("micro", _ints(pc.utf8_slice_codeunits(pc.utf8_rpad(text, 6, "0"), 0, 6)))
        elif letter in "XZ":
            offset = _offset_seconds(text)
            ok &= np.abs(offset) <= 18 * 3_600
            put("offset", offset)
        else:
            values = _ints(text)
            low, high = _RANGES.get(letter, (0, 10**9))
            ok &= (values >= low) & (values <= high)
            part = {"y": "year", "M": "month", "L": "month", "d": "day", "m": "minute", "s": "second",
                    "D": "day_of_year", "u": "day_number", "F": "week_in_month"}.get(letter)
            if letter == "y" and count == 2:
                values = values + 2000
            put(part or letter, values)
    year = parts.get("year", np.full(n, 1970))
    if "bc" in parts:  # y is the year of the era: 1 BC is the year 0
        year = np.where(parts["bc"] == 1, 1 - year, year)
    month, day = _month_and_day(parts, year, ok)
    ok &= (day >= 1) & (day <= days_in_month(year, month))
    pm = parts.get("pm")
    if "H" in parts:
        hour = parts["H"]
        if pm is not None:  # 13:00 PM, 01:00 AM; not 01:00 PM
            ok &= (hour >= 12) == (pm == 1)
    elif "k" in parts:
        hour = parts["k"] % 24
    else:
        hour = parts.get("h", parts.get("K", np.zeros(n, np.int64))) % 12 + (12 * pm if pm is not None else 0)
    seconds = (days_from_civil(year, month, day) * 86_400 + hour * 3_600 + parts.get("minute", 0) * 60
               + parts.get("second", 0) - parts.get("offset", 0))
    micros = seconds * 1_000_000 + parts.get("micro", 0)
    return pa.array(micros, pa.int64(), mask=~ok)


def _month_and_day(parts: dict[str, np.ndarray], year: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The month and day of the month read, or those of the day of the year (``D``), which a month
    or a day read beside it must agree with (as Spark resolves them); ``ok`` cleared where not."""
    n = len(year)
    month, day = parts.get("month", np.ones(n, np.int64)), parts.get("day", np.ones(n, np.int64))
    if "day_of_year" not in parts:
        return month, day
    of_year = parts["day_of_year"]
    leap = days_in_month(year, np.full(n, 2)) == 29
    ok &= of_year <= 365 + leap
    starts = days_from_civil(year, np.ones(n, np.int64), np.ones(n, np.int64))
    at = days_from_civil(year, np.full(n, 12), np.full(n, 31))  # a day past the year's end is caught above
    at = np.minimum(starts + of_year - 1, at)
    derived_month, derived_day = civil_from_days(at)
    for part, derived in (("month", derived_month), ("day", derived_day)):
        if part in parts:
            ok &= parts[part] == derived
    return derived_month, derived_day


def civil_from_days(days: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The month and day of days since 1970-01-01 (the inverse of :func:`days_from_civil`)."""
    z = days + 719_468
    era = np.floor_divide(z, 146_097)
    of_era = z - era * 146_097
    year_of_era = (of_era - of_era // 1_460 + of_era // 36_524 - of_era // 146_096) // 365
    of_year = of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * of_year + 2) // 153
    return np.where(shifted < 10, shifted + 3, shifted - 9), of_year - (153 * shifted + 2) // 5 + 1


def _ints(values: pa.Array) -> np.ndarray:
    """Digits (or numbers) as int64, 0 where null (the row is not read then)."""
    return pc.cast(values, pa.int64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def _offset_seconds(text: pa.Array) -> np.ndarray:
    """A zone offset's text (Z, +01, +0130, -01:30:15) as seconds east of UTC."""
    digits = pc.replace_substring_regex(text, "[:Zz]", "")
    sign = np.where(pc.starts_with(digits, "-").to_numpy(zero_copy_only=False), -1, 1)
    hours, minutes, seconds = [_ints(pc.if_else(pc.equal(part, ""), "0", part))
                               for part in (pc.utf8_slice_codeunits(digits, at, at + 2) for at in (1, 3, 5))]
    valid = (minutes < 60) & (seconds < 60)  # else past the range parse() checks
    return np.where(valid, sign * (hours * 3_600 + minutes * 60 + seconds), 10**6)


def days_in_month(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    lengths = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
    return lengths[np.clip(month, 0, 12)] + (leap & (month == 2))


def days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (March-based years: the leap day last)."""
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    of_era = y - era * 400
    of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    return era * 146_097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719_468


# -- writing ------------------------------------------------------------------------------------------
def write(stamp: pa.Array, pattern: list[Token]) -> pa.Array:
    """Timestamps (UTC) as text by the pattern; null stays null."""
    stamp = pc.cast(stamp, pa.timestamp("us"))
    pieces: list[Any] = []
    era = any(letter == "G" for letter, _c in pattern)  # y is then the year of the era
    for letter, count in pattern:
        if letter == "'":
            pieces.append(count)
        elif letter in "XZ":  # UTC's offset: X and ZZZZZ Z, other Z +0000
            pieces.append("Z" if letter == "X" or count == 5 else "+0000")
        elif letter == "z":
            pieces.append("Coordinated Universal Time" if count >= 4 else "UTC")
        elif letter == "y":
            pieces.append(_year_text(stamp, count, era))
        else:
            pieces.append(_field_text(stamp, letter, count))
    if not any(isinstance(p, pa.Array) for p in pieces):
        return pc.if_else(pc.is_valid(stamp), "".join(pieces), pa.scalar(None, pa.string()))
    return pc.binary_join_element_wise(*pieces, "")


def _year_text(stamp: pa.Array, count: int, era: bool) -> pa.Array:
    """The year: with ``G`` the year of the era (1 BC is 1), without it the proleptic year, signed
    (Spark's ``y`` without ``G`` is the proleptic year); ``yy`` the last two digits of either."""
    year = pc.year(stamp).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if era:
        year = np.where(year < 1, 1 - year, year)
    mask = stamp.is_null().to_numpy(zero_copy_only=False)
    if count == 2:
        return pc.utf8_lpad(pc.cast(pa.array(np.abs(year) % 100, pa.int64(), mask=mask), pa.string()), 2, "0")
    digits = pc.utf8_lpad(pc.cast(pa.array(np.abs(year), pa.int64(), mask=mask), pa.string()), count, "0")
    # a sign before a year of more digits than four or more letters ask for (DateTimeFormatter's EXCEEDS_PAD)
    sign = np.where(year < 0, "-", np.where((count >= 4) & (year >= 10 ** min(count, 18)), "+", ""))
    return pc.binary_join_element_wise(pa.array(sign, pa.string()), digits, "")


def _field_text(stamp: pa.Array, letter: str, count: int) -> pa.Array:
    if letter in "ML" and count >= 3 or letter == "E":
        index = pc.subtract(pc.month(stamp), 1) if letter != "E" else pc.day_of_week(stamp)
        names = [v if count >= 4 else v[:3] for v in (MONTHS if letter != "E" else DAYS)]
        return pa.array(names).take(index)
    if letter == "a":
        return pc.if_else(pc.greater_equal(pc.hour(stamp), 12), "PM", "AM")
    if letter == "G":
        return pc.if_else(pc.greater_equal(pc.year(stamp), 1), "AD", "BC")
    if letter == "S":  # the fraction's first digits (µs, then zeros)
        micros = pc.add(pc.multiply(pc.millisecond(stamp), 1000), pc.microsecond(stamp))
        digits = pc.utf8_rpad(pc.utf8_lpad(pc.cast(micros, pa.string()), 6, "0"), max(count, 9), "0")
        return pc.utf8_slice_codeunits(digits, 0, count)
    part = {"M": pc.month, "L": pc.month, "d": pc.day, "m": pc.minute, "s": pc.second, "D": pc.day_of_year,
            "u": pc.day_of_week, "F": pc.day}.get(letter, pc.hour)
    values = part(stamp).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if letter == "h":
        values = (values + 11) % 12 + 1
    elif letter == "K":
        values = values % 12
    elif letter == "k":
        values = np.where(values == 0, 24, values)
    elif letter == "u":  # SimpleDateFormat's day number: 1 Monday (Arrow's day_of_week: 0 Monday)
        values = values + 1
    elif letter == "F":  # SimpleDateFormat's day of the week in the month: days 1-7 are 1, 8-14 2 …
        values = (values - 1) // 7 + 1
    number = pa.array(values, pa.int64(), mask=stamp.is_null().to_numpy(zero_copy_only=False))
    return pc.utf8_lpad(pc.cast(number, pa.string()), 1 if count == 1 else count, "0")

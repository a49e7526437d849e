"""Java syntax the per-partition path reads as Kafka Connect does: SimpleDateFormat patterns
(spark_jobs/transform/row_patterns.py: TimestampConverter, TimestampRouter), Java regexes and RegexRouter's
replacements (spark_jobs/transform/java_regex.py). The texts expected for the letters Spark has are Spark's own
(``date_format``, ``try_to_timestamp`` in a UTC session, ``regexp_replace``: the older path's, checked
against Spark in tests/spark/test_row_patterns.py); for the others they are written by hand from
SimpleDateFormat's and java.util.regex's javadoc."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest

from cdcflow.config import parse_pipeline
from connectors.errors import ConfigError
from spark_jobs.transform import java_regex
from spark_jobs.transform import row_patterns as rp
from spark_jobs.transform import row_transforms as rt
from tests.fixtures import orders as o
from tests.fixtures.debezium import orders as fx
from tests.unit.spark_jobs.test_row_transforms import MYSQL, chain, decoded, job, rows

EPOCH = dt.datetime(1970, 1, 1)


def _micros(at: dt.datetime) -> int:
    return (at - EPOCH) // dt.timedelta(microseconds=1)


def _write(at: dt.datetime, pattern: str) -> str:
    return rp.write(pa.array([_micros(at)], pa.timestamp("us")), rp.tokens(pattern))[0].as_py()


@pytest.mark.parametrize(("at", "pattern", "want"), [
    (dt.datetime(2024, 2, 29, 13, 4, 5, 123456), "yyyy-MM-dd'T'HH:mm:ss", "2024-02-29T13:04:05"),
    (dt.datetime(2024, 2, 29, 13, 4, 5, 123456), "yy MMM MMMM L LLL", "24 Feb February 2 Feb"),
    (dt.datetime(2024, 2, 29, 13, 4, 5, 123456), "EEE EEEE E", "Thu Thursday Thu"),
    (dt.datetime(2024, 2, 29, 13, 4, 5, 123456), "hh a h K k", "01 PM 1 1 13"),
    (dt.datetime(2024, 2, 29, 0, 4, 5), "hh a h K k", "12 AM 12 0 24"),
    (dt.datetime(2024, 2, 29, 13, 4, 5, 123456), "S SS SSS SSSS SSSSSS SSSSSSSSS", "1 12 123 1234 123456 123456000"),
    (dt.datetime(2024, 2, 29, 13, 4, 5), "XXX XX X Z ZZ ZZZZZ", "Z Z Z +0000 +0000 Z"),
    (dt.datetime(99, 2, 28), "y yy yyy yyyy", "99 99 099 0099"),
    (dt.datetime(2024, 2, 9, 3, 4, 5), "M d H m s", "2 9 3 4 5"),
    (dt.datetime(2024, 2, 9), "'it''s' yyyy ''", "it's 2024 '"),
])
def test_timestamps_are_written_as_sparks_date_format_writes_them(at: dt.datetime, pattern: str, want: str) -> None:
    assert _write(at, pattern) == want


@pytest.mark.parametrize(("pattern", "texts", "want"), [
    ("yyyy-MM-dd'T'HH:mm:ss", ["2024-02-29T13:14:15", "2024-02-30T13:14:15", " 2024-02-29T13:14:15"],
     [dt.datetime(2024, 2, 29, 13, 14, 15), None, None]),
    ("yy-MMM-dd HH:mm", ["24-feb-29 13:14", "99-FEB-28 13:14", "24-Sept-01 13:14"],
     [dt.datetime(2024, 2, 29, 13, 14), dt.datetime(2099, 2, 28, 13, 14), None]),
    ("dd MMMM yyyy hh:mm a", ["29 February 2024 01:14 PM", "29 february 2024 12:14 am", "29 February 2024 13:14 PM"],
     [dt.datetime(2024, 2, 29, 13, 14), dt.datetime(2024, 2, 29, 0, 14), None]),
    ("HH:mm:ss.SSS", ["13:14:15.5", "13:14:15.123", "13:14:15.1234"],
     [dt.datetime(1970, 1, 1, 13, 14, 15, 500000), dt.datetime(1970, 1, 1, 13, 14, 15, 123000), None]),
    ("HH:mm:ss.SSSSSSSSS", ["13:14:15.123456789"], [dt.datetime(1970, 1, 1, 13, 14, 15, 123456)]),
    ("yyyy-MM-dd'T'HH:mm:ssXXX", ["2024-02-29T13:14:15+02:00", "2024-02-29T13:14:15z", "2024-02-29T13:14:15-00:30"],
     [dt.datetime(2024, 2, 29, 11, 14, 15), dt.datetime(2024, 2, 29, 13, 14, 15),
      dt.datetime(2024, 2, 29, 13, 44, 15)]),
    ("yyyy-MM-dd HH:mm:ssZ", ["2024-02-29 13:14:15+0200", "2024-02-29 13:14:15Z"],
     [dt.datetime(2024, 2, 29, 11, 14, 15), None]),
    ("yyyy-MM-dd HH:mm:ssX", ["2024-02-29 13:14:15+0230", "2024-02-29 13:14:15+0260", "2024-02-29 13:14:15+19"],
     [dt.datetime(2024, 2, 29, 10, 44, 15), None, None]),
    ("yyyy-M-d H:m:s", ["2024-2-9 3:4:5", "2024-02-09 03:04:05"], [dt.datetime(2024, 2, 9, 3, 4, 5)] * 2),
    ("yyyy/MM/dd KK:mm a", ["2024/02/29 11:00 PM", "2024/02/29 12:00 AM"], [dt.datetime(2024, 2, 29, 23), None]),
    ("yyyy-MM-dd kk:mm", ["2024-02-29 24:00", "2024-02-29 00:00"], [dt.datetime(2024, 2, 29), None]),
    ("yyyy-MM-dd HH:mm a", ["2024-02-29 13:14 PM", "2024-02-29 01:14 PM"], [dt.datetime(2024, 2, 29, 13, 14), None]),
    ("'week' yyyy", ["WEEK 2024"], [dt.datetime(2024, 1, 1)]),
    # a day name is read but not held against the date, as SimpleDateFormat reads it (Spark refuses E)
    ("EEE, dd MMM yyyy", ["Thu, 29 Feb 2024", "fri, 29 Feb 2024", "Fry, 29 Feb 2024"],
     [dt.datetime(2024, 2, 29), dt.datetime(2024, 2, 29), None]),
])
def test_texts_are_read_as_sparks_try_to_timestamp_reads_them(pattern: str, texts: list[str],
                                                              want: list[dt.datetime | None]) -> None:
    got = rp.parse(pa.array(texts), rp.tokens(pattern)).to_pylist()
    assert got == [None if w is None else _micros(w) for w in want]


def test_what_spark_refuses_is_read_and_written_as_kafka_connects_simple_date_format_does() -> None:
    """SimpleDateFormat (java.text.SimpleDateFormat, Kafka Connect's TimestampConverter; its javadoc's
    table of pattern letters): ``u`` the day number of the week (1 Monday … 7 Sunday), four letters or
    more of a name the full name; a day's number, like its name, is read but not held against the
    date. Spark refuses these letters (tests/spark/test_row_patterns.py checks the rest against Spark)."""
    at = dt.datetime(2024, 2, 29, 13, 4, 5)
    assert _write(at, "EEEEE MMMMM LLLLL u uu") == f"{at:%A %B %B} {at.isoweekday()} 0{at.isoweekday()}"
    assert [_write(at + dt.timedelta(days=d), "u") for d in range(7)] == [
        str((at + dt.timedelta(days=d)).isoweekday()) for d in range(7)]
    read = rp.parse(pa.array(["2024-02-29 4", "2024-02-29 5", "2024-02-29 8", "Thursday, 29 February 2024"]),
                    rp.tokens("yyyy-MM-dd u")).to_pylist()
    assert read == [_micros(dt.datetime(2024, 2, 29))] * 2 + [None, None]
    assert rp.parse(pa.array(["Thursday, 29 February 2024"]), rp.tokens("EEEEE, dd MMMMM yyyy")).to_pylist() == [
        _micros(dt.datetime(2024, 2, 29))]


@pytest.mark.parametrize(("at", "pattern", "want"), [
    # F: the day of the week in the month, (day - 1) / 7 + 1: the 29th is the fifth Thursday
    (dt.datetime(2024, 2, 29), "F FF", "5 05"),
    (dt.datetime(2024, 2, 7), "F", "1"),
    (dt.datetime(2024, 2, 8), "F", "2"),
    (dt.datetime(2024, 2, 29), "GGGG yyyy G", "AD 2024 AD"),  # the era is AD or BC for any count
    (dt.datetime(2024, 2, 29), "dd MMMMMM LLLLLL EEEEEE", "29 February February Thursday"),  # 4 or more: full
    (dt.datetime(2024, 2, 29), "yyyy[-MM]{dd}#", "2024[-02]{29}#"),  # not letters: themselves
    # a number of more letters: zero-padded to as many digits (yyyyy too: only yy is cut to two)
    (dt.datetime(2024, 2, 29, 13, 4, 5), "ddd HHH mmm sss DDDD uuu yyyyy", "029 013 004 005 0060 004 02024"),
    (dt.datetime(2024, 2, 29, 13, 4, 5), "KKK kkk hhh aa", "001 013 001 PM"),
    (dt.datetime(2024, 2, 29, 13, 4, 5), "zzzzz ZZZZ ZZZZZZ", "Coordinated Universal Time +0000 +0000"),
    (dt.datetime(2024, 2, 29, 13, 4, 5, 123456), "SSSSSSSSSSS", "12345600000"),  # the fraction, then zeros
    (dt.datetime(2024, 2, 29), "", ""),
])
def test_the_other_simple_date_format_letters_and_counts_are_written_as_it_writes_them(
        at: dt.datetime, pattern: str, want: str) -> None:
    """SimpleDateFormat's javadoc (its table of letters, "Number", "Text", "Month", "Year"), in UTC."""
    assert _write(at, pattern) == want


def test_the_other_simple_date_format_letters_and_counts_are_read() -> None:
    """F, like E and u, is read and checked to be one (1-5), not held against the date."""
    day = _micros(dt.datetime(2024, 2, 29))
    assert rp.parse(pa.array(["2024-02-29 5", "2024-02-29 1", "2024-02-29 6"]), rp.tokens("yyyy-MM-dd F")
                    ).to_pylist() == [day, day, None]
    assert rp.parse(pa.array(["029.February.02024", "29.February.2024"]), rp.tokens("ddd.MMMMMM.yyyyy")
                    ).to_pylist() == [day, None]
    assert rp.parse(pa.array(["AD 2024[02]{29}#"]), rp.tokens("GGGG yyyy[MM]{dd}#")).to_pylist() == [day]


def test_the_era_the_day_of_the_year_and_utcs_names_are_read() -> None:
    """Spark's reading of G, D and z (tests/spark/test_row_patterns.py) where Spark cannot say: a year
    before 1 (Spark fails the window on it), a zone name only the JVM's zone data knows (a dead letter
    here: docs/transforms.md)."""
    day = 86_400_000_000
    assert rp.parse(pa.array(["BC 0001-12-31", "bc 0045-03-15", "AD 0001-01-01"]), rp.tokens("G yyyy-MM-dd")
                    ).to_pylist() == [_micros(dt.datetime(1, 1, 1)) - day, _micros(dt.datetime(1, 3, 15)) - (
                        45 * 365 + 11) * day, _micros(dt.datetime(1, 1, 1))]
    assert rp.parse(pa.array(["2024 60", "2023 60", "2023 366", "2024 0"]), rp.tokens("yyyy D")).to_pylist() == [
        _micros(dt.datetime(2024, 2, 29)), _micros(dt.datetime(2023, 3, 1)), None, None]
    assert rp.parse(pa.array(["2024-02 60", "2024-03 60"]), rp.tokens("yyyy-MM D")).to_pylist() == [
        _micros(dt.datetime(2024, 2, 29)), None]  # the month must be the day's
    zoned = ["2024-02-29 13:00 UTC", "2024-02-29 13:00 GMT+01:30", "2024-02-29 13:00 utc-02:00",
             "2024-02-29 13:00 Etc/GMT", "2024-02-29 13:00 PST", "2024-02-29 13:00 Greenwich Mean Time"]
    assert rp.parse(pa.array(zoned), rp.tokens("yyyy-MM-dd HH:mm z")).to_pylist() == [
        _micros(dt.datetime(2024, 2, 29, h, m)) if h is not None else None
        for h, m in ((13, 0), (11, 30), (15, 0), (13, 0), (None, 0), (None, 0))]
    assert rp.parse(pa.array(zoned[-1:]), rp.tokens("yyyy-MM-dd HH:mm zzzz")).to_pylist() == [
        _micros(dt.datetime(2024, 2, 29, 13))]


def test_a_converter_writes_and_reads_back_a_debezium_datetime_by_a_java_pattern() -> None:
    pattern = "EEE, dd MMM yyyy hh:mm:ss.SSSSSS a XXX"
    steps = chain({"type": "TimestampConverter", "field": "created", "target_type": "string", "format": pattern},
                  {"type": "ReplaceField", "renames": {"created": "shown"}},
                  {"type": "InsertField", "static_field": "again", "static_value": "29 Feb 24 13:14:15.5 +0100"},
                  {"type": "TimestampConverter", "field": "again", "target_type": "unix",
                   "format": "dd MMM yy HH:mm:ss.S Z", "unix_precision": "microseconds"})
    assert rt.unserved(job(MYSQL, transforms=steps)) is None
    out = rows(rt.apply(decoded(fx.events()[:2]), steps, "source_ts_ms"))
    assert [r["image"]["shown"] for r in out] == ["Thu, 29 Feb 2024 01:14:15.123456 PM Z",
                                                  "Wed, 31 Dec 1969 11:59:59.999999 PM Z"]
    assert o.ROW_1["created"] == dt.datetime(2024, 2, 29, 13, 14, 15, 123456)
    assert out[0]["image"]["again"] == str(_micros(dt.datetime(2024, 2, 29, 12, 14, 15, 500000)))


def test_a_text_a_java_pattern_cannot_read_fails_its_record_with_the_pattern() -> None:
    record = (b'{"id": 1}', json.dumps({"op": "c", "after": {"id": 1, "at": "31 Feb 2024"},
                                        "source": {"ts_ms": 5}}).encode())
    out = rows(rt.apply(decoded([record]), chain({"type": "TimestampConverter", "field": "at", "target_type": "unix",
                                                  "format": "dd MMM yyyy"}), "source_ts_ms"))
    assert out[0]["error_message"] == (
        "TimestampConverter: value.at = '31 Feb 2024' is not a timestamp in format dd MMM yyyy")


def _route(regex: str, replacement: str, **step: Any) -> list[str]:
    steps = chain({"type": "RegexRouter", "regex": regex, "replacement": replacement, **step})
    assert rt.unserved(job(MYSQL, transforms=steps)) is None
    return [r["route"] for r in rows(rt.apply(decoded(fx.events()[:2]), steps, "source_ts_ms"))]


def test_regex_router_reads_group_numbers_past_nine_as_java_does() -> None:
    thirteen = r"(m)(y)(s)(q)(l)-(s)(e)(r)(v)(e)(r)-1\.(\w+)\.(\w+)"
    # Spark's regexp_replace for these records: $14 is group 1 and a 4 (13 groups), $1x group 1 and x
    assert _route(thirteen, "$10_$11_$12_$13_$14_$0_$1x\\$") == [
        "e_r_inventory_orders_m4_mysql-server-1.inventory.orders_mx$"] * 2
    assert _route(r"(m)ysql-server-1\.(\w+)\.(\w+)", "$10_$3") == ["m0_orders"] * 2
    # a named group: Python's syntax (Java's Pattern refuses it; cdcflow reads it, as it did before)
    assert _route(r"mysql-server-1\.(?P<db>\w+)\.(x)?(\w+)", "${db}_$2$3") == ["inventory_orders"] * 2
    assert _route(r"mysql-server-1\.\w+\.\w+", "archive") == ["archive"] * 2
    assert _route(r"other\.(.*)", "$1") == [fx.TOPIC] * 2
    assert _route(r"(.*)", "x_$1", negate=True, predicate={"type": "TopicNameMatches", "pattern": ".*"}) == [
        fx.TOPIC] * 2


def test_regexes_in_javas_syntax_route_as_kafka_connects_regex_router_does() -> None:
    """java.util.regex.Pattern's syntax (its javadoc), which RE2 does not read, on the topic
    mysql-server-1.inventory.orders: the routes written out by hand."""
    assert _route(r"mysql-server-1\.(?<db>\w+)\.(?<table>\w++)", "${table}_${db}") == ["orders_inventory"] * 2
    assert _route(r"mysql-server-(\d)\.(?!other)(\w+)\.(?<=y\.)(\w+)", "$2_$3_$1") == ["inventory_orders_1"] * 2
    assert _route(r".*(s)ql-(\1)erver-1\.(\w+)\.\w+", "$3_$2") == ["inventory_s"] * 2  # a backreference
    assert _route(r"[a-z&&[^q]]+-server-1\.(\w+)\.(\w+)", "$2") == [fx.TOPIC] * 2  # mysql has a q: no match
    assert _route(r"[a-z&&[^x]]+-server-1\.(\w+)\.(\w+)", "$2") == ["orders"] * 2
    assert _route(r"\Qmysql-server-1.\E(\p{Alpha}+)[.](?i)ORDERS", "$1") == ["inventory"] * 2
    # matches() then replaceFirst: the first match found is "mysql", not the whole topic
    assert _route(r"mysql|mysql-server-1\.inventory\.orders", "db") == ["db-server-1.inventory.orders"] * 2
    assert _route(r"(.*)", "x_$1", predicate={"type": "TopicNameMatches",
                                              "pattern": r"(?<name>mysql)-server-\d\.(?!customers)\w+\.\w+"}) == [
        f"x_{fx.TOPIC}"] * 2


@pytest.mark.parametrize(("java", "python"), [
    (r"(?<db>\w+)\k<db>", r"(?P<db>[\w]+)(?P=db)"),
    (r"[a-z&&[^aeiou]]", r"(?:(?=[^aeiou])[a-z])"),
    (r"[a-c[x-z]]", r"(?:[a-c]|[x-z])"),
    (r"[[:alpha:]]", r"[:alpha:]"),  # Java has no POSIX brackets: a nested class of : a l p h
    (r"a(?i)b|c", r"a(?i:b)|(?i:c)"),  # a flag holds to the end of its group, across |
    (r"\Q(a)\E\p{Digit}\P{Alpha}", r"\(a\)[0-9][^a-zA-Z]"),
    (r"(a)\1\11", r"(a)(?:\1)(?:\1)1"),  # \11 of one group: group 1 and a 1
    (r"(?x) a b # c", r"ab"),
    (r"a*+(?>b|bc)\z", r"a*+(?>b|bc)\Z"),
])
def test_java_regexes_are_written_in_pythons_syntax_with_their_meaning(java: str, python: str) -> None:
    assert java_regex.translate(java) == python


def _refused(step: dict[str, Any]) -> str:
    text = json.dumps({"name": "p", "source": {"topics": ["a.b.c"]}, "transforms": [
        {"type": "ExtractNewRecordState"}, step], "sinks": [{"type": "mysql", "table": "t", "create_table": True}]})
    with pytest.raises(ConfigError) as exc:
        parse_pipeline(text, "p.yaml")
    return str(exc.value)


@pytest.mark.parametrize(("step", "said"), [
    ({"type": "TimestampConverter", "field": "a", "target_type": "string", "format": "yyyy QQQ"},
     "transforms.1.format: TimestampConverter: 'Q' is not a SimpleDateFormat letter: Kafka Connect refuses the "
     "pattern (quote it, 'Q', for the text Q); got 'yyyy QQQ'"),
    ({"type": "TimestampConverter", "field": "a", "target_type": "unix", "format": "yyyy-MM-dd xxx"},
     "transforms.1.format: TimestampConverter: 'x' is not a SimpleDateFormat letter"),
    ({"type": "TimestampRouter", "timestamp_format": "yyyy-ww"},
     "transforms.1.timestamp_format: TimestampRouter: 'w' (the week of the year) is a week field: SimpleDateFormat "
     "counts weeks by the JVM's default locale (the first day of the week, the days the first week needs), so "
     "Kafka Connect's result depends on the worker's locale; use D (the day of the year) or MM-dd, or quote it "
     "('w') for the text; got 'yyyy-ww'"),
    ({"type": "TimestampRouter", "timestamp_format": "YYYY"}, "'Y' (the week year) is a week field"),
    ({"type": "TimestampRouter", "timestamp_format": "yyyy-MM W"}, "use F (the day of the week in the month) or d"),
    ({"type": "TimestampConverter", "field": "a", "target_type": "string", "format": "HH:mm XXXX"},
     "transforms.1.format: TimestampConverter: 'XXXX': SimpleDateFormat's X takes one to three letters"),
    ({"type": "TimestampConverter", "field": "a", "target_type": "string", "format": "yyyy-MM-dd'T"},
     "transforms.1.format: TimestampConverter: the quote at 10 is not closed: Kafka Connect refuses the pattern"),
    ({"type": "RegexRouter", "regex": "(?<a>a)(b)", "replacement": "${b}"},
     "transforms.1.replacement: RegexRouter: ${b} names a group the regex lacks (its named groups: a): Kafka "
     "Connect's RegexRouter fails every record it renames by it; got '${b}'"),
    ({"type": "RegexRouter", "regex": "(a)(b)", "replacement": "$3"}, "$3 names group 3, but the regex has 2 groups"),
    ({"type": "RegexRouter", "regex": "(a)", "replacement": "x$y"},
     "the $ at 1 is not followed by a group number or {name} (write \\$ for a dollar sign)"),
    ({"type": "RegexRouter", "regex": "(a)", "replacement": "x\\"}, "it ends in a \\, which escapes nothing"),
    ({"type": "RegexRouter", "regex": "a{,3}", "replacement": "x"},
     "transforms.1.regex: RegexRouter: the { at 1 is not a repetition ({n}, {n,}, {n,m}): Kafka Connect refuses "
     "the regex"),
    ({"type": "RegexRouter", "regex": "[^a[b]]", "replacement": "x"}, "negate inside it ([a-z&&[^aeiou]])"),
    ({"type": "Filter", "predicate": {"type": "TopicNameMatches", "pattern": r"\p{L}+"}},
     "transforms.1.predicate.pattern: TopicNameMatches: \\p{L} at 0: cdcflow reads the POSIX classes"),
    ({"type": "Filter", "predicate": {"type": "TopicNameMatches", "pattern": r"\y"}},
     "\\y at 0 is not a Java escape: Kafka Connect refuses the regex"),
])
def test_what_kafka_connect_refuses_is_a_config_error_naming_the_field(step: dict[str, Any], said: str) -> None:
    message = _refused(step)
    assert said in message, message


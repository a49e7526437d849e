"""Schema changes of tables made from the record schema (connectors/mysql/evolution.py): how a column's
type change is classified, and what each schema_changes policy does with the changes."""

from __future__ import annotations

import pytest

from connectors.mysql.evolution import Column, SchemaChangeRefused, changes, classify, decide
from connectors.mysql.types import parse_type


@pytest.mark.parametrize(("old", "new", "kind"), [
    ("varchar(32)", "VARCHAR(64)", "widen"), ("varchar(64)", "VARCHAR(32)", "narrow"),
    ("int(11)", "BIGINT", "widen"), ("bigint(20)", "INT", "narrow"), ("int(11)", "INT", None),
    ("tinyint(1)", "TINYINT(1)", None), ("int(10) unsigned", "BIGINT", "widen"), ("int(11)", "INT UNSIGNED", "narrow"),
    ("decimal(10,2)", "DECIMAL(12,2)", "widen"), ("decimal(10,2)", "DECIMAL(12,4)", "widen"),
    ("decimal(10,2)", "DECIMAL(10,3)", "narrow"), ("decimal(12,2)", "DECIMAL(10,2)", "narrow"),
    ("datetime", "DATETIME(6)", "widen"), ("datetime(6)", "DATETIME(3)", "narrow"), ("time(3)", "TIME(6)", "widen"),
    ("timestamp(3)", "TIMESTAMP(6)", "widen"), ("date", "DATETIME(6)", "convert"),
    ("enum('a','b')", "ENUM('a','b','c')", "extend"), ("enum('a','b')", "ENUM('b','a','c')", "narrow"),
    ("set('r','g')", "SET('r','g','b')", "extend"), ("set('r','g')", "SET('r')", "narrow"),
    ("float", "DOUBLE", "widen"), ("double", "FLOAT", "narrow"), ("bit(1)", "BIT(8)", "widen"),
    ("text", "LONGTEXT", "widen"), ("longtext", "VARCHAR(255)", "narrow"), ("longtext", "JSON", None),
    ("varbinary(16)", "LONGBLOB", "widen"), ("blob", "VARBINARY(16)", "narrow"),
    ("int(11)", "DECIMAL(12,0)", "convert"), ("bigint(20)", "DECIMAL(12,0)", "narrow"),
    ("int(11)", "VARCHAR(20)", "convert"), ("int(11)", "VARCHAR(5)", "narrow"), ("int(11)", "LONGTEXT", "convert"),
    ("int(11)", "DATE", "narrow"), ("point", "POINT", None), ("point", "GEOMETRY", "narrow"),
])
def test_a_type_change_is_classified_by_what_the_new_type_holds(old: str, new: str, kind: str | None) -> None:
    assert classify(parse_type(old), parse_type(new)) == kind


TABLE = [Column("id", "int(11)", False), Column("name", "varchar(32)", False), Column("price", "decimal(10,2)", True),
         Column("old_note", "longtext", True), Column("code", "varchar(8)", False), Column("__cdc_version", "bigint(20)", False)]


def test_changes_of_a_table_add_widen_relax_rename_and_drop() -> None:
    """The source: name widened and made optional, price widened, old_note renamed to note, code dropped."""
    desired = [Column("id", "INT", False), Column("name", "VARCHAR(64)", True), Column("price", "DECIMAL(12,2)", True),
               Column("note", "LONGTEXT", True)]
    found = {(c.column, c.kind): c.statement for c in
             changes("t", desired, ["id"], TABLE, ["id"], protected=frozenset({"__cdc_version"}))}
    assert found == {
        ("name", "widen"): "ALTER TABLE `t` MODIFY COLUMN `name` VARCHAR(64) NULL",
        ("price", "widen"): "ALTER TABLE `t` MODIFY COLUMN `price` DECIMAL(12,2) NULL",
        ("note", "add"): "ALTER TABLE `t` ADD COLUMN `note` LONGTEXT NULL",
        ("old_note", "dropped"): None,  # nullable already: kept as it is
        ("code", "dropped"): "ALTER TABLE `t` MODIFY COLUMN `code` varchar(8) NULL",  # rows without it can be written
    }


def test_each_policy() -> None:
    desired = [Column("id", "INT", False), Column("name", "VARCHAR(64)", False), Column("price", "DECIMAL(10,2)", True),
               Column("old_note", "LONGTEXT", True), Column("code", "VARCHAR(8)", False), Column("n", "INT", True)]
    found = changes("t", desired, ["id"], TABLE, ["id"], protected=frozenset({"__cdc_version"}))
    assert [(c.column, c.kind) for c in found] == [("name", "widen"), ("n", "add")]
    for policy in ("lenient", "evolve"):
        applied, ignored = decide(found, policy)
        assert [c.kind for c in applied] == ["widen", "add"] and ignored == []
    assert decide(found, "ignore") == ([], found)
    with pytest.raises(SchemaChangeRefused, match="schema_changes: fail stops at any change.*table 't' column 'name'"):
        decide(found, "fail")


def test_narrowing_and_a_new_key_are_never_applied() -> None:
    narrow = changes("t", [Column("id", "INT", False), Column("name", "VARCHAR(16)", False)], ["id"], TABLE, ["id"],
                     protected=frozenset({"__cdc_version"}))
    for policy in ("lenient", "evolve"):
        with pytest.raises(SchemaChangeRefused, match=r"never applies narrow changes.*column 'name': varchar\(32\) -> "
                                                      r"VARCHAR\(16\): narrower"):
            decide(narrow, policy)
    assert decide(narrow, "ignore")[0] == []  # ignore writes the columns the table has, as they are
    key = changes("t", [Column("id", "INT", False), Column("code", "VARCHAR(8)", False)], ["code"], TABLE, ["id"],
                  protected=frozenset({"__cdc_version"}))
    for policy in ("lenient", "evolve", "ignore", "fail"):
        with pytest.raises(SchemaChangeRefused, match="primary key id -> code"):
            decide(key, policy)


def test_a_conversion_is_evolve_only() -> None:
    found = changes("t", [Column("id", "INT", False), Column("code", "LONGTEXT", False)], ["id"],
                    [Column("id", "int(11)", False), Column("code", "int(11)", False)], ["id"])
    assert [c.kind for c in decide(found, "evolve")[0]] == ["convert"]
    with pytest.raises(SchemaChangeRefused, match="evolve converts types"):
        decide(found, "lenient")


def test_a_key_column_stays_not_null() -> None:
    """A key column the records call optional (a declared column's default) is not relaxed: MySQL keeps a
    primary key NOT NULL, so the change would be found again by every window."""
    found = changes("t", [Column("id", "BIGINT", True), Column("name", "VARCHAR(32)", False)], ["id"],
                    [Column("id", "int(11)", False), Column("name", "varchar(32)", False)], ["id"])
    assert [(c.kind, c.statement) for c in found] == [("widen", "ALTER TABLE `t` MODIFY COLUMN `id` BIGINT NOT NULL")]


def test_a_table_made_before_the_source_types_were_propagated_is_not_narrowed() -> None:
    """column.propagate.source.type turned on for tables made from the schema without it: the exact
    types (VARCHAR(255), TIME(3)) are narrower than the table's (LONGTEXT, TIME(6)), which were made from
    the same fields (``generic``) and hold their values: no change. A real narrowing still is one."""
    existing = [Column("id", "int(11)", False), Column("c_varchar", "longtext", True), Column("c_time3", "time(6)", True),
                Column("c_bigint", "bigint(20)", True)]
    desired = [Column("id", "INT", False), Column("c_varchar", "VARCHAR(255)", True), Column("c_time3", "TIME(3)", True),
               Column("c_bigint", "INT", True)]
    generic = {"c_varchar": "LONGTEXT", "c_time3": "TIME(6)", "c_bigint": "INT"}
    found = changes("t", desired, ["id"], existing, ["id"], generic=generic)
    assert [(c.column, c.kind) for c in found] == [("c_bigint", "narrow")]  # bigint(20) is not INT's table
    assert [(c.column, c.kind) for c in changes("t", desired, ["id"], existing, ["id"])] == [
        ("c_varchar", "narrow"), ("c_time3", "narrow"), ("c_bigint", "narrow")]

"""connectors/faults.py: where the active entries come from (CDCFLOW_FAULTS, and the file CDCFLOW_FAULTS_FILE
names, as the Celery fault campaign uses it), and that a checkpoint acts only on its own point."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors import faults


@pytest.fixture(autouse=True)
def _no_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCFLOW_FAULTS", raising=False)
    monkeypatch.delenv("CDCFLOW_FAULTS_FILE", raising=False)


def test_nothing_is_active_without_the_variables() -> None:
    assert faults.active() == ()


def test_the_variable_lists_entries_separated_by_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCFLOW_FAULTS", "after_read,,pause:during_read:/tmp/p")
    assert faults.active() == ("after_read", "pause:during_read:/tmp/p")


def test_the_file_holds_one_entry_a_line_without_blank_or_comment_lines(tmp_path: Path) -> None:
    path = tmp_path / "faults"
    path.write_text("# armed by the campaign\n\n  after_sinks  \npause:after_read:/tmp/a dir#1\n")
    assert faults.read_file(path) == ("after_sinks", "pause:after_read:/tmp/a dir#1")


def test_a_missing_or_empty_file_holds_none(tmp_path: Path) -> None:
    assert faults.read_file(tmp_path / "absent") == ()
    (tmp_path / "empty").write_text("")
    assert faults.read_file(tmp_path / "empty") == ()


def test_active_reads_the_variable_then_the_file_at_each_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "faults"
    monkeypatch.setenv("CDCFLOW_FAULTS", "before_read")
    monkeypatch.setenv("CDCFLOW_FAULTS_FILE", str(path))
    assert faults.active() == ("before_read",)  # the file does not exist yet
    faults.write_file(path, ["during_commit"])
    assert faults.active() == ("before_read", "during_commit")
    faults.write_file(path)  # disarmed: the next read sees no entry
    assert faults.active() == ("before_read",)


def test_write_file_replaces_the_entries_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "faults"
    faults.write_file(path, ["after_read", "pause:after_commit:/tmp/x"])
    faults.write_file(path, ["after_commit"])
    assert path.read_text() == "after_commit\n"
    assert [p.name for p in tmp_path.iterdir()] == ["faults"]


def test_a_checkpoint_acts_only_on_its_own_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: killed.append(sig))
    path = tmp_path / "faults"
    monkeypatch.setenv("CDCFLOW_FAULTS_FILE", str(path))
    faults.write_file(path, ["after_sinks"])
    faults.checkpoint("after_read")
    assert killed == []
    faults.checkpoint("after_sinks")
    assert killed == [faults.signal.SIGKILL]


def test_a_pause_entry_pauses_only_the_first_process_to_reach_it(tmp_path: Path) -> None:
    (tmp_path / "resume").touch()  # let it go on at once
    faults.checkpoint("after_read", [faults.pause_entry("after_read", tmp_path)])
    assert (tmp_path / "reached").exists()
    (tmp_path / "resume").unlink()
    faults.checkpoint("after_read", [faults.pause_entry("after_read", tmp_path)])  # reached: no second pause

"""The layers point one way, and no module imports itself back through others.

    dags/, plugins/   -> cdcflow (the platform) -> spark_jobs (the job) -> connectors (the systems)

The connectors import nothing of the platform or the job: the exception tree, the config models of
the sinks and the small shared types sit on their ground floor (connectors/errors.py,
connectors/models.py, connectors/*/config.py). Every import counts, including those inside functions
and under TYPE_CHECKING, because a lazy import is still a dependency.

And no module grows past what a reader takes in whole (issue 43: about 400 lines; a module that grows
is split by responsibility): none of the code's modules, the bench's included, exceeds MAX_LINES.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dags", "plugins", "cdcflow", "spark_jobs", "connectors")
SIZED = (*PACKAGES, "bench")  # the folders whose modules MAX_LINES bounds
MAX_LINES = 450  # issue 43's structure check; a module is split by responsibility at about 400 lines
# what each layer may import (besides third-party code)
ALLOWED = {
    "dags": set(PACKAGES),
    "plugins": set(PACKAGES),
    "cdcflow": {"cdcflow", "spark_jobs", "connectors"},
    "spark_jobs": {"spark_jobs", "connectors"},
    "connectors": {"connectors"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {t for t in _imports(path) if t in modules and t != name} for name, path in modules.items()}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = sorted(f"{name} imports {target}"
                   for name, targets in _graph().items() for target in targets
                   if target.split(".")[0] not in ALLOWED[name.split(".")[0]])
    assert wrong == []


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_checks_see_a_wrong_import_and_a_cycle() -> None:
    """The two checks above can fail: the graph has the edges they judge, and a cycle is found."""
    graph = _graph()
    assert "connectors.errors" in graph["cdcflow.errors"]
    assert "cdcflow.runner" in graph["cdcflow.airflow.tasks"] or any(
        t.startswith("cdcflow.") for t in graph["cdcflow.airflow.tasks"])
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _too_long(root: Path, folders: tuple[str, ...], limit: int) -> list[str]:
    """The modules under ``folders`` of more than ``limit`` lines, with their counts."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > limit:
                found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_module_exceeds_the_size_bound() -> None:
    assert _too_long(ROOT, SIZED, MAX_LINES) == []


def test_the_size_check_counts_lines_and_sees_every_folder(tmp_path: Path) -> None:
    """The check above can fail: it counts a module's lines, finds one nested in a subfolder, and
    looks into every folder it bounds."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "long.py").write_text("x = 1\n" * 451)
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * 450)
    (tmp_path / "pkg" / "notes.txt").write_text("x\n" * 1000)
    assert _too_long(tmp_path, ("pkg",), 450) == [str(Path("pkg/sub/long.py")) + ": 451 lines"]
    assert _too_long(tmp_path, ("pkg",), 451) == []
    counted = {folder: sum(1 for _ in (ROOT / folder).rglob("*.py")) for folder in SIZED}
    assert all(n > 0 for n in counted.values()), counted
    assert _too_long(ROOT, SIZED, 300) != []  # the real tree has modules of more than 300 lines


def test_the_errors_keep_their_public_name_across_processes() -> None:
    """Defined on the ground floor, the classes still print and pickle as cdcflow.errors.<Class>: the
    driver recovers a task's error from the traceback text Spark wraps it in."""
    import pickle  # noqa: PLC0415
    import traceback  # noqa: PLC0415

    from connectors.errors import ToleranceExceeded  # noqa: PLC0415
    from spark_jobs.window import unwrap_spark_error  # noqa: PLC0415

    try:
        raise ToleranceExceeded("sink 'orders' rejected t[0]@7")
    except ToleranceExceeded:
        text = "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n" + traceback.format_exc()
    recovered = unwrap_spark_error(RuntimeError(text))
    assert type(recovered) is ToleranceExceeded
    assert str(recovered) == "sink 'orders' rejected t[0]@7"
    assert type(pickle.loads(pickle.dumps(ToleranceExceeded("x")))) is ToleranceExceeded

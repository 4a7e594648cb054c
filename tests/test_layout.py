"""The package's folders show its architecture: few modules at the top, the layers held
by import-linter's contract (pyproject.toml), and each rule shown rejecting a breach."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import PACKAGE, ROOT

LAYERS = ("core", "measure", "teaching", "tooling", "cli")
LIBRARY = ("core", "measure", "teaching")  # what a learner imports: no test runner


def uses_pytest(path: Path) -> list[int]:
    """The lines of ``path`` that import pytest or run it: an import, or ``"pytest"``
    as a string of its own (``[python, "-m", "pytest"]``) or ``"-m pytest"`` in one."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            if any(n.split(".")[0] in ("pytest", "_pytest") for n in names):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (
                node.value.strip() in ("pytest", "py.test") or "-m pytest" in node.value
            )
        ):
            lines.append(node.lineno)
    return lines


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    # lint-imports reads [tool.importlinter] from the pyproject.toml in its cwd and
    # imports nothing: it parses the sources found on sys.path (hence PYTHONPATH)
    script = Path(sys.executable).with_name("lint-imports")
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [str(script), "--no-cache"], cwd=root, capture_output=True, text=True, env=env
    )


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    """A copy of the package and its contract, to break on purpose."""

    def copy():
        dest = tmp_path_factory.mktemp("layout")
        shutil.copytree(
            PACKAGE,
            dest / "amp_lessons",
            ignore=shutil.ignore_patterns("__pycache__", "locale"),
        )
        shutil.copy(ROOT / "pyproject.toml", dest)
        return dest

    return copy


def test_at_most_ten_modules_at_the_top():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 10, modules


def test_every_layer_says_what_it_holds_and_may_import():
    for layer in LAYERS:
        doc = (PACKAGE / layer / "__init__.py").read_text()
        assert doc.startswith('"""') and "import" in doc, layer


def test_no_empty_module():
    empty = [
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if not p.read_text().strip()
    ]
    assert not empty


def test_the_library_has_one_name_per_module():
    # no alias at the top: amp_lessons.core.formats is the only way to its module
    import importlib.util

    for old in ("formats", "scaler", "memory", "fp8"):
        assert importlib.util.find_spec(f"amp_lessons.{old}") is None, old
        assert importlib.util.find_spec(f"amp_lessons.core.{old}") is not None, old


def test_the_layer_contract_holds():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("KEPT") == 4, result.stdout


def test_no_library_module_imports_or_runs_pytest(tmp_path):
    # import-linter's contract sees imports only; running the suite is tooling's
    # (tooling/gpu_check/plan.py's tests step runs the gpu tests)
    found = {
        str(p.relative_to(ROOT)): lines
        for layer in LIBRARY
        for p in sorted((PACKAGE / layer).rglob("*.py"))
        if (lines := uses_pytest(p))
    }
    assert not found
    assert uses_pytest(PACKAGE / "tooling" / "gpu_check" / "plan.py")  # it sees a run
    breach = tmp_path / "breach.py"
    breach.write_text(
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'pytest', 'tests'])\n"
        "subprocess.run(f'{sys.executable} -m pytest', shell=True)\n"
    )
    assert uses_pytest(breach) == [2, 3]


@pytest.mark.parametrize(
    "module, line, broken",
    [
        ("core/formats.py", "from amp_lessons.teaching import clinic", "upward"),
        ("measure/bench.py", "from amp_lessons.tooling import lab", "upward"),
        ("core/train.py", "from amp_lessons.measure import bench", "upward"),
        ("tooling/gpu_check/run.py", "from amp_lessons.cli import main", "upward"),
        ("measure/estimate.py", "from amp_lessons.cli import flags", "upward"),
        ("cli/flags.py", "from amp_lessons.cli import train", "circle"),
        ("core/checkpoints.py", "from amp_lessons.core import train", "circle"),
        ("teaching/quiz.py", "import pytest", "pytest"),
        ("measure/gpu_report.py", "from _pytest import junitxml", "pytest"),
    ],
)
def test_the_contract_rejects_a_breach(package_copy, module, line, broken):
    root = package_copy()
    path = root / "amp_lessons" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert broken in "\n".join(l for l in result.stdout.splitlines() if "BROKEN" in l)


# ---- functions a reader can hold in mind ------------------------------------------

MAX_FUNCTION_LINES = 60  # the whole function: signature, docstring and body
# Functions still longer, each with why. A new long function fails the test: split it
# into named steps, or add it here with its reason.
LONG_FUNCTIONS = {
    # `ruff format` (one style, checked in CI) writes one argument a line where a call
    # does not fit: these grew past 60 lines with it and are being split into steps
}


def long_functions() -> dict[str, int]:
    """``{"layer/module.py::function": lines}`` of every function (a method too) in
    amp_lessons/ over MAX_FUNCTION_LINES lines."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{module}::{node.name}"] = lines
    return found


def test_no_function_is_longer_than_a_reader_can_hold():
    found = long_functions()
    new = {name: lines for name, lines in found.items() if name not in LONG_FUNCTIONS}
    assert not new, (
        f"over {MAX_FUNCTION_LINES} lines: {new}; split them into named "
        "steps (or list them in LONG_FUNCTIONS with why)"
    )
    # an entry whose function got short (or went) leaves the list
    assert set(LONG_FUNCTIONS) <= set(found), sorted(set(LONG_FUNCTIONS) - set(found))

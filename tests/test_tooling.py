"""Course tooling (amp_lessons.tooling): the set-up script explains its failures and
needs only the standard library, JupyterLab is launched safely, the grading entry
point answers, and every path computed from __file__ lands in this repository."""

import ast
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP = ROOT / "amp_lessons" / "tooling" / "bootstrap.py"


def load_bootstrap():
    spec = importlib.util.spec_from_file_location(
        "bootstrap", BOOTSTRAP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_setup_refuses_an_old_python_with_a_sentence(monkeypatch, capsys):
    bootstrap = load_bootstrap()
    monkeypatch.setattr(bootstrap, "MIN_PYTHON", (99, 0))
    with pytest.raises(SystemExit):
        bootstrap.require_python()
    message = capsys.readouterr().err
    assert "needs Python 99.0 or newer" in message and "Traceback" not in message


def test_setup_explains_a_missing_torch_wheel(monkeypatch, capsys):
    bootstrap = load_bootstrap()

    def pip_without_wheels(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, stdout=(
            "ERROR: Could not find a version that satisfies the requirement torch\n"
            "ERROR: No matching distribution found for torch>=2.5,<3\n"))

    monkeypatch.setattr(bootstrap.subprocess, "run", pip_without_wheels)
    with pytest.raises(SystemExit):
        bootstrap.pip_install([])
    assert "no ready-made torch wheel" in capsys.readouterr().err


def test_old_python_reaches_the_version_check():
    # bootstrap.py must parse on Python 3.5+: no f-strings, walrus or match
    source = (BOOTSTRAP).read_text()
    assert not re.search(r"""\bf["']""", source) and ":=" not in source


def test_lab_command_is_loopback_with_a_token_and_offline():
    from amp_lessons.tooling.lab import lab_command

    command = lab_command(port=8899, token="abc123", open_browser=False)
    assert "--ServerApp.ip=127.0.0.1" in command
    assert "--IdentityProvider.token=abc123" in command
    assert "--LabApp.news_url=None" in command
    assert any("NeverCheckForUpdate" in part for part in command)
    settings_dir = next(part.split("=", 1)[1] for part in command
                        if part.startswith("--LabApp.app_settings_dir="))
    overrides = json.loads((Path(settings_dir) / "overrides.json").read_text())
    news = overrides["@jupyterlab/apputils-extension:notification"]
    assert news == {"fetchNews": "false", "checkForUpdates": False}
    joined = " ".join(command)
    assert "0.0.0.0" not in joined and "disable_check_xsrf" not in joined
    with pytest.raises(ValueError, match="empty token"):
        lab_command(token="")


def test_lab_refuses_a_folder_that_does_not_exist(capsys, tmp_path):
    from amp_lessons.tooling.lab import main

    assert main([str(tmp_path / "missing")]) == 2
    usage = "usage: python -m amp_lessons.tooling.lab [FOLDER]"
    assert usage in capsys.readouterr().err


def test_bootstrap_imports_the_standard_library_only():
    tree = ast.parse(BOOTSTRAP.read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module}
    assert names and names <= set(sys.stdlib_module_names), names


def test_paths_from_file_land_in_this_repository():
    from amp_lessons.tooling import grading, lab

    bootstrap = load_bootstrap()
    assert Path(bootstrap.ROOT) == ROOT and Path(bootstrap.VENV) == ROOT / ".venv"
    assert grading.ROOT == ROOT and grading.NOTEBOOKS_DIR == ROOT / "notebooks"
    assert lab.NOTEBOOKS == ROOT / "notebooks"
    assert (lab.LAB_SETTINGS / "overrides.json").is_file()


def test_setuptools_packages_every_subpackage_and_the_lab_settings():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set(find_packages(str(ROOT), include=config["packages"]["find"]["include"]))
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "amp_lessons").rglob("__init__.py")}
    assert on_disk <= found and "amp_lessons.tooling.grading" in found
    assert config["package-data"]["amp_lessons.tooling"] == ["lab_settings/*.json"]


@pytest.mark.parametrize("module",
                         ["amp_lessons.grading", "amp_lessons.tooling.grading"])
def test_grading_command_line_answers_from_both_entry_points(module):
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for command in ("student", "submit", "autograde", "grades", "rehearse", "lint",
                    "slides"):
        assert command in result.stdout
    assert "--course" in result.stdout


def test_old_grading_names_reach_the_tooling_package():
    from amp_lessons import grading
    from amp_lessons.tooling import grading as tooling_grading

    assert grading.rehearse is tooling_grading.rehearse
    assert grading.lint_course is tooling_grading.lint_course


def test_student_edition_files_get_the_users_umask(tmp_path):
    # a results file written 0600 (as bench --record did) was copied 0600
    from amp_lessons.tooling.grading.course import export_student_edition

    lesson = tmp_path / "course" / "release" / "06_speed_memory"
    (lesson / "results").mkdir(parents=True)
    for path in (lesson / "06_speed_memory.ipynb", lesson / "results" / "bench.json"):
        path.write_text("{}")
        path.chmod(0o600)
    old = os.umask(0o022)
    try:
        export_student_edition(tmp_path / "course", tmp_path / "student")
    finally:
        os.umask(old)
    for name in ("06_speed_memory.ipynb", "results/bench.json"):
        mode = stat.S_IMODE((tmp_path / "student" / name).stat().st_mode)
        assert mode == 0o644, (name, oct(mode))

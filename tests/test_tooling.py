"""Course tooling (amp_lessons.tooling): the set-up script explains its failures and
needs only the standard library, JupyterLab is launched safely, the grading entry
point answers, and every path computed from __file__ lands in this repository."""

import ast
import glob
import importlib.util
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from paths import NOTEBOOKS_DIR, ROOT, SPANISH_DIR

BOOTSTRAP = ROOT / "amp_lessons" / "tooling" / "bootstrap.py"


def load_bootstrap():
    spec = importlib.util.spec_from_file_location("bootstrap", BOOTSTRAP)
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
        return subprocess.CompletedProcess(
            args,
            1,
            stdout=(
                "ERROR: Could not find a version that satisfies the requirement torch\n"
                "ERROR: No matching distribution found for torch>=2.5,<3\n"
            ),
        )

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
    settings_dir = next(
        part.split("=", 1)[1]
        for part in command
        if part.startswith("--LabApp.app_settings_dir=")
    )
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
    usage = "usage: python -m amp_lessons.tooling.lab [--edition en|es | --instructor"
    assert usage in capsys.readouterr().err
    for wrong in (
        ["--edition", "fr"],
        ["--edition"],
        ["--edition", "es", "x"],
        ["--folder"],
        ["--instructor", "x"],
        ["--instructor", "--edition", "fr"],
    ):
        assert main(wrong) == 2, wrong
        assert usage in capsys.readouterr().err


def test_make_lab_opens_the_learners_copy_and_lab_instructor_the_course(
    monkeypatch, tmp_path
):
    from amp_lessons.tooling import lab, learner_copy

    dry = {
        (target, edition): subprocess.run(
            ["make", "-n", target, *args], cwd=ROOT, capture_output=True, text=True
        ).stdout
        for target in ("lab", "lab-instructor")
        for edition, args in (("en", []), ("es", ["EDITION=es"]))
    }
    assert "-m amp_lessons.tooling.lab --edition en" in dry["lab", "en"]
    assert "-m amp_lessons.tooling.lab --edition es" in dry["lab", "es"]
    assert (
        "-m amp_lessons.tooling.lab --instructor --edition en"
        in dry["lab-instructor", "en"]
    )
    assert "--instructor --edition es" in dry["lab-instructor", "es"]
    assert lab.EDITIONS == {"en": NOTEBOOKS_DIR, "es": SPANISH_DIR}
    launched = []
    monkeypatch.setattr(lab, "run_lab", lambda command: launched.append(command) or 0)
    monkeypatch.setattr(lab, "root_note", lambda: None)
    monkeypatch.setattr(learner_copy, "LEARNER_DIR", tmp_path / "my-course")
    for args, folder, learner in (
        (["--edition", "en"], tmp_path / "my-course" / "en", True),
        (["--edition", "es"], tmp_path / "my-course" / "es", True),
        ([], tmp_path / "my-course" / "en", True),
        (["--instructor"], NOTEBOOKS_DIR, False),
        (["--instructor", "--edition", "es"], SPANISH_DIR, False),
    ):
        assert lab.main(args) == 0
        assert f"--ServerApp.root_dir={folder}" in launched[-1], args
        settings = Path(
            next(
                part.split("=", 1)[1]
                for part in launched[-1]
                if part.startswith("--LabApp.app_settings_dir=")
            )
        )
        page = settings / "page_config.json"
        # the learner's lab hides nbgrader's authoring tools; the instructor's not
        assert page.is_file() is learner, args
        if learner:
            config = json.loads(page.read_text())
            assert config["disabledExtensions"] == ["@jupyter/nbgrader"]
            assert (
                config["appName"]
                == {"en": "AMP course", "es": "Curso AMP"}[folder.name]
            )
            assert (settings / "overrides.json").read_bytes() == (
                lab.LAB_SETTINGS / "overrides.json"
            ).read_bytes()
    # the Spanish folder holds the Spanish lessons, under the English file names
    assert {p.name for p in lab.EDITIONS["es"].glob("*.ipynb")} <= {
        p.name for p in lab.NOTEBOOKS.glob("*.ipynb")
    }
    assert (tmp_path / "my-course" / "es" / "00_amp_in_10_minutes.ipynb").is_file()


def test_the_spanish_lab_serves_its_lessons_and_the_recorded_results():
    """A live JupyterLab on notebooks/es/, launched as `make lab EDITION=es` does:
    the Spanish lessons, and results/ (a link to ../results) browsable there."""
    import urllib.request

    from lab_server import running_lab

    from amp_lessons.tooling.lab import EDITIONS

    def listing(lab, path):
        request = urllib.request.Request(lab.url(path), headers=lab.auth)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["content"]

    with running_lab(root_dir=EDITIONS["es"]) as lab:
        names = {item["name"] for item in listing(lab, "/api/contents")}
        results = listing(lab, "/api/contents/results")
    assert {"00_amp_in_10_minutes.ipynb", "02_underflow.ipynb", "results"} <= names
    assert "README.md" in {item["name"] for item in results}


def test_bootstrap_imports_the_standard_library_only():
    tree = ast.parse(BOOTSTRAP.read_text())
    names = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert names and names <= set(sys.stdlib_module_names), names


def test_paths_from_file_land_in_this_repository():
    from amp_lessons.tooling import grading, lab

    bootstrap = load_bootstrap()
    assert Path(bootstrap.ROOT) == ROOT and Path(bootstrap.VENV) == ROOT / ".venv"
    assert grading.ROOT == ROOT and grading.NOTEBOOKS_DIR == NOTEBOOKS_DIR
    assert lab.NOTEBOOKS == ROOT / "notebooks"
    assert (lab.LAB_SETTINGS / "overrides.json").is_file()


def test_setuptools_packages_every_subpackage_and_the_lab_settings():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set(find_packages(str(ROOT), include=config["packages"]["find"]["include"]))
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "amp_lessons").rglob("__init__.py")
    }
    assert on_disk <= found and "amp_lessons.tooling.grading" in found
    packaged = config["package-data"]["amp_lessons.tooling"]
    on_disk = {
        p.relative_to(ROOT / "amp_lessons" / "tooling").as_posix()
        for p in (ROOT / "amp_lessons" / "tooling" / "lab_settings").iterdir()
    }
    assert packaged == ["lab_settings/*.json", "lab_settings/terminal.bashrc"]
    assert all(name.endswith(".json") or name in packaged for name in on_disk), (
        on_disk
    )  # every file of the lab's settings is installed with the package


@pytest.mark.parametrize(
    "module", ["amp_lessons.grading", "amp_lessons.tooling.grading"]
)
def test_grading_command_line_answers_from_both_entry_points(module):
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    for command in (
        "student",
        "submit",
        "autograde",
        "grades",
        "rehearse",
        "lint",
        "slides",
    ):
        assert command in result.stdout
    assert "--course" in result.stdout


def test_old_grading_names_reach_the_tooling_package():
    from amp_lessons import grading
    from amp_lessons.tooling import grading as tooling_grading

    assert grading.rehearse is tooling_grading.rehearse
    assert grading.lint_course is tooling_grading.lint_course


def test_spanish_student_edition_stubs_in_spanish_and_still_raises(tmp_path):
    """nbgrader's stub speaks the lessons' language (`make student EDITION=es`); its
    `raise NotImplementedError()`, which the checks and graders go by, stays."""
    from amp_lessons.tooling import grading
    from amp_lessons.tooling.grading.course import CODE_STUBS, lessons_language

    entry = "00_amp_in_10_minutes.ipynb"
    spanish, english = ROOT / "notebooks" / "es" / entry, ROOT / "notebooks" / entry
    assert lessons_language(sorted(spanish.parent.glob("*.ipynb"))) == "es"
    assert lessons_language([english]) == lessons_language([english, spanish]) == "en"
    assert all(
        stub.endswith("\nraise NotImplementedError()") for stub in CODE_STUBS.values()
    )
    for path, comment in (
        (spanish, "# ESCRIBA SU CÓDIGO AQUÍ"),
        (english, "# YOUR CODE HERE"),
    ):
        course = grading.build_course([path], tmp_path / path.parent.name)
        [released] = grading.generate_student_edition(course)
        # results/ goes with each lesson; the Spanish edition (es/, solutions and all)
        # and its catalogues (es/po/) never do
        assert sorted(p.name for p in released.parent.iterdir() if p.is_dir()) == [
            "results"
        ]
        sources = [
            c.source
            for c in nbformat.read(released, as_version=4).cells
            if grading.is_solution_cell(c)
        ]
        assert sources and all(
            f"    {comment}\n    raise NotImplementedError()" in s for s in sources
        ), sources
        (other,) = {"# YOUR CODE HERE", "# ESCRIBA SU CÓDIGO AQUÍ"} - {comment}
        assert not any(other in s for s in sources)


def test_spanish_slides_show_the_spanish_stub():
    from amp_lessons.tooling.grading.deck_layout import present_exercises

    for language, comment in (
        ("es", "# ESCRIBA SU CÓDIGO AQUÍ"),
        (None, "# YOUR CODE HERE"),
    ):
        nb = nbformat.v4.new_notebook()
        if language:
            nb.metadata["language"] = language
        solution = nbformat.v4.new_code_cell(
            "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"
        )
        solution.metadata["nbgrader"] = {
            "solution": True,
            "grade": False,
            "grade_id": "f",
            "schema_version": 3,
        }
        nb.cells = [solution]
        shown = present_exercises(nb).cells[0].source
        assert shown == f"def f():\n    {comment}\n    raise NotImplementedError()"


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


# --- the set-up, run for real on a copy of the course ------------------------------
# Each test copies bootstrap.py, requirements.txt and pyproject.toml into a scratch
# folder (bootstrap finds the course from its own path) and runs it as `make lab`
# does. pip is pointed at a local, empty package index unless a test says otherwise,
# so nothing is ever downloaded.

FAKE_PYTHON = """#!{python}
# A stand-in for .venv/bin/python: reports FAKE_VERSION, has pip unless FAKE_NO_PIP,
# answers bootstrap's package check with FAKE_PROBLEMS, and logs every call.
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args[:4]) + "\\n")
if args[:1] == ["-c"]:
    print(os.environ.get("FAKE_VERSION", "3.12"))
elif args[:3] == ["-m", "pip", "--version"]:
    sys.exit(3 if os.environ.get("FAKE_NO_PIP") else 0)
elif args[:1] == ["-I"]:
    print(os.environ.get("FAKE_PROBLEMS", "[]"))
"""


def course_copy(tmp_path):
    root = tmp_path / "course"
    (root / "amp_lessons" / "tooling").mkdir(parents=True)
    (root / "amp_lessons" / "tooling" / "bootstrap.py").write_text(
        BOOTSTRAP.read_text()
    )
    for name in ("requirements.txt", "pyproject.toml"):
        (root / name).write_text((ROOT / name).read_text())
    (tmp_path / "index").mkdir()  # an empty package index: no wheel for anything
    return root


def run_bootstrap(root, *args, python=sys.executable, **env):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    environment.update(
        PIP_INDEX_URL=(root.parent / "index").as_uri(),
        PIP_CONFIG_FILE=os.devnull,
        PIP_RETRIES="0",
        PIP_TIMEOUT="3",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_CACHE_DIR="1",
        FAKE_LOG=str(root.parent / "calls.log"),
        AMP_LESSONS_GPU="1",
    )  # the CPU-torch step has its own tests
    environment.update(env)
    return subprocess.run(
        [python, str(root / "amp_lessons/tooling/bootstrap.py"), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def fake_venv(root):
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    return python


def stamp(root, extras=""):
    bootstrap = load_bootstrap()
    bootstrap.ROOT = str(root)
    (root / ".venv" / ".amp_lessons_installed").write_text(
        bootstrap.fingerprint() + "\n" + extras
    )


def calls(root):
    log = root.parent / "calls.log"
    return (
        [json.loads(line) for line in log.read_text().splitlines()]
        if log.exists()
        else []
    )


def stopped(result):
    """The one message the set-up stopped with (and that it did stop)."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    message = result.stderr.split("set-up stopped: ", 1)[1]
    return " ".join(message.split())


def test_a_venv_of_python_3_9_is_refused_before_any_download(tmp_path):
    # it downloaded 900 MB, then said "pip failed"
    root = course_copy(tmp_path)
    fake_venv(root)
    message = stopped(run_bootstrap(root, FAKE_VERSION="3.9"))
    assert message.startswith(
        "`.venv` was made with Python 3.9, and this course "
        "needs Python 3.10 or newer. Remove it (`rm -rf .venv`)"
    )
    assert not any(call[:3] == ["-m", "pip", "install"] for call in calls(root))


def real_python(version):
    """A real interpreter of `version` ("2.7", "3.9") on this machine, or None."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(
        glob.glob(
            os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python{version}")
        )
    )
    for path in filter(None, candidates):
        try:
            done = subprocess.run(
                [path, "-c", "import sys; print(sys.version[:3])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == version:
            return path
    return None


def test_a_real_python_3_9_venv_is_refused(tmp_path):
    python39 = real_python("3.9")
    if python39 is None:
        pytest.skip("no Python 3.9 on this machine (the fake one above stands in)")
    root = course_copy(tmp_path)
    subprocess.run(
        [python39, "-m", "venv", "--without-pip", str(root / ".venv")],
        check=True,
        timeout=120,
    )
    assert "was made with Python 3.9" in stopped(run_bootstrap(root))


def test_python_2_gets_one_sentence_not_a_traceback(tmp_path):
    # `import venv` at the top gave Python 2 an ImportError traceback
    python2 = real_python("2.7")
    if python2 is None:
        pytest.skip("no Python 2.7 on this machine")
    root = course_copy(tmp_path)
    message = stopped(run_bootstrap(root, python=python2))
    assert message.startswith("this course needs Python 3.10 or newer, and ")
    assert "is Python 2.7" in message


@pytest.mark.parametrize(
    "case", ["a file", "no python", "python does not run", "no pip"]
)
def test_a_broken_venv_gets_one_clear_sentence(case, tmp_path):
    root = course_copy(tmp_path)
    venv_dir = root / ".venv"
    env = {}
    if case == "a file":
        venv_dir.write_text("oops")
    elif case == "no python":
        (venv_dir / "bin").mkdir(parents=True)
    elif case == "python does not run":
        (venv_dir / "bin").mkdir(parents=True)
        (venv_dir / "bin" / "python").symlink_to(tmp_path / "python3.7-was-removed")
    else:
        fake_venv(root)
        env["FAKE_NO_PIP"] = "1"
    message = stopped(run_bootstrap(root, **env))
    assert message.startswith(
        {
            "a file": "`.venv` is a file, not a virtual environment.",
            "no python": (
                "`.venv` has no .venv/bin/python: it is not a virtual environment"
            ),
            "python does not run": "`.venv` is broken: its python does not run",
            "no pip": "`.venv` has no pip",
        }[case]
    ), message
    assert "pip failed" not in message


def test_a_stale_stamp_with_missing_packages_is_not_trusted(tmp_path):
    # a stamp passed set-up although jupyter was gone: `make lab` then failed with
    # "No module named jupyter"
    root = course_copy(tmp_path)
    fake_venv(root)
    stamp(root)
    lost = json.dumps(["the module jupyter cannot be imported"])
    done = run_bootstrap(root, FAKE_PROBLEMS=lost)
    assert (
        "the set-up stamp says .venv is ready, but the module jupyter cannot be "
        "imported: installing again" in done.stdout
    )
    assert any(call[:3] == ["-m", "pip", "install"] for call in calls(root))


def test_a_good_stamp_and_good_packages_skip_pip(tmp_path):
    root = course_copy(tmp_path)
    fake_venv(root)
    stamp(root)
    done = run_bootstrap(root)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    assert [call[0] for call in calls(root)] == ["-c", "-m", "-I"]  # version, pip,
    # the package check: and no install


def test_a_filled_venv_without_a_stamp_is_checked_and_stamped_without_pip(tmp_path):
    # a .venv another tool filled (CI installs with uv first): pip would find nothing
    # to do, so the set-up checks it, stamps it and stops there
    root = course_copy(tmp_path)
    fake_venv(root)
    done = run_bootstrap(root, "dev")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == (
        "set-up done: .venv already had everything (checked); nothing installed.\n"
    )
    assert [call[0] for call in calls(root)] == ["-c", "-m", "-I"]  # no install
    assert (root / ".venv" / ".amp_lessons_installed").read_text().endswith("\ndev")
    again = run_bootstrap(root, "dev")  # now the stamped path: the check, silent
    assert again.returncode == 0 and again.stdout == ""


def test_a_venv_without_a_stamp_that_lacks_a_package_is_installed(tmp_path):
    root = course_copy(tmp_path)
    fake_venv(root)
    done = run_bootstrap(root, FAKE_PROBLEMS=json.dumps(["torch is not installed"]))
    assert any(call[:3] == ["-m", "pip", "install"] for call in calls(root))
    assert "nothing installed" not in done.stdout
    assert not (root / ".venv" / ".amp_lessons_installed").exists()


def test_the_package_check_names_a_version_out_of_range_and_a_lost_module(tmp_path):
    bootstrap = load_bootstrap()
    lines = ["torch>=99", "pytest>=8", "no-such-package-amp>=1"]
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            bootstrap.VERIFY,
            str(tmp_path),
            json.dumps(lines),
            json.dumps(["jupyter", "no_such_module_amp"]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    problems = json.loads(done.stdout)
    assert (
        f"torch {torch_version()} is installed, the course needs torch>=99" in problems
    )
    assert "no-such-package-amp is not installed" in problems
    assert "the module no_such_module_amp cannot be imported" in problems
    assert not any(p.startswith(("pytest", "the module jupyter")) for p in problems)
    assert any(p.startswith("amp_lessons is installed from ") for p in problems)


def torch_version():
    return subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import importlib.metadata as m; print(m.version('torch'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture(scope="module")
def venv_with_pip(tmp_path_factory):
    """A real, empty virtual environment with pip (made once: a few seconds)."""
    folder = tmp_path_factory.mktemp("venv") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    return folder


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


@pytest.mark.parametrize("case", ["offline", "no wheel"])
def test_offline_is_told_apart_from_a_missing_wheel(case, tmp_path, venv_with_pip):
    # offline, it said a wheel was missing
    root = course_copy(tmp_path)
    (root / ".venv").symlink_to(venv_with_pip)
    env = {}
    if case == "offline":  # nothing listens there: what pip sees without a network
        env["PIP_INDEX_URL"] = f"http://127.0.0.1:{closed_port()}/simple"
    message = stopped(run_bootstrap(root, **env))
    if case == "offline":
        assert message.startswith(
            "pip could not reach the package index (http://127.0.0.1:"
        ), message
        assert "offline" in message and "wheel" not in message
    else:  # a local index without the wheels: pip names the first one it lacks
        assert message.startswith(
            "pip found no ready-made wheel for setuptools>=64 on Python "
        ), message
        assert "offline" not in message


def test_a_real_venv_with_a_stale_stamp_is_checked_and_reinstalled(
    tmp_path, venv_with_pip
):
    root = course_copy(tmp_path)
    (root / ".venv").symlink_to(venv_with_pip)
    stamp(root)
    try:
        done = run_bootstrap(root)
    finally:
        (venv_with_pip / ".amp_lessons_installed").unlink()
    assert (
        "the set-up stamp says .venv is ready, but torch is not installed"
        in done.stdout
    )
    assert "-r requirements.txt -e ." in done.stdout.split("installing: ")[1]
    assert stopped(done).startswith("pip found no ready-made wheel for ")


# --- torch's CPU build on a machine without an NVIDIA GPU ---------------------------


def test_gpu_detection_reads_proc_dev_and_a_working_nvidia_smi(tmp_path):
    bootstrap = load_bootstrap()
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").write_text("")  # not a GPU device by itself

    def nothing_on_path(name, path=None):
        return None

    assert not bootstrap.has_nvidia_gpu({}, str(tmp_path), nothing_on_path)
    assert bootstrap.has_nvidia_gpu({"AMP_LESSONS_GPU": "1"}, str(tmp_path))
    (tmp_path / "dev" / "nvidia0").write_text("")
    assert bootstrap.has_nvidia_gpu({}, str(tmp_path), nothing_on_path)
    assert not bootstrap.has_nvidia_gpu({"AMP_LESSONS_GPU": "0"}, str(tmp_path))
    (tmp_path / "dev" / "nvidia0").unlink()
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text("NVRM 570")
    assert bootstrap.has_nvidia_gpu({}, str(tmp_path), nothing_on_path)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").unlink()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    for status, found in ((0, True), (9, False)):  # 9: on PATH, but no driver
        smi.write_text(f"#!/bin/sh\nexit {status}\n")
        smi.chmod(0o755)
        assert bootstrap.has_nvidia_gpu({"PATH": str(bin_dir)}, str(tmp_path)) is found


def fake_torch_index(folder, version):
    """A PEP 503 index with one tiny `torch` wheel (a one-line module)."""
    name = f"torch-{version}-py3-none-any.whl"
    (folder / "torch").mkdir(parents=True)
    with zipfile.ZipFile(folder / "torch" / name, "w") as wheel:
        info = f"torch-{version}.dist-info/"
        wheel.writestr("torch/__init__.py", f"__version__ = {version!r}\n")
        wheel.writestr(
            info + "METADATA",
            f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        )
        wheel.writestr(
            info + "WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\n"
            "Root-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(info + "RECORD", "")
    (folder / "torch" / "index.html").write_text(
        '<a href="{0}">{0}</a>'.format(name.replace("+", "%2B"))
    )
    return folder / "torch" / name


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A local index served over http (pip prints download sizes for http only), and
    pip told to read no configuration: this machine's points it at a real torch."""
    for name in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    folder = tmp_path / "simple"
    folder.mkdir()
    port = closed_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "-d",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield folder, f"http://127.0.0.1:{port}/"
    finally:
        server.terminate()
        server.wait()


def test_no_gpu_installs_the_cpu_build_with_one_line_and_keeps_it(
    tmp_path, served, monkeypatch, capsys
):
    folder, url = served
    wheel = fake_torch_index(folder, "2.13.0+cpu")
    venv = tmp_path / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bootstrap = load_bootstrap()
    monkeypatch.setattr(bootstrap, "VENV", str(venv))
    monkeypatch.setattr(bootstrap.sys, "platform", "linux")
    monkeypatch.setenv("AMP_LESSONS_TORCH_INDEX", url)
    bootstrap.install_cpu_torch(gpu=False)
    lines = capsys.readouterr().out.splitlines()
    size = f"{wheel.stat().st_size} bytes"  # pip's own measure, under 1 kB
    assert lines == [
        "no NVIDIA GPU found: installed torch 2.13.0+cpu, the CPU build "
        f"({size} download), from {url} instead of the CUDA build."
    ], lines
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert version == "2.13.0+cpu"
    # the requirements install keeps it, even with a plain 2.13.0 on the index
    (folder / "torch").rename(folder / "cpu")
    fake_torch_index(folder, "2.13.0")
    kept = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--index-url",
            url,
            bootstrap.torch_spec(),
        ],
        capture_output=True,
        text=True,
    )
    assert "Requirement already satisfied: torch" in kept.stdout, kept.stdout
    # torch in range already (as CI pre-installs it): no second try, not a word
    monkeypatch.setenv("AMP_LESSONS_TORCH_INDEX", "http://127.0.0.1:1/")
    calls = []
    real_run = bootstrap.run
    monkeypatch.setattr(
        bootstrap, "run", lambda command: calls.append(command) or real_run(command)
    )
    bootstrap.install_cpu_torch(gpu=False)
    assert capsys.readouterr().out == ""
    assert not any("install" in command for command in calls), calls


def test_no_gpu_and_no_cpu_index_says_so_and_falls_back(
    venv_with_pip, monkeypatch, capsys
):
    for name in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    bootstrap = load_bootstrap()
    monkeypatch.setattr(bootstrap, "VENV", str(venv_with_pip))
    monkeypatch.setattr(bootstrap.sys, "platform", "linux")
    url = f"http://127.0.0.1:{closed_port()}/"
    monkeypatch.setenv("AMP_LESSONS_TORCH_INDEX", url)
    started = time.monotonic()
    bootstrap.install_cpu_torch(gpu=False)  # returns: pip_install comes next
    assert time.monotonic() - started < 60
    assert capsys.readouterr().out.splitlines() == [
        f"no NVIDIA GPU found, but PyTorch's CPU wheel index ({url}) could not be "
        "reached: installing the default torch build (with CUDA libraries) "
        "instead."
    ]


@pytest.mark.parametrize("machine", ["linux with a GPU", "darwin"])
def test_a_gpu_or_macos_leaves_torch_to_the_normal_install(
    machine, monkeypatch, capsys
):
    bootstrap = load_bootstrap()
    calls = []
    monkeypatch.setattr(bootstrap, "run", lambda command: calls.append(command))
    monkeypatch.setattr(bootstrap.sys, "platform", machine.split()[0])
    monkeypatch.setenv("AMP_LESSONS_GPU", "1" if "GPU" in machine else "0")
    bootstrap.install_cpu_torch()
    assert calls == [] and capsys.readouterr().out == ""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_lab_terminals_run_the_courses_python(tmp_path):
    """The lessons say `python -m amp_lessons ...` "in a terminal": the lab's
    terminals find the course's Python first, even where the learner's own ~/.bashrc
    puts another one first (a walk found pyenv's, without torch)."""
    from amp_lessons.tooling import lab

    setting = next(p for p in lab.lab_command() if "terminado_settings" in p)
    assert str(lab.TERMINAL_RC) in setting and "'-i'" in setting
    (tmp_path / ".bashrc").write_text('export PATH="/opt/pyenv/shims:$PATH"\n')
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    folder = lab.course_python_first(env)
    assert env["PATH"].startswith(folder + os.pathsep)  # the kernels' !python too
    shell = subprocess.run(
        ["bash", "--rcfile", str(lab.TERMINAL_RC), "-i"],
        input="command -v python\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.stdout.split() == [str(Path(folder) / "python")], shell

"""Start JupyterLab on the course, safely: loopback only, with a token, offline; and
stop it cleanly on Ctrl-C.

`make lab` runs ``python -m amp_lessons.tooling.lab --edition en``: the learner's own
copy of the English lessons, the student edition in ``my-course/en/`` (made the first
time, kept in step with the course without writing over their work:
`learner_copy`), in a JupyterLab without nbgrader's authoring tools; ``make lab
EDITION=es`` the same with ``--edition es`` (``my-course/es/``, from notebooks/es/).
``make lab-instructor`` (``--instructor``) opens the course's own solved lessons in
notebooks/. The browser test starts the server with the same `lab_command`, so what
is tested is what students run. Ctrl-C
(or a closed terminal, or SIGTERM) asks JupyterLab to shut down the way
``jupyter server stop`` does, with SIGTERM: it closes its kernels and removes its
runtime files itself, and the launcher waits for it, with no traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from amp_lessons.teaching import self_study
from amp_lessons.tooling import learner_copy

# The course's lessons of each edition (solved: the instructor's), in the
# repository's notebooks/ and notebooks/es/ (the same file names, generated from
# notebooks/es/po); `make lab` opens the learner's own copy of one of them
NOTEBOOKS = learner_copy.NOTEBOOKS
EDITIONS = learner_copy.EDITIONS
# Settings overrides for the lab: news and update checks off (no pop-up asking, no
# request to a website). A folder of our own, so nothing is written into the venv.
LAB_SETTINGS = Path(__file__).resolve().parent / "lab_settings"
# The lessons say "python -m amp_lessons ... in a terminal": JupyterLab's terminals
# start bash with this file, which puts the course's Python (AMP_LESSONS_BIN, set by
# `course_python_first`) first on PATH after the user's own ~/.bashrc.
TERMINAL_RC = LAB_SETTINGS / "terminal.bashrc"


def lab_command(
    port: int | None = None,
    token: str | None = None,
    open_browser: bool = True,
    root_dir: str | Path | None = None,
    settings_dir: str | Path | None = None,
    learner: bool = False,
) -> list[str]:
    """The `jupyter lab` command line the course uses.

    Example: ``lab_command(8899, "abc", open_browser=False)`` binds 127.0.0.1:8899 and
    requires ``?token=abc``. With ``token=None`` Jupyter makes a fresh random token
    itself and prints the URL with it (kept off the command line, where `ps` shows it
    to every user); an empty token is refused, since it would let any local process
    or web page drive the kernel. ``root_dir`` (default: the course's ``notebooks/``)
    lets the browser test serve a scratch folder with the same settings;
    ``settings_dir`` (default: `LAB_SETTINGS`) is the learner's (`learner_settings`);
    ``learner``: nbgrader's server extensions off (`NBGRADER_SERVER_EXTENSIONS`),
    and the open tabs kept in ``root_dir`` (`WORKSPACES`), one set per edition.
    """
    if token is not None and not token:
        raise ValueError(
            "an empty token disables authentication; pass None for a random one"
        )
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--ServerApp.ip=127.0.0.1",  # loopback only: unreachable from the network
        f"--ServerApp.root_dir={NOTEBOOKS if root_dir is None else root_dir}",
        "--LabApp.news_url=None",  # no network needed: no news feed ...
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",  # ... no
        # ... and no pop-up about them
        f"--LabApp.app_settings_dir={settings_dir or LAB_SETTINGS}",
    ]
    if token is not None:
        command.append(f"--IdentityProvider.token={token}")
    if port is not None:
        command.append(f"--ServerApp.port={port}")
    if not open_browser:
        command.append("--no-browser")
    if root_note():
        command.append("--allow-root")  # see ROOT_NOTE: root only, and said so
    if shutil.which("bash"):  # else the terminal is the system's default shell
        shell = ["bash", "--rcfile", str(TERMINAL_RC), "-i"]
        command.append(f"--ServerApp.terminado_settings=shell_command={shell!r}")
    if learner:
        for extension in NBGRADER_SERVER_EXTENSIONS:
            command += ["--ServerApp.jpserver_extensions", f"{extension}=False"]
        if root_dir is not None:  # each edition reopens its own tabs, not the other's
            command.append(f"--LabApp.workspaces_dir={Path(root_dir) / WORKSPACES}")
    return command


WORKSPACES = ".lab-workspaces"  # in the learner's copy of an edition: its open tabs


# nbgrader's server side, for instructors: in a learner's lab it only logs an error
# ("The course directory root is not a subdirectory of the notebook server root")
NBGRADER_SERVER_EXTENSIONS = tuple(
    f"nbgrader.server_extensions.{name}"
    for name in ("formgrader", "validate_assignment", "assignment_list", "course_list")
)


ROOT_NOTE = (
    "note: running as root (common in containers and CI), so JupyterLab is started "
    "with --allow-root: without it Jupyter refuses to run as root. It still listens "
    "on 127.0.0.1 only and asks for its token; as an ordinary user this flag is not "
    "added."
)


def course_python_first(environ: dict | None = None) -> str:
    """Put this Python's folder (the course's .venv/bin) first on PATH, for the
    kernels' ``!python ...`` and, through `TERMINAL_RC`, the lab's terminals, as an
    activated venv would. Returns that folder."""
    environ = os.environ if environ is None else environ
    folder = str(Path(sys.executable).parent)
    environ["AMP_LESSONS_BIN"] = folder
    environ["PATH"] = folder + os.pathsep + environ.get("PATH", "")
    return folder


def root_note() -> str | None:
    """ROOT_NOTE when this process runs as root (then `lab_command` adds
    --allow-root), else None.

    Example: ``root_note()`` -> ``None`` for an ordinary user.
    """
    return ROOT_NOTE if hasattr(os, "geteuid") and os.geteuid() == 0 else None


SHUTDOWN_TIMEOUT_S = 60  # JupyterLab closing its kernels; then it is killed


def run_lab(command: Sequence[str]) -> int:
    """Run JupyterLab until it exits, or until Ctrl-C, SIGTERM or a closed terminal:
    then send it SIGTERM (its own clean shutdown) and wait for it. Returns its exit
    status, or 0 when the user stopped it and it shut down cleanly.

    JupyterLab runs in a session of its own, so a Ctrl-C in the terminal reaches only
    this launcher, which asks once: JupyterLab's own SIGINT handler would instead
    ask "Shut down this Jupyter server (y/[n])?" and, in the old launcher, race a
    SIGKILL after 0.25 s.
    """
    process = subprocess.Popen(list(command), start_new_session=True)
    asked: list[float] = []

    def stop(signum, frame) -> None:
        if not asked:
            print(
                "\nstopping JupyterLab: it closes its kernels and removes its "
                "runtime files ...",
                file=sys.stderr,
                flush=True,
            )
            process.send_signal(signal.SIGTERM)
            asked.append(time.monotonic())

    signals = [signal.SIGINT, signal.SIGTERM] + (
        [signal.SIGHUP] if hasattr(signal, "SIGHUP") else []
    )
    previous = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        while True:
            try:
                code = process.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if asked and time.monotonic() - asked[0] > SHUTDOWN_TIMEOUT_S:
                    print(
                        f"JupyterLab did not shut down within {SHUTDOWN_TIMEOUT_S}"
                        " s; killing it",
                        file=sys.stderr,
                        flush=True,
                    )
                    process.kill()
    finally:
        # Once the user has asked, the launcher is on its way out: a second,
        # impatient Ctrl-C is ignored to the end. Put back, Python's own handler
        # would raise it, and during the interpreter's exit (which restores the
        # default action) it would kill the process with status 130.
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if asked else handler)
    if asked:
        print("JupyterLab stopped.", file=sys.stderr, flush=True)
        return 0 if code in (0, -signal.SIGTERM) else code
    return code


USAGE = (
    "usage: python -m amp_lessons.tooling.lab [--edition en|es | --instructor "
    "[--edition en|es] | FOLDER]  (--edition: your own copy of the English or "
    "Spanish lessons, made in my-course/ the first time; --instructor: the course's "
    "own lessons, solved; FOLDER: a directory of notebooks; default: --edition en)"
)
# What the learner's JupyterLab leaves out: nbgrader's authoring tools (its menus
# and cell toolbar are for instructors, installed with `make student`). The page's
# title names the edition, so an English and a Spanish tab are told apart.
LEARNER_PAGE = {
    "en": {"appName": "AMP course", "disabledExtensions": ["@jupyter/nbgrader"]},
    "es": {"appName": "Curso AMP", "disabledExtensions": ["@jupyter/nbgrader"]},
}


def learner_settings(folder: Path, lang: str) -> Path:
    """A settings folder for the learner's JupyterLab, hidden inside their copy:
    the course's overrides plus `LEARNER_PAGE`'s page config. Returns it."""
    settings = Path(folder) / ".lab-settings"
    settings.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(LAB_SETTINGS / "overrides.json", settings / "overrides.json")
    (settings / "page_config.json").write_text(json.dumps(LEARNER_PAGE[lang]))
    return settings


def open_learner_copy(lang: str) -> int:
    """`make lab`: bring the learner's copy of edition ``lang`` up to date (never
    over their work), say what changed, and open it."""
    report = learner_copy.sync(lang)
    print(report.summary(lang), file=sys.stderr, flush=True)
    os.environ[self_study.ENV] = "1"  # no instructor here: the checks grade it all
    return run_lab(
        lab_command(
            root_dir=report.folder,
            settings_dir=learner_settings(report.folder, lang),
            learner=True,
        )
    )


def _parse(args: list[str]) -> tuple[str, Path | str] | None:
    """("learner", lang), ("folder", path) or None for a command line `main` refuses."""
    if not args:
        return "learner", "en"
    if args[:1] == ["--edition"] and len(args) == 2 and args[1] in EDITIONS:
        return "learner", args[1]
    if args[:1] == ["--instructor"]:
        rest = args[1:]
        if not rest:
            return "folder", EDITIONS["en"]
        if rest[:1] == ["--edition"] and len(rest) == 2 and rest[1] in EDITIONS:
            return "folder", EDITIONS[rest[1]]
        return None
    if len(args) == 1 and not args[0].startswith("-") and Path(args[0]).is_dir():
        return "folder", Path(args[0]).resolve()
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m amp_lessons.tooling.lab [--edition en|es | --instructor [--edition
    en|es] | FOLDER]``: the learner's own copy of the course (``make lab``, ``make
    lab EDITION=es``), the instructor's solved lessons (``make lab-instructor``), or
    FOLDER (e.g. student/)."""
    parsed = _parse(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    note = root_note()
    if note:
        print(note, file=sys.stderr, flush=True)
    kind, where = parsed
    course_python_first()
    if kind == "learner":
        return open_learner_copy(where)
    return run_lab(lab_command(root_dir=where))


if __name__ == "__main__":
    raise SystemExit(main())

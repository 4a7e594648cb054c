"""Start JupyterLab on the course, safely: loopback only, with a token, offline; and
stop it cleanly on Ctrl-C.

`make lab` runs ``python -m amp_lessons.tooling.lab --edition en`` (the lessons in
notebooks/), ``make lab EDITION=es`` the same with ``--edition es`` (the Spanish
lessons, notebooks/es/); the browser test starts the server with the same
`lab_command`, so what is tested is what students run. Ctrl-C
(or a closed terminal, or SIGTERM) asks JupyterLab to shut down the way
``jupyter server stop`` does, with SIGTERM: it closes its kernels and removes its
runtime files itself, and the launcher waits for it, with no traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# amp_lessons/tooling/lab.py -> the repository's notebooks/
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# The folder each edition opens in: `make lab` the English lessons, `make lab
# EDITION=es` the Spanish ones (the same file names, generated from notebooks/es/po)
EDITIONS = {"en": NOTEBOOKS, "es": NOTEBOOKS / "es"}
# Settings overrides for the lab: news and update checks off (no pop-up asking, no
# request to a website). A folder of our own, so nothing is written into the venv.
LAB_SETTINGS = Path(__file__).resolve().parent / "lab_settings"


def lab_command(
    port: int | None = None,
    token: str | None = None,
    open_browser: bool = True,
    root_dir: str | Path | None = None,
) -> list[str]:
    """The `jupyter lab` command line the course uses.

    Example: ``lab_command(8899, "abc", open_browser=False)`` binds 127.0.0.1:8899 and
    requires ``?token=abc``. With ``token=None`` Jupyter makes a fresh random token
    itself and prints the URL with it (kept off the command line, where `ps` shows it
    to every user); an empty token is refused, since it would let any local process
    or web page drive the kernel. ``root_dir`` (default: the course's ``notebooks/``)
    lets the browser test serve a scratch folder with the same settings.
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
        f"--LabApp.app_settings_dir={LAB_SETTINGS}",  # ... and no pop-up about them
    ]
    if token is not None:
        command.append(f"--IdentityProvider.token={token}")
    if port is not None:
        command.append(f"--ServerApp.port={port}")
    if not open_browser:
        command.append("--no-browser")
    if root_note():
        command.append("--allow-root")  # see ROOT_NOTE: root only, and said so
    return command


ROOT_NOTE = (
    "note: running as root (common in containers and CI), so JupyterLab is started "
    "with --allow-root: without it Jupyter refuses to run as root. It still listens "
    "on 127.0.0.1 only and asks for its token; as an ordinary user this flag is not "
    "added."
)


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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if asked:
        print("JupyterLab stopped.", file=sys.stderr, flush=True)
        return 0 if code in (0, -signal.SIGTERM) else code
    return code


USAGE = (
    "usage: python -m amp_lessons.tooling.lab [--edition en|es | FOLDER]  "
    "(--edition es: the Spanish lessons, notebooks/es/; FOLDER: a directory of "
    "notebooks; default: the course's notebooks/)"
)


def main(argv: list[str] | None = None) -> int:
    """``python -m amp_lessons.tooling.lab [--edition en|es | FOLDER]``: the course
    (``make lab``), its Spanish edition (``make lab EDITION=es``), or FOLDER (e.g.
    student/)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--edition"] and len(args) == 2 and args[1] in EDITIONS:
        folder = EDITIONS[args[1]]
    elif len(args) == 1 and not args[0].startswith("-") and Path(args[0]).is_dir():
        folder = Path(args[0]).resolve()
    elif not args:
        folder = None  # the course's notebooks/ (`lab_command`'s default)
    else:
        print(USAGE, file=sys.stderr)
        return 2
    note = root_note()
    if note:
        print(note, file=sys.stderr, flush=True)
    return run_lab(lab_command(root_dir=folder))


if __name__ == "__main__":
    raise SystemExit(main())

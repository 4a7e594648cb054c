"""Start JupyterLab on the course, safely: loopback only, with a token, offline.

`make lab` runs ``python -m amp_lessons.tooling.lab``; the browser test starts the
server with the same `lab_command`, so what is tested is what students run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# amp_lessons/tooling/lab.py -> the repository's notebooks/
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
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
        raise ValueError("an empty token disables authentication; pass None for a "
                         "random one")
    command = [
        sys.executable, "-m", "jupyter", "lab",
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
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Jupyter refuses root without this; containers and CI often run as root.
        command.append("--allow-root")
    return command


def main(argv: list[str] | None = None) -> int:
    """``python -m amp_lessons.tooling.lab [FOLDER]``: the course, or FOLDER (e.g.
    student/)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and not Path(args[0]).is_dir()):
        print("usage: python -m amp_lessons.tooling.lab [FOLDER]  (FOLDER: a "
              "directory of notebooks; default: the course's notebooks/)",
              file=sys.stderr)
        return 2
    return subprocess.call(lab_command(root_dir=Path(args[0]).resolve() if args
                                       else None))


if __name__ == "__main__":
    raise SystemExit(main())

"""The GPU check's first step: the carried wheels installed into the check's own
folder, offline, without dependencies (the GPU machine's own torch stays).

Run as a script, by its path: it imports nothing but the standard library, so it
starts at once, and works before anything else is installed::

    python install_wheels.py SITE [--runner WHEEL ...] [--torchao WHEEL]

The lessons' runner goes first and torchao in a call of its own, so that a problem
with one does not cost the other (without the runner every lesson is skipped;
without torchao only the fp8 rows and lesson 11's comparison). pip installs them
where this Python has pip; where it has none, each wheel is unpacked into SITE, which
is what ``pip install --target`` does with these wheels (no scripts or data needed).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

NO_WHEELS = "no carried wheel (torchao): run `make gpu-wheels` before the check"


def install(wheels: Sequence[str | Path], site: Path, use_pip: bool = True) -> str:
    """Install ``wheels`` into ``site``; "" if done, else one line saying why not.

    ``--no-compile``: byte-compiling the runner's 40 wheels took 4 s of pip's 6 on a
    2-core machine, and each module is compiled anyway the first time it is imported.
    """
    if not wheels:
        return ""
    site.mkdir(parents=True, exist_ok=True)
    # PathFinder, not importlib.util.find_spec: asked for "pip", the latter turns
    # setuptools' distutils shim off for the rest of the process (run._installed)
    if use_pip and importlib.machinery.PathFinder.find_spec("pip") is not None:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "-q", "--no-deps"),
                *("--no-index", "--no-compile", "--disable-pip-version-check"),
                *("--target", str(site), *map(str, wheels)),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return ""
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        return f"pip could not install {len(wheels)} wheels: " + (
            lines[-1].strip() if lines else f"exit status {done.returncode}"
        )
    for wheel in wheels:  # no pip here: a wheel is a zip of what goes on the path
        try:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
        except (OSError, zipfile.BadZipFile) as e:
            return f"could not unpack {Path(wheel).name}: {e}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install_wheels.py")
    parser.add_argument("site", type=Path)
    parser.add_argument("--runner", nargs="*", default=[])
    parser.add_argument("--torchao")
    args = parser.parse_args(argv)
    errors = []
    error = install(args.runner, args.site)
    print(
        f"the lessons' runner: {len(args.runner)} wheels installed"
        if not error
        else error,
        flush=True,
    )
    errors += [error] if error else []
    error = install([args.torchao], args.site) if args.torchao else NO_WHEELS
    print(error or f"torchao: {Path(args.torchao).name} installed", flush=True)
    errors += [error] if error else []
    if errors:  # the last line is what the summary shows: the first problem
        print(errors[0], flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

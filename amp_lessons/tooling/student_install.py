"""Set up a student's folder from the course's wheel: what ``python3 install.py`` does
in the student edition that ``make student`` writes (INSTRUCTORS.md, section 3).

``make student`` copies this file into ``student/`` as ``install.py``, with
``bootstrap.py`` beside it as ``_bootstrap.py`` and the wheel ``amp_lessons-*.whl``.
Run there by the student's system Python (standard library only), it creates
``.venv`` in that folder, installs torch's CPU build first on Linux without an NVIDIA
GPU (as the repository's set-up does: a few hundred MB, not the CUDA build's several
GB), then the wheel, whose torch requirement that build already meets, and says how to
start JupyterLab. The torch is the version the instructor grades on
(``torch-version.txt``), else the newest the wheel allows. Each failure is one
sentence.

Example::

    cd amp-course-student && python3 install.py
    .venv/bin/python -m amp_lessons.tooling.lab .
"""

import glob
import os
import re
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def wheel_path(folder=HERE):
    """The newest ``amp_lessons-*.whl`` in ``folder``, or None."""
    wheels = sorted(glob.glob(os.path.join(folder, "amp_lessons-*.whl")))
    return wheels[-1] if wheels else None


def torch_requirement(wheel):
    """The wheel's torch requirement, e.g. ``torch>=2.6``, from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    for line in metadata.splitlines():
        match = re.match(r"Requires-Dist:\s*(torch\b[^;]*)$", line.strip())
        if match:
            return match.group(1).replace(" ", "")
    return "torch"


def torch_pin(folder=HERE):
    """``torch==2.13.0`` when the instructor recorded the torch they grade on
    (``torch-version.txt``, written by ``make student``), else None."""
    path = os.path.join(folder, "torch-version.txt")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        version = f.read().strip()
    return "torch==" + version if re.match(r"^[0-9][0-9a-z.]*$", version) else None


def main():
    sys.path.insert(0, HERE)
    import _bootstrap as bootstrap  # the repository's set-up, copied beside this file

    bootstrap.ROOT, bootstrap.VENV = HERE, os.path.join(HERE, ".venv")
    bootstrap.STAMP = os.path.join(bootstrap.VENV, ".amp_lessons_installed")
    bootstrap.require_python()
    wheel = wheel_path()
    if wheel is None:
        bootstrap.fail(
            "no amp_lessons-*.whl in " + HERE + ": ask your instructor for the "
            "whole course folder (the wheel comes with the notebooks)."
        )
    if not bootstrap.check_venv():
        bootstrap.create_venv()
        bootstrap.check_venv()
    torch = torch_pin() or torch_requirement(wheel)
    bootstrap.torch_spec = lambda: torch
    bootstrap.install_cpu_torch()
    # the torch the instructor grades on (a CUDA build where there is a GPU)
    command = [bootstrap.venv_python(), "-m", "pip", "install", wheel, torch]
    print("installing: " + os.path.basename(wheel))
    status, output = bootstrap.run(command)
    if status != 0:
        sys.stderr.write("\n".join(output.splitlines()[-15:]) + "\n")
        offline = any(s in output for s in bootstrap.OFFLINE_SIGNS)
        bootstrap.fail(
            "pip could not reach the package index: connect, then run "
            "`python3 install.py` again."
            if offline or bootstrap.index_unreachable()
            else "pip failed (its last lines are above); use Python 3.10-3.13, "
            "then run `python3 install.py` again."
        )
    print(
        "set-up done. Start JupyterLab on this folder with:\n  "
        + os.path.relpath(bootstrap.venv_python(), os.getcwd())
        + " -m amp_lessons.tooling.lab ."
    )


if __name__ == "__main__":
    main()

"""Set up the course's virtual environment: `make lab` and `make test` start here.

Run as a plain script (``python3 amp_lessons/tooling/bootstrap.py``) by the system
Python, so it uses the standard library only and old-Python-safe syntax: a Python that
is too old must get a sentence, not a SyntaxError. It creates ``.venv`` inside the
repository, installs requirements.txt plus the package (and extras when asked), and
remembers what it installed so the second run takes a second.
"""

import hashlib
import os
import platform
import subprocess
import sys
import venv

MIN_PYTHON = (3, 10)
# amp_lessons/tooling/bootstrap.py -> the repository, three levels up
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".venv")


def fail(message):
    sys.stderr.write("\nset-up stopped: " + message + "\n")
    sys.exit(1)


def require_python():
    if sys.version_info[:2] < MIN_PYTHON:
        fail(
            "this course needs Python {}.{} or newer, and `{}` is Python {}.\n"
            "Install a newer Python (python.org, your package manager, or conda with "
            "environment.yml), then run the command again, e.g. "
            "`make lab PYTHON=python3.12`.".format(
                MIN_PYTHON[0], MIN_PYTHON[1], sys.executable, platform.python_version()
            )
        )


def venv_python():
    sub = "Scripts" if os.name == "nt" else "bin"
    return os.path.join(VENV, sub, "python")


def create_venv():
    if os.path.exists(venv_python()):
        return
    print("creating the virtual environment in .venv ...")
    try:
        venv.create(VENV, with_pip=True)
    except Exception as error:  # Debian/Ubuntu ship venv without ensurepip
        fail(
            "could not create .venv ({}).\nOn Debian/Ubuntu install the venv module "
            "first: `sudo apt install python3-venv`, remove .venv, and run the command "
            "again.".format(error)
        )


def fingerprint():
    """What the install depends on: a change to either file means install again."""
    digest = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        with open(os.path.join(ROOT, name), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def pip_install(extras):
    target = "." + ("[" + ",".join(sorted(extras)) + "]" if extras else "")
    command = [venv_python(), "-m", "pip", "install", "--disable-pip-version-check",
               "-r", "requirements.txt", "-e", target]
    print("installing: " + " ".join(command[3:]))
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True)
    if result.returncode == 0:
        return
    output = result.stdout
    sys.stderr.write("\n".join(output.splitlines()[-15:]) + "\n")
    if "No matching distribution found for torch" in output:
        fail(
            "pip found no ready-made torch wheel for Python {} on {} {}.\n"
            "PyTorch publishes wheels for a few Python versions only: use Python "
            "3.10-3.13 (e.g. `make lab PYTHON=python3.12`), or the conda path in the "
            "README.".format(platform.python_version(), platform.system(),
                             platform.machine())
        )
    if "No matching distribution" in output or "Failed building wheel" in output:
        fail(
            "a package has no ready-made wheel for this Python/platform and pip "
            "could not build it (see pip's lines above).\nUse Python 3.10-3.13, or "
            "the conda path in the README."
        )
    fail("pip failed (its last lines are above). Fix that, then run the command "
         "again; nothing else was changed.")


def main(argv):
    extras = [e for arg in argv for e in arg.split(",") if e]
    require_python()
    create_venv()
    stamp = os.path.join(VENV, ".amp_lessons_installed")
    if os.path.exists(stamp):
        with open(stamp) as f:
            done_fingerprint, _, done_extras = f.read().partition("\n")
        if done_fingerprint == fingerprint() and set(extras) <= set(
            done_extras.split(",")
        ):
            return
    pip_install(extras)
    with open(stamp, "w") as f:
        f.write(fingerprint() + "\n" + ",".join(sorted(extras)))
    print("set-up done: .venv is ready.")


if __name__ == "__main__":
    main(sys.argv[1:])

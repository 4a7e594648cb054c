"""Set up the course's virtual environment: `make lab` and `make test` start here.

Run as a plain script (``python3 amp_lessons/tooling/bootstrap.py``) by the system
Python, so it uses the standard library only and old-Python-safe syntax, and imports
nothing at the top that Python 2 lacks: a Python that is too old must get a sentence,
not a SyntaxError or an ImportError. It creates ``.venv`` inside the repository (or
checks the one there: its Python's version, that it runs, that it has pip), installs
requirements.txt plus the package (and extras when asked), and checks that what is
installed is importable and in the versions asked for; a stamp of what was installed
lets the second run skip pip, never the check. A ``.venv`` another tool filled (CI's
uv, a reader's own pip) and that has no stamp yet is checked first: if nothing is
missing it is stamped as it is, without a pip run. Each failure ends in one sentence
that says what to do: too old a Python, a broken ``.venv``, no network, no wheel.

On Linux without an NVIDIA GPU, and with no torch in range in ``.venv`` yet, it first
installs torch's CPU build from PyTorch's CPU wheel index (a few hundred MB instead of
the CUDA build's several GB), says so in one line with the download size, and the
requirements install then keeps it; if that index cannot be reached it says so in one
line and the normal install fetches the default build. The index is
``https://download.pytorch.org/whl/cpu``; the environment variable
``AMP_LESSONS_TORCH_INDEX`` overrides it (the tests point it at a local index), and
``AMP_LESSONS_GPU=1`` or ``0`` overrides the GPU detection.
"""

import hashlib
import json
import os
import platform
import re
import subprocess
import sys

MIN_PYTHON = (3, 10)
# amp_lessons/tooling/bootstrap.py -> the repository, three levels up
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".venv")
STAMP = os.path.join(VENV, ".amp_lessons_installed")
REMOVE = "Remove it (`rm -rf .venv`) and run the command again: it is made afresh."

# modules the commands run besides the requirements' own: `make lab` runs
# `python -m jupyter lab`, and everything imports the course's package
COMMAND_MODULES = {
    "": ["jupyter", "amp_lessons"],
    "dev": ["pytest", "nbval"],
    "instructor": ["nbgrader"],
    "site": ["myst_nb", "sphinx_book_theme"],
}

# what pip prints when it cannot reach the index at all
OFFLINE_SIGNS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "nodename nor servname",
    "Network is unreachable",
    "No route to host",
    "Connection refused",
    "ConnectTimeoutError",
    "Read timed out",
    "ProxyError",
    "Max retries exceeded",
)


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


def run(command):
    """(exit status, output) of a command; status None if it could not start."""
    try:
        result = subprocess.run(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            universal_newlines=True,
        )
    except OSError as error:
        return None, str(error)
    return result.returncode, result.stdout


def check_venv():
    """Stop with a sentence unless .venv is a virtual environment of a Python this
    course supports, that runs and has pip. True if there is one, False if none."""
    if not os.path.lexists(VENV):
        return False
    if not os.path.isdir(VENV):
        fail(
            "`.venv` is a file, not a virtual environment. Move it away or delete it "
            "(`rm .venv`), then run the command again."
        )
    python = venv_python()
    if not os.path.lexists(python):
        fail(
            "`.venv` has no {}: it is not a virtual environment, or a broken one. "
            "{}".format(os.path.relpath(python, ROOT), REMOVE)
        )
    status, output = run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    )
    found = re.match(r"(\d+)\.(\d+)$", output.strip()) if status == 0 else None
    if found is None:
        fail(
            "`.venv` is broken: its python does not run (the Python it was made "
            "from was probably removed or upgraded). " + REMOVE
        )
    version = (int(found.group(1)), int(found.group(2)))
    if version < MIN_PYTHON:
        fail(
            "`.venv` was made with Python {}.{}, and this course needs Python {}.{} "
            "or newer. {} (with `{}`, Python {})".format(
                version[0],
                version[1],
                MIN_PYTHON[0],
                MIN_PYTHON[1],
                REMOVE.rstrip("."),
                sys.executable,
                platform.python_version(),
            )
        )
    status, _ = run([python, "-m", "pip", "--version"])
    if status != 0:
        fail(
            "`.venv` has no pip (it was made with --without-pip, or by a Python "
            "without ensurepip; on Debian/Ubuntu install python3-venv first). " + REMOVE
        )
    return True


def create_venv():
    print("creating the virtual environment in .venv ...")
    try:
        import venv  # here, not at the top: Python 2 has no venv module

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


def requirements(extras):
    """The requirement lines to install: requirements.txt, plus each extra's list
    from pyproject.toml (read with a regular expression: no tomllib before 3.11)."""
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        lines = [line.split("#")[0].strip() for line in f]
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        pyproject = f.read()
    section = re.search(
        r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[)", pyproject, re.M | re.S
    )
    listed = dict(
        re.findall(
            r"^(\w+)\s*=\s*\[(.*?)\]", section.group(1) if section else "", re.M | re.S
        )
    )
    for extra in extras:
        lines += re.findall(r'"([^"]+)"', listed.get(extra, ""))
    return [line for line in lines if line]


# Run by .venv's Python (3.10+): each requirement installed, in range, importable.
VERIFY = r"""
import importlib.metadata as md, importlib.util, json, os, sys
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
root, lines, modules = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
problems = []
for line in lines:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # not for this platform
    try:
        dist = md.distribution(req.name)
    except md.PackageNotFoundError:
        problems.append(req.name + " is not installed")
        continue
    if not req.specifier.contains(dist.version, prereleases=True):
        problems.append("%s %s is installed, the course needs %s%s"
                        % (req.name, dist.version, req.name, req.specifier))
    tops = {str(f).split("/")[0].split(".")[0] for f in dist.files or []
            if not str(f).startswith("..") and "-info" not in str(f).split("/")[0]}
    lost = sorted(t for t in tops if t.isidentifier() and not t.startswith("_")
                  and importlib.util.find_spec(t) is None)
    if lost:
        problems.append("%s is installed but %s cannot be imported"
                        % (req.name, ", ".join(lost)))
for module in modules:
    if importlib.util.find_spec(module) is None:
        problems.append("the module %s cannot be imported" % module)
spec = importlib.util.find_spec("amp_lessons")
here = os.path.realpath(root) + os.sep
if spec is not None and not os.path.realpath(spec.origin or "").startswith(here):
    problems.append("amp_lessons is installed from %s, not from this folder"
                    % os.path.dirname(spec.origin or "?"))
print(json.dumps(problems))
"""


def installed_problems(extras):
    """What is wrong with the packages in .venv ([] when every one is importable and
    in range), checked by .venv's own Python."""
    modules = [
        m for extra in [""] + list(extras) for m in COMMAND_MODULES.get(extra, [])
    ]
    status, output = run(
        [
            venv_python(),
            "-I",
            "-c",
            VERIFY,
            ROOT,
            json.dumps(requirements(extras)),
            json.dumps(modules),
        ]
    )
    try:
        problems = json.loads(output.strip().splitlines()[-1]) if status == 0 else None
    except (ValueError, IndexError):
        problems = None
    if problems is None:
        return [
            "the installed packages could not be checked ({})".format(
                (output.strip().splitlines() or ["no output"])[-1]
            )
        ]
    return problems


def index_url():
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")


def index_unreachable(index=None):
    """True when a connection to the package index (or to the proxy in between)
    cannot even be opened: this machine is offline, as far as pip is concerned."""
    import socket

    try:
        from urllib.parse import urlsplit
    except ImportError:  # Python 2, which never gets this far
        return False
    url = urlsplit(index or index_url())
    if url.scheme not in ("http", "https"):
        return False  # a local index: no network involved
    proxy = os.environ.get(url.scheme.upper() + "_PROXY") or os.environ.get(
        url.scheme + "_proxy"
    )
    target = (
        urlsplit(proxy if "//" in (proxy or "") else "//" + (proxy or ""))
        if proxy
        else url
    )
    port = target.port or (443 if url.scheme == "https" and not proxy else 80)
    try:
        socket.create_connection((target.hostname, port), timeout=10).close()
    except (OSError, ValueError):
        return True
    return False


CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu(environ=None, root="/", which=None):
    """True when this machine has an NVIDIA GPU and driver, found as uv's
    `--torch-backend=auto` finds one: a working `nvidia-smi` on PATH, or the driver's
    /proc/driver/nvidia/version, or a /dev/nvidia<N> device. AMP_LESSONS_GPU=1 or 0
    decides instead (for tests, or to ask for a build on purpose); `root` and `which`
    let the tests point at a fake /proc, /dev and PATH."""
    environ = os.environ if environ is None else environ
    forced = environ.get("AMP_LESSONS_GPU", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if os.path.exists(os.path.join(root, "proc", "driver", "nvidia", "version")):
        return True
    dev = os.path.join(root, "dev")
    if os.path.isdir(dev) and any(
        re.match(r"nvidia\d+$", name) for name in os.listdir(dev)
    ):
        return True
    if which is None:
        import shutil  # here, not at the top: Python 2's shutil has no which

        which = shutil.which
    smi = which("nvidia-smi", path=environ.get("PATH", os.defpath))
    return bool(smi) and run([smi, "-L"])[0] == 0


def torch_spec():
    """torch's requirement line from requirements.txt, e.g. 'torch>=2.13,<3'."""
    for line in requirements([]):
        if re.match(r"torch\s*([<>=!~;\[]|$)", line):
            return line
    return "torch"


# Run by .venv's Python: prints whether torch is installed within the given range.
TORCH_IN_RANGE = r"""
import importlib.metadata as md, sys
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
try:
    version = md.version("torch")
except md.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if Requirement(sys.argv[1]).specifier.contains(version, True) else 1)
"""


def install_cpu_torch(gpu=None):
    """On Linux without an NVIDIA GPU, install torch's CPU build before the
    requirements (pip then keeps it, as it keeps any torch in range). Nothing when
    torch is already installed in range (CI pre-installs it), on a GPU machine, or
    off Linux (macOS wheels on PyPI are CPU builds already). One line either way."""
    if not sys.platform.startswith("linux"):
        return
    if has_nvidia_gpu() if gpu is None else gpu:
        return
    spec = torch_spec()
    if run([venv_python(), "-I", "-c", TORCH_IN_RANGE, spec])[0] == 0:
        return
    url = os.environ.get("AMP_LESSONS_TORCH_INDEX", CPU_TORCH_INDEX)
    # one quick try: an unreachable index must not cost pip's minutes of retries
    status, output = run(
        [
            venv_python(),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--timeout",
            "10",
            "--retries",
            "0",
            "--index-url",
            url,
            spec,
        ]
    )
    if status == 0:
        version = re.search(r"Successfully installed .*?\btorch-(\S+)", output)
        size = re.search(
            r"(?:Downloading|Using cached) \S*torch-\S+ \(([^)]+)\)", output
        )
        print(
            "no NVIDIA GPU found: installed torch {}, the CPU build ({}), from "
            "{} instead of the CUDA build.".format(
                version.group(1) if version else "",
                (size.group(1) + " download") if size else "size not reported",
                url,
            )
        )
        return
    # with --retries 0 pip may only say "No matching distribution": ask the network
    offline = any(sign in output for sign in OFFLINE_SIGNS) or index_unreachable(url)
    why = (
        "could not be reached" if offline else "had no {} for this machine".format(spec)
    )
    print(
        "no NVIDIA GPU found, but PyTorch's CPU wheel index ({}) {}: installing "
        "the default torch build (with CUDA libraries) instead.".format(url, why)
    )


def pip_install(extras):
    target = "." + ("[" + ",".join(sorted(extras)) + "]" if extras else "")
    command = [
        venv_python(),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "-r",
        "requirements.txt",
        "-e",
        target,
    ]
    print("installing: " + " ".join(command[3:]))
    status, output = run(command)
    if status == 0:
        return
    sys.stderr.write("\n".join(output.splitlines()[-15:]) + "\n")
    # pip says "No matching distribution" offline too, after its retries (and with
    # PIP_RETRIES=0 without a word about the network): ask the network itself
    if any(sign in output for sign in OFFLINE_SIGNS) or index_unreachable():
        fail(
            "pip could not reach the package index ({}): this machine seems to be "
            "offline, or behind a proxy pip does not know about. Connect (or set "
            "HTTPS_PROXY, or PIP_INDEX_URL for a mirror), then run the command again; "
            "nothing else was changed.".format(index_url())
        )
    if "No matching distribution found for torch" in output:
        fail(
            "pip found no ready-made torch wheel for Python {} on {} {}.\n"
            "PyTorch publishes wheels for a few Python versions only: use Python "
            "3.10-3.13 (e.g. `make lab PYTHON=python3.12`), or the conda path in the "
            "README.".format(
                platform.python_version(), platform.system(), platform.machine()
            )
        )
    missing = re.search(r"No matching distribution found for (\S+)", output)
    if missing or "Failed building wheel" in output:
        fail(
            "pip found no ready-made wheel for {} on Python {} ({} {}) and could not "
            "build one (see pip's lines above).\nUse Python 3.10-3.13, or the conda "
            "path in the README.".format(
                missing.group(1) if missing else "a package",
                platform.python_version(),
                platform.system(),
                platform.machine(),
            )
        )
    fail(
        "pip failed (its last lines are above). Fix that, then run the command "
        "again; nothing else was changed."
    )


def main(argv):
    extras = [e for arg in argv for e in arg.split(",") if e]
    require_python()
    if not check_venv():
        create_venv()
        check_venv()
    if os.path.exists(STAMP):
        with open(STAMP) as f:
            done_fingerprint, _, done_extras = f.read().partition("\n")
        if done_fingerprint == fingerprint() and set(extras) <= set(
            done_extras.split(",")
        ):
            problems = installed_problems(extras)
            if not problems:
                return
            print(
                "the set-up stamp says .venv is ready, but "
                + "; ".join(problems[:4])
                + ": installing again ..."
            )
    elif not installed_problems(extras):
        # filled by another tool (no stamp of ours): pip would find nothing to do
        write_stamp(extras)
        print("set-up done: .venv already had everything (checked); nothing installed.")
        return
    install_cpu_torch()
    pip_install(extras)
    problems = installed_problems(extras)
    if problems:
        fail(
            "pip finished, but " + "; ".join(problems[:4]) + ". Remove .venv "
            "(`rm -rf .venv`) and run the command again; if that does not fix it, "
            "report it with the lines above."
        )
    write_stamp(extras)
    print("set-up done: .venv is ready.")


def write_stamp(extras):
    """Record what .venv was checked to hold: the next run skips pip (never the
    check) while requirements.txt and pyproject.toml stay as they are."""
    with open(STAMP, "w") as f:
        f.write(fingerprint() + "\n" + ",".join(sorted(extras)))


if __name__ == "__main__":
    main(sys.argv[1:])

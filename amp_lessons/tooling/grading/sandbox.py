"""Run one submitted notebook in a bubblewrap sandbox and bring back only the executed
notebook and the guard's signed evidence.

Inside ``bwrap`` the submission sees: read-only /usr, the Python installation and the
venv; a fresh read-only copy of the course package; a read-only copy of its own
graded folder (the notebook nbgrader sanitized, and support files such as
``results/``); a size-limited tmpfs to run in and another as /tmp; and one FIFO, the
guard's evidence channel. No network (its own network namespace: loopback only,
under its own hostname, which its /etc/hosts names, so lesson 10's torchrun can
meet its workers there), no other process (its own PID namespace), no
capabilities, not the gradebook, not the course folder, not the instructor's
source, not the home directory. It is killed at the time limit, and with it
everything it started.

``run_notebook(..., sandbox=False)`` (what ``--unsafe-no-sandbox`` does) runs the same
runner as a plain child process with the instructor's rights: evidence and tamper
checks still work, protection of files does not.

Not covered here: scoring and flags (``review``, ``autograde``).
"""

from __future__ import annotations

import hmac
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import nbformat

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # .../amp_lessons
INSTALL_HINT = (
    "install bubblewrap: `sudo apt-get install bubblewrap` (Debian, "
    "Ubuntu), `sudo dnf install bubblewrap` (Fedora)"
)
UNSAFE_HINT = (
    "only on a machine you do not mind student code touching with your "
    "rights: `make grade GRADE_ARGS=--unsafe-no-sandbox` (or `autograde "
    "--unsafe-no-sandbox`)"
)
NOTEBOOK_TIMEOUT_S = 600  # per notebook; the course's lessons each run in < 2 min
WORK_BYTES = 512 * 2**20  # the tmpfs a notebook runs in, and /tmp
MEMORY_BYTES = 16 * 2**30  # address space of the runner and the kernel
RESULT_MAX_BYTES = 64 * 2**20
EVIDENCE_MAX_BYTES = 2 * 2**20
# Where things appear inside the sandbox
INPUT_DIR, WORK_DIR, FIFO = "/grading/input", "/grading/work", "/grading/evidence"
PRIVATE_DIR = "/tmp/.amp-guard"
SANDBOX_UID = 1000
# The sandbox's own hostname and /etc/hosts: its network namespace holds only the
# loopback interface, and torchrun (lesson 10) looks up "localhost" and the hostname
# before it listens there; the host's /etc/hosts is not the sandbox's business
SANDBOX_HOSTNAME = "grader"
SANDBOX_HOSTS = f"127.0.0.1\tlocalhost {SANDBOX_HOSTNAME}\n"
BWRAP_MIN = (0, 8)
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "group",
    "host.conf",
    "fonts",
)


@dataclass
class Run:
    """What came back from one notebook's run."""

    notebook: nbformat.NotebookNode | None  # None when nothing usable came back
    reason: str | None  # why the run stopped early or failed, None when it ran through
    cell: int | None  # the cell that was running when it stopped
    records: list[dict] = field(default_factory=list)  # verified guard records
    forged: int = 0  # evidence lines that did not verify
    seconds: float = 0.0


def _python_roots() -> list[Path]:
    roots = {
        Path(p).resolve()
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    roots.add(Path(sys.executable).resolve().parent.parent)
    return sorted(r for r in roots if not any(r != o and o in r.parents for o in roots))


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in _ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for root in _python_roots():
        if not str(root).startswith("/usr/"):
            args += ["--ro-bind", str(root), str(root)]
    return args


def _isolation(user_namespace: bool) -> list[str]:
    args = [
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    if user_namespace:
        args += [
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--disable-userns",
        ]
    return args + ["--proc", "/proc", "--dev", "/dev"]


@lru_cache(maxsize=1)
def _probe() -> tuple[list[str] | None, str]:
    """(isolation args that work here, or None; what went wrong)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bubblewrap (bwrap) is not installed"
    try:
        said = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{bwrap} does not run ({exc})"
    found = re.search(r"(\d+)\.(\d+)", said)
    if not found or tuple(map(int, found.groups())) < BWRAP_MIN:
        return None, (
            f"bubblewrap {said.split()[-1] if said.split() else '?'} is "
            f"too old: {'.'.join(map(str, BWRAP_MIN))} or newer is needed "
            "(--size, --disable-userns); Debian 12 and Ubuntu 24.04 have it"
        )
    errors = []
    for user_namespace in (True, False):
        if not user_namespace and os.geteuid() != 0:
            break  # without a user namespace bwrap needs root
        args = _isolation(user_namespace)
        command = [
            bwrap,
            *args,
            *_system_mounts(),
            "--",
            sys.executable,
            "-c",
            "print('sandboxed')",
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            errors.append("bwrap did not answer in 60 s")
            continue
        if done.returncode == 0 and done.stdout.strip() == "sandboxed":
            return args, ""
        errors.append(done.stderr.strip()[-300:] or f"exit {done.returncode}")
    return None, (
        "bwrap cannot create its sandbox here ("
        + "; ".join(errors)
        + "). User namespaces may be off: enable them (sysctl "
        "user.max_user_namespaces=15000; kernel.unprivileged_userns_clone=1 "
        "on Debian; kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu "
        "24.04), or in Docker run the grader with --privileged"
    )


def sandbox_problem() -> str | None:
    """None when bwrap can sandbox a submission here; otherwise what to do."""
    args, problem = _probe()
    if args is not None:
        return None
    if "not installed" in problem:
        problem = f"{problem}; {INSTALL_HINT}"
    return f"{problem}. To grade anyway, {UNSAFE_HINT}"


def _sandbox_mounts(
    package_copy: Path, input_dir: Path, fifo: Path, hosts: Path
) -> list[str]:
    """bwrap arguments for the file system the submission sees, and its hostname."""
    tmpfs = ["--size", str(WORK_BYTES), "--tmpfs"]  # in memory: each one capped
    # /tmp's tmpfs first: a Python or venv that lives under /tmp (a CI clone) is
    # bound on top of it by _system_mounts, not hidden by it
    args = [*tmpfs, "/tmp", *_system_mounts(), "--hostname", SANDBOX_HOSTNAME]
    args += ["--ro-bind", str(hosts), "/etc/hosts"]
    args += ["--ro-bind", str(package_copy), str(PACKAGE_DIR)]
    args += ["--ro-bind", str(input_dir), INPUT_DIR]
    args += [*tmpfs, WORK_DIR, *tmpfs, "/dev/shm"]
    return args + ["--bind", str(fifo), FIFO, "--chdir", WORK_DIR]


def _sandbox_environment() -> list[str]:
    """bwrap arguments for the runner's whole environment (bwrap clears the rest)."""
    env = {
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(PACKAGE_DIR.parent),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    return [arg for name, value in env.items() for arg in ("--setenv", name, value)]


def bwrap_command(
    package_copy: Path, input_dir: Path, fifo: Path, hosts: Path
) -> list[str]:
    """The bwrap command line that runs the runner on one notebook.

    ``hosts`` is a file holding ``SANDBOX_HOSTS``, bound as the sandbox's /etc/hosts.
    """
    args, problem = _probe()
    if args is None:
        raise RuntimeError(problem)
    return [
        shutil.which("bwrap"),
        *args,
        *_sandbox_mounts(package_copy, input_dir, fifo, hosts),
        *_sandbox_environment(),
        "--",
        sys.executable,
        "-m",
        "amp_lessons.tooling.grading.runner",
    ]


class _Evidence(threading.Thread):
    """Reads the FIFO until stopped; keeps at most EVIDENCE_MAX_BYTES."""

    def __init__(self, fifo: Path):
        super().__init__(daemon=True)
        self.fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.data, self.stop = bytearray(), threading.Event()

    def run(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            chunk = os.read(self.fd, 65536) if ready else b""
            if chunk and len(self.data) < EVIDENCE_MAX_BYTES:
                self.data += chunk
            if not chunk and self.stop.is_set():
                break
            if ready and not chunk:
                time.sleep(0.05)  # no writer at the moment
        os.close(self.fd)


def verify_records(data: bytes, key: str) -> tuple[list[dict], int]:
    """The records whose HMAC verifies, in order, and how many lines did not."""
    records, forged, expected = [], 0, 1
    for line in bytes(data).split(b"\n"):
        if not line:
            continue
        mac, _, payload = line.partition(b" ")
        good = hmac.new(bytes.fromhex(key), payload, "sha256").hexdigest().encode()
        try:
            record = json.loads(payload) if hmac.compare_digest(mac, good) else None
        except ValueError:
            record = None
        if record is None or record.get("seq") != expected:
            forged += 1
            continue
        expected += 1
        records.append(record)
    return records, forged


def _copy_package(scratch: Path) -> Path:
    """A fresh copy of the course package in ``scratch``, without bytecode caches:
    the one the runner imports (bound read-only in the sandbox)."""
    package = scratch / "package" / "amp_lessons"
    shutil.copytree(
        PACKAGE_DIR,
        package,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints"),
    )
    return package


@dataclass
class _Launch:
    """How the runner is started, and where it finds things (the job's paths)."""

    command: list[str]
    env: dict[str, str] | None  # None: this process's (bwrap clears it)
    paths: dict[str, str]


def _sandboxed(scratch: Path, package: Path, input_dir: Path, fifo: Path) -> _Launch:
    """The runner in bwrap: it finds everything at the sandbox's fixed paths."""
    hosts = scratch / "hosts"
    hosts.write_text(SANDBOX_HOSTS)
    command = bwrap_command(package, Path(input_dir).resolve(), fifo, hosts)
    paths = {
        "input_dir": INPUT_DIR,
        "workdir": WORK_DIR,
        "fifo": FIFO,
        "private_dir": PRIVATE_DIR,
        "package_root": str(PACKAGE_DIR.parent),
    }
    return _Launch(command, None, paths)


def _unsandboxed(scratch: Path, package: Path, input_dir: Path, fifo: Path) -> _Launch:
    """The runner as a plain child process, with the instructor's rights; its work
    folder and home are in ``scratch``."""
    command = [sys.executable, "-m", "amp_lessons.tooling.grading.runner"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(
        PYTHONPATH=str(package.parent),
        PYTHONDONTWRITEBYTECODE="1",
        HOME=str(scratch / "home"),
    )
    paths = {
        "input_dir": str(input_dir),
        "workdir": str(scratch / "work"),
        "fifo": str(fifo),
        "private_dir": str(scratch / "home" / ".guard"),
        "package_root": str(package.parent),
    }
    return _Launch(command, env, paths)


def _communicate(
    launch: _Launch, scratch: Path, job: dict, timeout: float
) -> tuple[bytes, bytes, int, str | None]:
    """Run the runner on ``job`` (JSON on its stdin): ``(stdout, stderr, exit code,
    why it was stopped)``, the last None when it ended by itself. At ``timeout`` its
    whole session is killed: the kernel and anything the submission started."""
    proc = subprocess.Popen(
        launch.command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=launch.env,
        cwd=scratch,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(json.dumps(job).encode(), timeout=timeout)
        reason = None
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        reason = f"timeout: the notebook ran past {timeout:g} s and was stopped"
    return out, err, proc.returncode, reason


def run_notebook(
    nb: nbformat.NotebookNode,
    input_dir: Path,
    *,
    test_cells: dict[int, str],
    course_cells: list[str],
    protected: list[str],
    sandbox: bool = True,
    timeout: float = NOTEBOOK_TIMEOUT_S,
    cell_timeout: int = 180,
) -> Run:
    """Execute ``nb`` (the sanitized submission) in a sandbox; return what came back.

    ``input_dir`` holds its support files; ``test_cells`` maps the index of each
    graded test cell to its source and ``course_cells`` lists the course's own cell
    sources (for the guard); ``protected`` are host paths whose opening is evidence.
    """
    start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="amp-grade-"))
    try:
        package = _copy_package(scratch)
        fifo = scratch / "evidence"
        os.mkfifo(fifo, 0o600)
        key = secrets.token_hex(32)
        launch = (_sandboxed if sandbox else _unsandboxed)(
            scratch, package, input_dir, fifo
        )
        job = {
            **launch.paths,
            "notebook": nb,
            "name": "notebook.ipynb",
            "key": key,
            "test_cells": {str(i): s for i, s in test_cells.items()},
            "course_cells": course_cells,
            "protected": protected,
            "cell_timeout": cell_timeout,
            "memory_bytes": MEMORY_BYTES,
        }
        evidence = _Evidence(fifo)
        evidence.start()
        out, err, returncode, reason = _communicate(launch, scratch, job, timeout)
        evidence.stop.set()
        evidence.join(timeout=10)
        records, forged = verify_records(evidence.data, key)
        run = Run(None, reason, None, records, forged)
        if reason is None:
            run = _result(out, err, returncode, run, key)
        run.seconds = time.perf_counter() - start
        return run
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _result(out: bytes, err: bytes, returncode: int, run: Run, key: str) -> Run:
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    if returncode != 0 or not out:
        run.reason = (
            f"crash: the sandboxed run ended with exit {returncode} and no "
            f"result ({tail[0][:200]})"
        )
        return run
    if len(out) > RESULT_MAX_BYTES:
        run.reason = f"output too large: {len(out) / 2**20:.0f} MiB of notebook"
        return run
    mac, _, payload = out.partition(b"\n")
    good = hmac.new(bytes.fromhex(key), payload, "sha256").hexdigest().encode()
    if not hmac.compare_digest(mac, good):
        run.reason = (
            "crash: the result did not verify (something besides the "
            "runner wrote to its output); scored as not run"
        )
        return run
    try:
        document = json.loads(payload)
        run.notebook = nbformat.from_dict(document["notebook"])
        nbformat.validate(run.notebook)
    except (ValueError, KeyError, TypeError, nbformat.ValidationError) as exc:
        run.notebook = None
        run.reason = f"crash: the executed notebook came back unreadable ({exc})"[:300]
        return run
    if document.get("reason"):
        run.reason = f"crash: {document['reason']}"
        run.cell = document.get("cell")
    return run

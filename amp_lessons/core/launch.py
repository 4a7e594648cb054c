"""Starting a training command on several processes from a notebook or a test:
``launch`` runs ``torchrun --standalone --nproc_per_node=N -m MODULE ARGS`` from this
Python, streams its output line by line, kills the whole process group past a time
limit, and returns a ``Launch`` whose ``raise_for_status`` puts the ranks' own errors
first. What the ranks then do together is ``amp_lessons.core.distributed``'s.
"""

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from amp_lessons.i18n import language


@dataclass
class Launch:
    """What a ``launch`` produced: the exit status and everything it printed."""

    returncode: int
    output: str
    command: list[str]

    def raise_for_status(self) -> None:
        """Raise RuntimeError if the launch failed, with the workers' own error lines
        first: torchrun's closing traceback only says which rank died and how.

        Example: ``launch(["train", "--lr", "-1"]).raise_for_status()`` raises
        ``RuntimeError: the launch failed (exit 1): ...``.
        """
        if self.returncode == 0:
            return
        lines = self.output.splitlines()
        own = [
            line
            for line in lines
            if "elastic" not in line
            and "ChildFailed" not in line
            and re.search(r"Error|error:|terminate|what\(\)|Abort", line)
        ]
        own = list(dict.fromkeys(own))  # each rank prints the same error
        raise RuntimeError(
            f"the launch failed (exit {self.returncode}): "
            + " | ".join(own[:8])[:1500]
            + "\n... output's end:\n"
            + "\n".join(lines[-15:])
        )


def launch(
    args: Sequence[str],
    nproc: int = 2,
    timeout: float = 120,
    stream: Callable[[str], None] | None = print,
    module: str = "amp_lessons",
    cwd: str | os.PathLike | None = None,
) -> Launch:
    """Run ``torchrun --standalone --nproc_per_node=nproc -m module *args``, streaming
    its output line by line; return its status and output.

    Uses ``python -m torch.distributed.run`` (what the ``torchrun`` script runs) from
    this Python, so it works where ``torchrun`` is not on PATH. The processes talk
    over the loopback interface (``GLOO_SOCKET_IFNAME=lo`` on Linux unless set), and
    import this ``amp_lessons``. A run past ``timeout`` seconds is killed.

    Example: ``launch(["train", "--distributed", "ddp", "--steps", "5"]).returncode``
    -> ``0``.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        module,
        *map(str, args),
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_launch_environment(),
        cwd=cwd,
        start_new_session=True,
    )
    lines, returncode, timed_out = _follow(process, timeout, stream)
    if timed_out:
        raise TimeoutError(
            f"{shlex.join(command)} ran past {timeout:g} s and was "
            "killed:\n" + "".join(lines[-20:])
        )
    return Launch(returncode, "".join(lines), command)


def _launch_environment() -> dict[str, str]:
    """This process's environment, plus what the workers need: the loopback for gloo,
    one OpenMP thread, this package on the path, unbuffered output."""
    env = dict(os.environ)
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", "1")
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, env.get("PYTHONPATH")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    env["LANGUAGE"] = language()  # the workers print in the language this process does
    return env


def _follow(
    process: subprocess.Popen, timeout: float, stream: Callable[[str], None] | None
) -> tuple[list[str], int, bool]:
    """Read ``process``'s output to its end, passing each line to ``stream``; killed
    past ``timeout`` seconds. Returns the lines, the exit status, and whether it was
    killed for time."""
    lines: list[str] = []
    timed_out = threading.Event()

    def on_timeout() -> None:
        timed_out.set()
        _kill_group(process)

    timer = threading.Timer(timeout, on_timeout)
    timer.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if stream is not None and not _is_noise(line):
                stream(line.rstrip("\n"))
        returncode = process.wait()
    finally:
        timer.cancel()
        process.stdout.close()
        if process.poll() is None:
            _kill_group(process)
            process.wait()
    return lines, returncode, timed_out.is_set()


def _kill_group(process: subprocess.Popen) -> None:
    """End torchrun and its workers, which run in sessions of their own."""
    if process.poll() is not None:
        return
    try:
        import psutil  # installed with jupyter; without it torchrun's SIGTERM does it

        workers = psutil.Process(process.pid).children(recursive=True)
    except Exception:
        workers = []
    process.terminate()  # torchrun passes SIGTERM on to its workers
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    for worker in workers:
        try:
            worker.kill()
        except Exception:
            pass  # already gone


def _is_noise(line: str) -> bool:
    # torchrun's banner about OMP_NUM_THREADS, repeated for every launch
    return not line.strip() or line.startswith(("*****", "Setting OMP_NUM_THREADS"))

"""Start the course's JupyterLab for a test, exactly as `make lab` does, and clean up.

The launch and browser tests share this: `amp_lessons.tooling.lab.lab_command` builds
the command (what students run), and everything the server or its kernels write
(settings, workspaces, runtime files, matplotlib's font cache) lands in a temporary HOME
that is deleted afterwards, so no user settings leak in and nothing is left behind.

Example:
    with running_lab() as lab:
        requests.get(lab.url("/api/status"), headers=lab.auth)  # 200
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from amp_lessons.tooling.lab import lab_command

START_TIMEOUT_S = 90  # a cold start on 2 cores takes ~5 s; the first import can be slow

# Variables through which a developer's own Jupyter/IPython/matplotlib set-up would
# reach the server or its kernels.
LEAKY_PREFIXES = ("JUPYTER", "JPY_", "IPYTHON", "XDG_", "MPL")


@dataclass
class Lab:
    base: str  # http://127.0.0.1:PORT
    port: int
    token: str
    process: subprocess.Popen
    home: Path
    log_path: Path

    def url(self, path: str, with_token: bool = False) -> str:
        sep = "&" if "?" in path else "?"
        return self.base + path + (f"{sep}token={self.token}" if with_token else "")

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def isolated_env(tmp: Path) -> dict[str, str]:
    """os.environ without personal Jupyter settings, every config dir inside `tmp`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY_PREFIXES)}
    dirs = {
        "HOME": "home",
        "JUPYTER_CONFIG_DIR": "jupyter-config",
        "JUPYTER_DATA_DIR": "jupyter-data",
        "JUPYTER_RUNTIME_DIR": "jupyter-runtime",
        "IPYTHONDIR": "ipython",
        "MPLCONFIGDIR": "matplotlib",
        "XDG_CACHE_HOME": "cache",
        "XDG_CONFIG_HOME": "config",
    }
    for name, sub in dirs.items():
        (tmp / sub).mkdir()
        env[name] = str(tmp / sub)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def write_test_settings(config_dir: Path) -> None:
    """Autosave off: a test that runs the course's notebooks must never write their
    outputs back into notebooks/ (the repo stores them clean)."""
    plugin = config_dir / "lab" / "user-settings" / "@jupyterlab"
    plugin /= "docmanager-extension"
    plugin.mkdir(parents=True)
    (plugin / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}))


def http_status(url: str, headers: dict[str, str] | None = None) -> int:
    """Status of a GET without following redirects (302 to /login must stay visible)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@contextmanager
def running_lab(
    root_dir: str | Path | None = None,
    extra_args: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
    settings_dir: str | Path | None = None,
) -> Iterator[Lab]:
    """A live JupyterLab on 127.0.0.1 with a random token; killed and wiped on exit.
    ``settings_dir``: the learner's (`lab.learner_settings`), as `make lab` passes."""
    tmp = Path(tempfile.mkdtemp(prefix="amp-lab-"))
    env = isolated_env(tmp)
    write_test_settings(Path(env["JUPYTER_CONFIG_DIR"]))
    env.update(extra_env or {})
    port, token = free_port(), secrets.token_hex(16)
    command = lab_command(
        port=port,
        token=token,
        open_browser=False,
        root_dir=root_dir,
        settings_dir=settings_dir,
    )
    # fail loudly instead of quietly moving to the next port if ours was taken
    command += [
        "--ServerApp.port_retries=0",
        # a kernel may take over a minute to start while CI unpacks the newest torch
        # beside the tests (the default, 60 s, then fails the page's connection and
        # the kernel is interrupted mid-import: seen once in a fresh-clone run)
        "--ZMQChannelsWebsocketConnection.kernel_info_timeout=240",
        *extra_args,
    ]
    log_path = tmp / "server.log"
    with open(log_path, "w") as log:
        # own session: the server and its kernels form one group we can kill by id
        process = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=tmp / "home",
        )
    lab = Lab(f"http://127.0.0.1:{port}", port, token, process, tmp / "home", log_path)
    try:
        wait_until_up(lab)
        yield lab
    finally:
        stop(process)
        shutil.rmtree(tmp, ignore_errors=True)


def wait_until_up(lab: Lab) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with {lab.process.returncode}:\n"
                + lab.log()[-3000:]
            )
        try:
            if http_status(lab.url("/api/status"), lab.auth) == 200:
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.2)
    raise RuntimeError(
        f"JupyterLab did not answer within {START_TIMEOUT_S} s:\n" + lab.log()[-3000:]
    )


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the server (it shuts its kernels down), then SIGKILL what is left.

    Kernels run in sessions of their own (jupyter_client), so they are found as the
    server's children before it goes, and killed by id if they outlive it.
    """
    try:
        import psutil  # an ipykernel dependency, so present wherever kernels run

        children = psutil.Process(process.pid).children(recursive=True)
    except Exception:  # already gone, or no psutil: the server's own cleanup must do
        children = []
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    for child in children:
        try:
            child.wait(timeout=3)
        except Exception:
            try:
                child.kill()
            except Exception:
                pass  # exited in between

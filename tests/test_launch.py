"""`make lab` is safe to run: the live server (started by the same `lab_command`)
refuses requests without its token, listens on loopback only, and reaches for nothing
on the network (no news feed, no update check); and Ctrl-C in its terminal stops it
cleanly (its own shutdown, kernels closed, no traceback, no runtime files left).
No browser needed.

The network check is real, not a reading of the config: every Python process of the
server and its kernels gets an audit hook (a `sitecustomize` on PYTHONPATH) that logs
each DNS lookup or connection to anything but this machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import secrets
import socket
import subprocess
import sys
import termios
import textwrap
import threading
import time
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from lab_server import (
    free_port,
    http_status,
    isolated_env,
    running_lab,
    write_test_settings,
)
from paths import ROOT

from amp_lessons.teaching import self_study
from amp_lessons.tooling import lab as lab_launcher
from amp_lessons.tooling.lab import ROOT_NOTE

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="checks sockets the Linux way"
)

NET_AUDIT = '''\
"""Log every DNS lookup or connection that leaves this machine (test_launch.py)."""
import os
import sys

_LOG = os.environ.get("AMP_NET_LOG")
_LOCAL = {"127.0.0.1", "::1", "localhost", "0:0:0:0:0:0:0:1"}


def _audit(event, args):
    if event == "socket.getaddrinfo":
        host = args[0]
    elif event == "socket.connect":
        address = args[1]
        if not isinstance(address, tuple):
            return  # a unix socket: local by construction
        host = address[0]
    else:
        return
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host is None or str(host) in _LOCAL or str(host).startswith("127."):
        return
    with open(_LOG, "a") as log:
        log.write(f"{os.getpid()} {event} {host}\\n")


if _LOG:
    sys.addaudithook(_audit)
    with open(_LOG + ".hooked", "a") as hooked:  # proof this process is watched
        hooked.write(f"{os.getpid()}\\n")
'''


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("net-audit")
    (folder / "sitecustomize.py").write_text(NET_AUDIT)
    return folder


def audit_env(audit_dir: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(audit_dir), "AMP_NET_LOG": str(audit_dir / "net.log")}


def outbound(audit_dir: Path) -> list[str]:
    log = audit_dir / "net.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="module")
def lab(audit_dir):
    with running_lab(extra_env=audit_env(audit_dir)) as lab:
        yield lab


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=20) as response:
        return response.status, response.read().decode()


def post_status(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(
        url,
        data=b"{}",
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_requests_without_the_token_are_refused(lab):
    assert http_status(lab.url("/api/status")) == 403
    assert http_status(lab.url("/api/contents")) == 403
    assert http_status(lab.url("/api/status"), {"Authorization": "token wrong"}) == 403
    # the page itself sends a browser without the token to the login form
    assert http_status(lab.url("/lab")) == 302
    # ... and a request that changes state is refused outright (token or XSRF needed)
    assert post_status(lab.url("/api/kernels")) == 403


def test_requests_with_the_token_work(lab):
    assert http_status(lab.url("/api/status"), lab.auth) == 200
    assert http_status(lab.url("/lab", with_token=True)) == 200
    status, body = get(lab.url("/api/contents"), lab.auth)
    names = {item["name"] for item in json.loads(body)["content"]}
    assert "00_welcome.ipynb" in names  # served from the course's notebooks/


def listening_sockets(pid: int) -> list[tuple[str, int, int]]:
    """(ip, port, pid) of every listening TCP socket of `pid` and its children."""
    psutil = pytest.importorskip("psutil")
    server = psutil.Process(pid)
    found = []
    for process in [server, *server.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found += [
            (c.laddr.ip, c.laddr.port, process.pid)
            for c in connections
            if c.status == psutil.CONN_LISTEN
        ]
    return found


def test_server_and_kernels_listen_on_loopback_only(lab):
    kernel_status = post_status(lab.url("/api/kernels"), lab.auth)
    assert kernel_status == 201  # a kernel too: its five ZMQ ports must stay local
    deadline = time.monotonic() + 30
    while True:  # the kernel binds its ports as it starts up
        sockets = listening_sockets(lab.process.pid)
        kernel_ports = [s for s in sockets if s[2] != lab.process.pid]
        if len(kernel_ports) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ("127.0.0.1", lab.port) in {(ip, port) for ip, port, _ in sockets}
    assert len(kernel_ports) >= 5, sockets
    exposed = [s for s in sockets if s[0] != "127.0.0.1"]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_server_port_is_unreachable_from_this_machines_own_addresses(lab):
    psutil = pytest.importorskip("psutil")
    addresses = [
        a.address
        for nic in psutil.net_if_addrs().values()
        for a in nic
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    if not addresses:
        pytest.skip("this machine has no network address besides loopback")
    for address in addresses:
        with socket.socket() as sock:
            sock.settimeout(3)
            assert sock.connect_ex((address, lab.port)) != 0, address


def page_config(lab) -> dict:
    _, html = get(lab.url("/lab", with_token=True))
    found = re.search(
        r'<script id="jupyter-config-data" type="application/json">'
        r"(.*?)</script>",
        html,
        re.S,
    )
    assert found, "JupyterLab's page no longer carries its config"
    return json.loads(found.group(1))


def test_news_and_update_checks_are_off_and_nothing_leaves_the_machine(lab, audit_dir):
    assert page_config(lab)["news"] == {"disabled": True}
    _, news = get(lab.url("/lab/api/news"), lab.auth)
    _, update = get(lab.url("/lab/api/update"), lab.auth)
    assert json.loads(news) == {"news": []}
    assert json.loads(update) == {"notification": None}
    # the handlers above ran; a live news feed or update check would have looked up
    # jupyterlab.github.io or pypi.org and shown up here
    hooked = (audit_dir / "net.log.hooked").read_text().split()
    assert str(lab.process.pid) in hooked  # the server really ran with the audit hook
    assert outbound(audit_dir) == []


def test_network_audit_sees_a_lookup_the_way_jupyterlab_makes_it(audit_dir, tmp_path):
    # the proof the check above can fail: tornado's client (what the news and update
    # handlers use) looking up a host is logged
    env = {**audit_env(tmp_path), "PATH": "/usr/bin:/bin"}
    (tmp_path / "sitecustomize.py").write_text(NET_AUDIT)
    code = textwrap.dedent("""
        import asyncio
        from tornado.httpclient import AsyncHTTPClient

        async def fetch():
            try:
                await AsyncHTTPClient().fetch("http://news.invalid/feed.xml",
                                              request_timeout=5)
            except Exception:
                pass  # no such host (or no network): the lookup was still made

        asyncio.run(fetch())
    """)
    subprocess.run([sys.executable, "-c", code], env=env, timeout=60, check=True)
    assert any("news.invalid" in line for line in outbound(tmp_path))


UNSAFE = {
    "binds every interface": re.compile(
        r"0\.0\.0\.0|--ip[= ]['\"]?\*|ip\s*=\s*['\"]\*"
    ),
    "empty token or password": re.compile(
        r"(token|password)\s*=\s*(''|\"\"|\s*$|\s+-)", re.M | re.I
    ),
    "disables XSRF": re.compile(r"disable_check_xsrf", re.I),
    "allows any origin": re.compile(r"allow_origin\s*=\s*['\"]?\*"),
    "allows remote access": re.compile(r"allow_remote_access\s*=\s*True"),
}


def shipped_text_files() -> list[Path]:
    """Every tracked file a student reads or runs (tests spell the patterns out)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()]
    suffixes = {
        ".md",
        ".py",
        ".sh",
        ".yml",
        ".yaml",
        ".toml",
        ".txt",
        ".ipynb",
        ".cfg",
        ".json",
        "",
    }
    files = [
        ROOT / name
        for name in listed
        if not name.startswith(("tests/", ".")) or name.startswith(".ci/")
    ]
    return [
        p
        for p in files
        if p.is_file() and p.suffix in suffixes and p.stat().st_size < 2_000_000
    ]


def test_no_shipped_file_advertises_an_unsafe_launch():
    # test_repo.py checks README, Makefile, .ci/run and the package; this widens it to
    # every tracked file (notebooks included) and to more ways of opening the server
    offenders = []
    for path in shipped_text_files():
        text = path.read_text(errors="replace")
        for what, pattern in UNSAFE.items():
            if pattern.search(text):
                offenders.append(f"{path.relative_to(ROOT)}: {what}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize(
    "line",
    [
        "jupyter lab --ip=0.0.0.0",
        "jupyter lab --ip='*'",
        "c.ServerApp.token = ''",
        "--IdentityProvider.token= --no-browser",
        "c.ServerApp.disable_check_xsrf = True",
        "c.ServerApp.allow_origin = '*'",
        "c.ServerApp.allow_remote_access = True",
    ],
)
def test_unsafe_launch_patterns_catch_each_mistake(line):
    assert any(p.search(line) for p in UNSAFE.values()), line


# --- Ctrl-C in the terminal stops `make lab` cleanly ---------------------------------


def on_a_terminal(command, env, cwd):
    """Start `command` as a terminal's foreground job: its own session, with a pty as
    controlling terminal (so b"\\x03" written to the pty is a real Ctrl-C). Returns
    (process, master fd, the output read so far, as a list that keeps growing)."""
    master, slave = pty.openpty()

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        command,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=cwd,
        preexec_fn=controlling_terminal,
    )
    os.close(slave)
    output: list[bytes] = []

    def read():  # drain the pty, or the server blocks once its buffer is full
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every process holding the terminal has gone
                return
            if not chunk:
                return
            output.append(chunk)

    threading.Thread(target=read, daemon=True).start()
    return process, master, output


def test_ctrl_c_stops_the_lab_cleanly(tmp_path):
    # Ctrl-C printed a KeyboardInterrupt traceback, SIGKILLed the server after
    # 0.25 s and left its runtime files behind
    psutil = pytest.importorskip("psutil")
    env = isolated_env(tmp_path)
    write_test_settings(Path(env["JUPYTER_CONFIG_DIR"]))
    port, token = free_port(), secrets.token_hex(16)
    env.update(
        JUPYTER_TOKEN=token,
        JUPYTER_PORT=str(port),
        BROWSER="true",
        JUPYTER_PORT_RETRIES="0",
    )
    folder = tmp_path / "notebooks"
    folder.mkdir()
    command = [sys.executable, "-m", "amp_lessons.tooling.lab", str(folder)]
    launcher, master, output = on_a_terminal(command, env, tmp_path / "home")
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"token {token}"}
    started = []
    try:
        deadline = time.monotonic() + 120
        while http_status_or_none(base + "/api/status", auth) != 200:
            assert launcher.poll() is None, b"".join(output).decode(errors="replace")
            assert time.monotonic() < deadline, "JupyterLab did not start"
            time.sleep(0.3)
        kernel = start_kernel(base, auth)
        wait_until_ready(Path(env["JUPYTER_RUNTIME_DIR"]) / f"kernel-{kernel}.json")
        started = psutil.Process(launcher.pid).children(recursive=True)
        assert len(started) >= 2, started  # the server and its kernel
        os.write(master, b"\x03")  # Ctrl-C, as the terminal sends it
        time.sleep(0.5)
        os.write(master, b"\x03")  # and an impatient second one
        code = launcher.wait(timeout=120)
    finally:  # only if the test failed midway: end what it started, by id
        # (the server runs in its own session: killing the launcher alone would
        # leave it running, so its tree is collected first)
        with contextlib.suppress(psutil.Error):
            started += psutil.Process(launcher.pid).children(recursive=True)
        if launcher.poll() is None:
            launcher.kill()
        for process in started:
            with contextlib.suppress(psutil.Error):
                process.kill()
        launcher.wait(timeout=30)
        os.close(master)
    text = b"".join(output).decode(errors="replace")
    assert code == 0, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "Shutting down 1 kernel" in text, text  # JupyterLab's own shutdown
    assert "Shut down this Jupyter server" not in text  # no y/n prompt raced a kill
    assert not [
        p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]
    left = sorted(p.name for p in Path(env["JUPYTER_RUNTIME_DIR"]).iterdir())
    assert not [n for n in left if n.startswith(("jpserver-", "kernel-"))], left
    assert (ROOT_NOTE in " ".join(text.split())) == (os.geteuid() == 0)


# The launcher after a stop the user asked for: a stand-in lab that exits at once
# on SIGTERM, a Ctrl-C to stop it, then a second one after run_lab has returned (in
# a real terminal, the impatient second press that lands while Python exits)
LATE_CTRL_C = """
import os, signal, sys, threading
from amp_lessons.tooling.lab import run_lab
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
code = run_lab([sys.executable, "-c", "import time; time.sleep(60)"])
os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C
print("exit", code)
"""


def test_a_second_ctrl_c_while_the_launcher_exits_is_ignored():
    # it raised KeyboardInterrupt once the handlers were put back (and killed the
    # launcher with status 130 when it landed during the interpreter's exit)
    done = subprocess.run(
        [sys.executable, "-c", LATE_CTRL_C],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exit 0", done.stdout
    assert "JupyterLab stopped." in done.stderr
    assert "KeyboardInterrupt" not in done.stderr, done.stderr


def start_kernel(base, auth):
    request = urllib.request.Request(
        base + "/api/kernels",
        data=b"{}",
        method="POST",
        headers={"Content-Type": "application/json", **auth},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 201
        return json.loads(response.read())["id"]


def wait_until_ready(connection_file):
    """Wait until the kernel answers, as a notebook does before its first cell."""
    from jupyter_client import BlockingKernelClient

    deadline = time.monotonic() + 60
    while not connection_file.exists():
        assert time.monotonic() < deadline, "the kernel wrote no connection file"
        time.sleep(0.2)
    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=90)
    finally:
        client.stop_channels()


def http_status_or_none(url, headers):
    try:
        return http_status(url, headers)
    except OSError:
        return None  # not listening yet


def test_allow_root_is_added_as_root_only_and_said(monkeypatch, capsys, tmp_path):
    from amp_lessons.tooling import lab

    launched = []
    monkeypatch.setattr(lab, "run_lab", lambda command: launched.append(command) or 0)
    for uid, added in ((0, True), (1000, False)):
        monkeypatch.setattr(os, "geteuid", lambda uid=uid: uid)
        assert lab.main([str(tmp_path)]) == 0
        assert ("--allow-root" in launched[-1]) is added
        err = capsys.readouterr().err
        assert ("--allow-root" in err and "as root" in err) is added


def test_the_learners_lab_is_marked_on_your_own(monkeypatch, tmp_path):
    # make lab: no instructor grades there, so the kernels' checks grade everything
    monkeypatch.delenv(self_study.ENV, raising=False)
    seen = {}
    report = types.SimpleNamespace(folder=tmp_path, summary=lambda lang: "")
    monkeypatch.setattr(lab_launcher.learner_copy, "sync", lambda lang: report)
    monkeypatch.setattr(
        lab_launcher, "run_lab", lambda command: seen.update(os.environ) or 0
    )
    assert lab_launcher.open_learner_copy("en") == 0
    assert seen[self_study.ENV] == "1"


def test_the_learners_lab_leaves_nbgrader_server_side_out():
    command = lab_launcher.lab_command(learner=True)
    for extension in lab_launcher.NBGRADER_SERVER_EXTENSIONS:
        i = command.index(f"{extension}=False")
        assert command[i - 1] == "--ServerApp.jpserver_extensions"
    assert not any("jpserver_extensions" in a for a in lab_launcher.lab_command())
    # each edition's copy keeps its own open tabs: English ones never reopen in Spanish
    es = lab_launcher.lab_command(root_dir="my-course/es", learner=True)
    assert "--LabApp.workspaces_dir=my-course/es/.lab-workspaces" in es
    # every nbgrader server extension this venv enables is among them
    listed = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"],
        capture_output=True,
        text=True,
    )
    enabled = set(re.findall(r"(nbgrader\.server_extensions\.\w+)", listed.stderr))
    assert enabled and enabled <= set(lab_launcher.NBGRADER_SERVER_EXTENSIONS)

"""The kernel a submission is graded in: ipykernel behind a Python audit hook that
tells the grader, over a signed channel, what the student's code did and what each
check concluded.

The grader cannot trust a notebook's outputs: the student's code runs in the same
interpreter as the test cells and can hide an error (``get_ipython().showtraceback =
...``), replace a check, or swap a module. So this kernel, before any student code
runs, imports the course package, snapshots every loaded module's namespace, and
installs an audit hook (PEP 578; it cannot be removed). Each check's engine raises
``amp_lessons.check`` with its verdict; the hook accepts it only from the real engine
called by a real check, with every snapshotted module unchanged and no frame, gc,
ctypes or tracing access by student code while the check ran. The hook also reports
student code that writes outside its folder, opens the gradebook, a notebook or the
course package's files, starts processes, uses the network, ctypes or gc, or patches
classes. Each report is one line, ``HMAC-SHA256 hex + " " + JSON``, written at once
to a FIFO the grader reads from outside the sandbox; the key never reaches student
code (its file is deleted before the first cell runs), so a forged line does not
verify and is itself evidence.

"Student code" is any frame whose file is not a library file (the venv, the Python
installation, the course package) and not one of the course's own cells, which the
grader names in advance (ipykernel names a cell's file after a hash of its source).

The hook never calls student code: it touches only exact ``str``/``bytes``/``int``
values, C functions captured before the first cell, and frames.

Not covered here: what the grader does with the reports (``review``); anything done
outside Python (a C extension built at run time is seen only as ctypes or a process).

Example (run by the sandbox's kernelspec; never by hand)::

    python -m amp_lessons.tooling.grading.guard -f /tmp/kernel-1.json
"""

from __future__ import annotations

import json
import os
import sys

CONFIG_ENV = "AMP_GUARD_CONFIG"  # path of the JSON config the runner writes
CHECK_START = "amp_lessons.check.start"  # raised by checks._engine.grade: (title,)
CHECK_DONE = "amp_lessons.check"  # ... and at its end: (title, hidden, passed)
MAX_RECORDS = 400  # evidence lines per notebook; later ones are counted, not sent

# Always worth a look when student code does them.
_PROCESS = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
    "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg",
    "signal.pthread_kill", "os.startfile",
})
_NETWORK = frozenset({
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
    "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request",
    "http.client.connect",
})
_INTERNALS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace",
    "sys.setprofile", "sys.addaudithook", "sys._current_frames",
    "sys._current_exceptions", "code.__new__", "sqlite3.connect", "marshal.loads",
    "os.chdir", "os.chroot",
})
_FILE_CHANGES = frozenset({
    "os.remove", "os.rename", "os.rmdir", "os.chmod", "os.chown", "os.truncate",
    "os.link", "os.symlink", "os.utime", "shutil.rmtree", "shutil.move",
    "os.mkdir", "os.chflags",
})
# Frame access: normal in libraries, so it only counts while a check is running
# (then the student's function could rewrite the check's rows through frames).
_FRAMES = frozenset({"sys._getframe", "object.__getattr__"})
# Paths no student code has a reason to open.
_SECRET_MARKS = ("gradebook", ".db", ".ipynb", "/source/", "/submitted/",
                 "/autograded/", "/release/", "/feedback/", "nbgrader_config",
                 "/.amp-guard", "/evidence")
_WRITE_MODES = ("w", "a", "x", "+")


def cell_names(sources: list[str]) -> list[str]:
    """The file names ipykernel gives these cells in this process (a hash each)."""
    from ipykernel.compiler import get_file_name

    return [get_file_name(source) for source in sources]


def _library_roots(package_root: str) -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             package_root}
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


# The modules a check's verdict depends on: the course, torch, and the standard
# library it calls. Others (ipykernel, asyncio, tempfile ...) rebind their own
# globals while the kernel runs.
WATCHED = ("amp_lessons", "torch", "numpy", "math", "cmath", "builtins", "warnings",
           "contextlib", "textwrap", "numbers", "dataclasses", "functools",
           "collections", "operator", "itertools", "types", "copy", "json", "hashlib",
           "ast", "pathlib", "posixpath", "os", "io", "re", "typing", "struct",
           "random", "fractions", "decimal", "statistics", "inspect", "abc", "enum",
           "traceback", "linecache", "importlib")
# builtins that IPython and ipykernel set per cell (input is forwarded to the client)
VOLATILE_BUILTINS = frozenset({"input", "quit", "exit", "get_ipython", "display",
                               "_", "__", "___", "__IPYTHON__", "help", "copyright",
                               "credits", "license", "breakpoint"})


def take_snapshot() -> dict[str, tuple[object, dict]]:
    """Each watched module and a copy of its namespace."""
    snapshot = {}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in WATCHED and type(module).__name__ == "module":
            namespace = dict(vars(module))
            if name == "builtins":
                for key in VOLATILE_BUILTINS:
                    namespace.pop(key, None)
            snapshot[name] = (module, namespace)
    return snapshot


def make_hook(config: dict, snapshot: dict, grade, check_codes: frozenset, write):
    """The audit hook. ``grade`` is the real ``checks._engine.grade``; ``check_codes``
    every code object of the checks package; ``write(bytes)`` sends one line."""
    import _hashlib
    import _json
    import _thread
    import builtins
    import types

    key = bytes.fromhex(config["key"])
    hmac_digest, quote = _hashlib.hmac_digest, _json.encode_basestring_ascii
    getframe, get_ident = sys._getframe, _thread.get_ident
    modules, builtins_dict = sys.modules, vars(builtins)
    sys_dict, audit = vars(sys), sys.audit
    function_type = types.FunctionType
    grade_code, grade_globals = grade.__code__, grade.__globals__
    test_cells = dict(zip(cell_names(list(config["test_cells"].values())),
                          (int(i) for i in config["test_cells"]), strict=True))
    course = frozenset(cell_names(config["course_cells"])) | frozenset(test_cells)
    cell_prefix = cell_names([""])[0].rsplit("/", 1)[0] + "/"
    libraries = _library_roots(config["package_root"])
    workdir = os.path.join(config["workdir"], "")
    package = os.path.join(os.path.realpath(config["package_root"]), "amp_lessons", "")
    protected = tuple(os.path.join(p, "") for p in config.get("protected", ()))
    writable = (workdir, "/tmp/", "/dev/null", "/dev/shm/")
    busy: set[int] = set()
    checks: dict[int, list[str]] = {}  # thread -> what tainted the running check
    sent = [0, 0]  # records sent, records dropped

    def encode(value) -> str:
        if value is True or value is False:
            return "true" if value else "false"
        if type(value) is int:
            return str(value)
        if type(value) is str:
            return quote(value[:300])
        if type(value) is list:
            return "[" + ",".join(encode(v) for v in value[:20]) + "]"
        return quote("?")

    def send(record: dict) -> None:
        if sent[0] >= MAX_RECORDS:
            sent[1] += 1
            return
        sent[0] += 1
        record["seq"] = sent[0]
        payload = "{" + ",".join(quote(k) + ":" + encode(v)
                                 for k, v in record.items()) + "}"
        data = payload.encode()
        write((hmac_digest(key, data, "sha256").hex() + " ").encode() + data + b"\n")

    def text(value) -> str:
        if type(value) is str:
            return value
        if type(value) is bytes:
            return value.decode("utf-8", "replace")
        if type(value) is int:
            return f"<fd {value}>"
        return "<" + type(value).__name__ + ">"

    def absolute(path: str) -> str:
        if not str.startswith(path, "/"):
            path = workdir + path
        parts: list[str] = []
        for part in str.split(path, "/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def student_frame(depth: int, innermost_only: bool = False) -> str | None:
        """The file of the first student frame on the stack, or None."""
        frame = getframe(depth)
        while frame is not None:
            name = frame.f_code.co_filename
            if type(name) is not str:
                return "<odd file name>"
            if name not in course and (str.startswith(name, cell_prefix) or not (
                    str.startswith(name, libraries) or str.startswith(name, "<"))):
                return name
            if innermost_only:
                return None
            frame = frame.f_back
        return None

    def test_cell() -> int | None:
        frame = getframe(3)
        while frame is not None:
            name = frame.f_code.co_filename
            if type(name) is str and name in test_cells:
                return test_cells[name]
            frame = frame.f_back
        return None

    def changes() -> list[str]:
        found = []
        for name, (module, namespace) in snapshot.items():
            if dict.get(modules, name) is not module:
                found.append(f"sys.modules[{name!r}] replaced")
            now = vars(module)
            for attr, value in namespace.items():
                if dict.get(now, attr, changes) is not value:
                    found.append(f"{name}.{attr} replaced")
                    if len(found) > 10:
                        return found
        if dict.get(sys_dict, "audit") is not audit:
            found.append("sys.audit replaced")
        if dict.get(sys_dict, "modules") is not modules:
            found.append("sys.modules replaced")
        return found

    def verdict(args) -> None:
        caller = getframe(2)
        check = caller.f_back
        title, hidden, passed = (args + (None, None, None))[:3]
        make_rows = dict.get(caller.f_locals, "make_rows")
        genuine = (
            caller.f_code is grade_code and caller.f_globals is grade_globals
            and caller.f_builtins is builtins_dict and check is not None
            and check.f_code in check_codes and type(title) is str
            and check.f_code.co_name == title
            and type(make_rows) is function_type and make_rows.__code__ in check_codes)
        tainted = checks.pop(get_ident(), [])
        send({"kind": "check", "cell": test_cell(), "title": text(title),
              "hidden": hidden is True, "passed": passed is True,
              "genuine": genuine, "changed": changes(), "tainted": tainted[:5]})

    def hook(event: str, args: tuple) -> None:
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            if event == CHECK_DONE:
                verdict(args)
            elif event == CHECK_START:
                checks[me] = []
            elif event in _FRAMES:
                if me in checks and student_frame(2):
                    what = event if event == "sys._getframe" else text(args[1])
                    checks[me].append(what)
            else:
                flag(event, args)
        except BaseException:  # never break the event, never show a hook frame
            pass
        finally:
            busy.discard(me)

    def flag(event: str, args: tuple) -> None:
        detail = None
        if event == "open":
            path = absolute(text(args[0])) if type(args[0]) in (str, bytes) else ""
            mode = args[1] if type(args[1]) is str else ""
            writes = any(m in mode for m in _WRITE_MODES) or (
                type(args[2]) is int and args[2] & (os.O_WRONLY | os.O_RDWR))
            if writes and not str.startswith(path, writable):
                detail = f"writes {path}"
            elif any(m in path for m in _SECRET_MARKS) or str.startswith(
                    path, protected) or str.startswith(path, package) or (
                    str.startswith(path, "/proc/") and
                    any(m in path for m in ("/mem", "/environ", "/fd", "/maps"))):
                detail = f"opens {path}"
        elif event in _PROCESS or event in _NETWORK or event in _INTERNALS or (
                str.startswith(event, "ctypes.")):
            detail = event + " " + " ".join(text(a) for a in args[:2])
        elif event in _FILE_CHANGES:
            path = absolute(text(args[0])) if args and type(args[0]) in (str, bytes) \
                else "?"
            if not str.startswith(path, writable):
                detail = f"{event} {path}"
        elif event in ("object.__setattr__", "object.__delattr__"):
            target, name = args[0], args[1]
            if type(target) is type or type(target) is function_type:
                detail = f"{event} {text(name)} on {type(target).__name__} " + (
                    target.__qualname__ if type(target.__qualname__) is str else "?")
        elif event in ("exec", "compile"):
            if student_frame(3, innermost_only=True):
                detail = f"{event}() called by student code"
        if detail is None:
            return
        where = student_frame(3)
        if where is not None:
            running = checks.get(get_ident())
            if running is not None:
                running.append(detail)
            send({"kind": "event", "event": event, "detail": detail, "cell": where})

    send({"kind": "hello", "pid": os.getpid()})
    return hook


def _open_channel(fifo: str):
    fd = os.open(fifo, os.O_WRONLY | os.O_CLOEXEC)
    first = os.fstat(fd)
    os_write, os_fstat = os.write, os.fstat

    def write(data: bytes) -> None:
        nonlocal fd
        try:
            now = os_fstat(fd)
            if (now.st_ino, now.st_dev) != (first.st_ino, first.st_dev):
                raise OSError("replaced")
        except OSError:  # closed or replaced by student code: open it again
            fd = os.open(fifo, os.O_WRONLY | os.O_CLOEXEC)
        os_write(fd, data)

    return write


def main() -> None:
    """Read and delete the config, snapshot, install the hook, become the kernel."""
    path = os.environ.pop(CONFIG_ENV)
    with open(path) as f:
        config = json.load(f)
    os.unlink(path)
    import amp_lessons.checks  # noqa: F401  (and torch: what the checks rely on)
    from amp_lessons.checks import _engine
    from ipykernel import kernelapp

    check_codes = set()
    for name, module in list(sys.modules.items()):
        if name.startswith("amp_lessons.checks"):
            for value in vars(module).values():
                stack = [getattr(value, "__code__", None)]
                while stack:
                    code = stack.pop()
                    if isinstance(code, type(main.__code__)):
                        check_codes.add(code)
                        stack += [c for c in code.co_consts
                                  if isinstance(c, type(main.__code__))]
    hook = make_hook(config, take_snapshot(), _engine.grade, frozenset(check_codes),
                     _open_channel(config["fifo"]))
    sys.addaudithook(hook)
    del config, hook
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()

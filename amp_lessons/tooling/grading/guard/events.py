"""The guard's events: which audit events are evidence when student code raises
them, and what each record says it did.

Some always are (starting processes, using the network, reading the interpreter's
internals: ``_PROCESS``, ``_NETWORK``, ``_INTERNALS``, and every ``ctypes.*``); others
only with arguments that say so (``make_event_details``): writing outside the
notebook's folder or writing code anywhere, opening the gradebook, a notebook, the
course package or another process's ``/proc`` files, changing files, patching a
class. Paths are resolved as text (``make_path_resolver``), never by asking the file
system, so a student's path cannot make the guard run anything. ``make_event_routes``
turns these into the hook's routes: each walks the stack (``stacks``) and reports
only what student code did.

Example::

    details = make_event_details(config)
    details["open"]("open", ("/srv/course/gradebook.db", "r", 0))
    # -> "opens /srv/course/gradebook.db"
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from amp_lessons.tooling.grading.guard.channel import make_text_readers
from amp_lessons.tooling.grading.guard.stacks import RAISER

# Always worth a look when student code does them.
_PROCESS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "pty.spawn",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "os.startfile",
    }
)
_NETWORK = frozenset(
    {
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "urllib.Request",
        "http.client.connect",
    }
)
_INTERNALS = frozenset(
    {
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "sys._current_frames",
        "sys._current_exceptions",
        "code.__new__",
        "sqlite3.connect",
        "marshal.loads",
        "os.chdir",
        "os.chroot",
    }
)
_FILE_CHANGES = frozenset(
    {
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.link",
        "os.symlink",
        "os.utime",
        "shutil.rmtree",
        "shutil.move",
        "os.mkdir",
        "os.chflags",
    }
)
# Paths no student code has a reason to open.
_SECRET_MARKS = (
    "gradebook",
    ".db",
    ".ipynb",
    "/source/",
    "/submitted/",
    "/autograded/",
    "/release/",
    "/feedback/",
    "nbgrader_config",
    "/.amp-guard",
    "/evidence",
)
_PROC_MARKS = ("/mem", "/environ", "/fd", "/maps")  # /proc/<pid>/...: another process
_WRITE_MODES = ("w", "a", "x", "+")
_CODE_FILES = (".py", ".pyc", ".so")  # written, then imported as if a library's


# Each make_* runs before student code; the functions it returns use only what it
# bound then (builtins included, as locals): never a global (tests/test_sandbox.py).


def make_path_resolver(workdir: str) -> Callable[[str], str]:
    """``absolute(path)``: ``path`` from ``workdir`` with ``.`` and ``..`` resolved
    as text (the file system is not asked, so a student's path cannot make it
    run anything)."""
    workdir = os.path.join(workdir, "")
    startswith, split = str.startswith, str.split

    def absolute(path: str) -> str:
        if not startswith(path, "/"):
            path = workdir + path
        parts: list[str] = []
        for part in split(path, "/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    return absolute


def make_argument_path(workdir: str) -> Callable[[tuple], str | None]:
    """``path_of(args)``: the absolute path ``args[0]`` names (``make_path_resolver``),
    or None when it is not a str or bytes (a file descriptor)."""
    _type, _str, _bytes = type, str, bytes
    text, _ = make_text_readers()
    absolute = make_path_resolver(workdir)

    def path_of(args: tuple) -> str | None:
        if args and (_type(args[0]) is _str or _type(args[0]) is _bytes):
            return absolute(text(args[0]))
        return None

    return path_of


def _writable(config: dict) -> tuple[str, ...]:
    """Where student code may write: its folder, /tmp, /dev/null, /dev/shm."""
    return (os.path.join(config["workdir"], ""), "/tmp/", "/dev/null", "/dev/shm/")


def make_open_detail(config: dict) -> Callable:
    """``opening(event, args)`` for ``open``: writing code (a ``.py``, ``.pyc``,
    ``.so``) anywhere, writing outside ``_writable``, or opening a secret (the
    gradebook, a notebook, the course's folders), a protected folder, the course
    package or another process's /proc files; None for anything else."""
    _type, _str, _int, _any = type, str, int, any
    startswith, endswith = str.startswith, str.endswith
    path_of = make_argument_path(config["workdir"])
    package = os.path.join(os.path.realpath(config["package_root"]), "amp_lessons", "")
    protected = tuple(os.path.join(p, "") for p in config.get("protected", ()))
    writable, write_flags = _writable(config), os.O_WRONLY | os.O_RDWR
    secret_marks, proc_marks = _SECRET_MARKS, _PROC_MARKS
    write_modes, code_files = _WRITE_MODES, _CODE_FILES

    def opening(event: str, args: tuple) -> str | None:
        path = path_of(args) or ""
        mode = args[1] if _type(args[1]) is _str else ""
        writes = _any([m in mode for m in write_modes]) or (
            _type(args[2]) is _int and args[2] & write_flags
        )
        if writes and endswith(path, code_files):
            return f"writes code to {path}"  # to import it as a library?
        if writes and not startswith(path + "/", writable):
            return f"writes {path}"
        if (
            _any([m in path for m in secret_marks])
            or startswith(path, protected)
            or startswith(path, package)
            or (startswith(path, "/proc/") and _any([m in path for m in proc_marks]))
        ):
            return f"opens {path}"
        return None

    return opening


def make_event_details(config: dict) -> dict[str, Callable]:
    """Event name -> ``detail(event, args)``: what the event does that is evidence
    when student code does it, or None (a read of a library file, a write in the
    notebook's folder or /tmp ...). Paths are resolved as text."""
    import types

    _type, _str, function_type = type, str, types.FunctionType
    startswith = str.startswith
    text, _ = make_text_readers()
    path_of, writable = make_argument_path(config["workdir"]), _writable(config)

    def listing(event: str, args: tuple) -> str | None:
        path = path_of(args)
        if (
            path is not None
            and startswith(path, "/proc/")
            and not startswith(path, "/proc/self")
        ):
            return f"lists {path}"
        return None

    def file_change(event: str, args: tuple) -> str | None:
        path = path_of(args) or "?"
        return None if startswith(path + "/", writable) else f"{event} {path}"

    def class_patch(event: str, args: tuple) -> str | None:
        target, name = args[0], args[1]
        if _type(target) is _type or _type(target) is function_type:
            qualname = target.__qualname__
            return f"{event} {text(name)} on " + (
                qualname if _type(qualname) is _str else "?"
            )
        return None

    details = dict.fromkeys(_FILE_CHANGES, file_change)
    details.update(
        {
            "open": make_open_detail(config),
            "os.listdir": listing,
            "os.scandir": listing,
            "object.__setattr__": class_patch,
            "object.__delattr__": class_patch,
        }
    )
    return details


def make_event_routes(
    config: dict, stack: tuple, send: Callable, taints: dict
) -> tuple[dict[str, Callable], Callable]:
    """``(routes, always)``: event name -> route for every event that is evidence
    when student code raises it, and the route of those that always are (processes,
    network, internals; the hook sends ``ctypes.*`` there too).

    A route reports ``{"kind": "event", "event", "detail", "cell"}`` (``cell``: the
    student frame's file) and adds the detail to the taints of a check running in
    this thread. Where a detail may be None (``make_event_details``) it is worked out
    before the stack is walked; where it never is, the walk comes first, and the
    detail is written only for student code. ``exec`` and ``compile`` count when
    student code calls them itself (imports exec every module).
    """
    import _thread

    get_ident, getframe, raiser = _thread.get_ident, sys._getframe, RAISER
    student_file = stack[0]
    _, clipped = make_text_readers()

    def report(event: str, detail: str, where: str) -> None:
        running = taints.get(get_ident())
        if running is not None:
            running.append(detail)
        send({"kind": "event", "event": event, "detail": detail, "cell": where})

    def checked_first(detail_of: Callable) -> Callable:
        def route(event: str, args: tuple) -> None:
            detail = detail_of(event, args)
            if detail is not None:
                where = student_file(getframe(raiser))
                if where is not None:
                    report(event, detail, where)

        return route

    def always(event: str, args: tuple) -> None:
        where = student_file(getframe(raiser))
        if where is not None:
            report(event, event + " " + " ".join([clipped(a) for a in args[:2]]), where)

    def code_execution(event: str, args: tuple) -> None:
        frame = getframe(raiser)
        where = student_file(frame, frame.f_back)  # the caller itself, not below
        if where is not None:
            report(event, f"{event}() called by student code", where)

    routes = {"exec": code_execution, "compile": code_execution}
    routes.update(
        {
            event: checked_first(detail_of)
            for event, detail_of in make_event_details(config).items()
        }
    )
    routes.update(dict.fromkeys(_PROCESS | _NETWORK | _INTERNALS, always))
    return routes, always

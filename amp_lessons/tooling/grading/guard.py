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
values, C functions captured before the first cell, and frames. It is built from
parts, each made by a ``make_*`` function before student code runs and each testable
alone: the signed channel (``make_sender``), the stack (``make_stack_reader``), the
snapshot's watch (``make_tamper_watch``), the checks' verdicts (``make_check_watch``)
and the events that are evidence (``make_event_routes``). A part's functions look up
no global or builtin name at run time (tests/test_sandbox.py checks it), so
rebinding ``builtins.any`` or this module's globals changes nothing in them.

It has to be cheap: a lesson raises some 18,000 audit events, and walking the stack
for the few that need it read 700,000 frames, each read (``frame.f_code``) one more
event. So the hook looks an event's name up once, in a dict of the few dozen that
matter, and returns at once for the rest; frame reads count only while a check
runs; a walk remembers each file's verdict and the clean frames of the stack, and
reads only the frames above the last one it knows (``make_clean_stacks``).

Not covered here: what the grader does with the reports (``review``); anything done
outside Python (a C extension built at run time is seen only as ctypes or a process).

Example (run by the sandbox's kernelspec; never by hand)::

    python -m amp_lessons.tooling.grading.guard -f /tmp/kernel-1.json
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

CONFIG_ENV = "AMP_GUARD_CONFIG"  # path of the JSON config the runner writes
MAX_RECORDS = 400  # evidence lines per notebook; later ones are dropped
TEXT_LIMIT = 300  # characters of one string in a record
LIST_LIMIT = 20  # items of one list in a record
KNOWN_FILES = 4096  # file names whose verdict (student code or not) a walk remembers
CLEAN_FRAMES = 2048  # frames per thread known to have no student frame below them
# co_flags of code whose frame can be suspended and resumed under another caller:
# generators, coroutines, iterable coroutines, async generators (inspect.CO_*)
_RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200
# The frames a walk remembers: module bodies (cells, imported modules) and the import
# system's, which lie under most walks; a function's frame could hold a large object
# (a batch, a model) past its return, so none is kept
_IMPORT_SYSTEM = "<frozen importlib."
# getframe() depth of the code that raised an event, seen from a route function: the
# route is called by the hook, which is called by the code raising the event
RAISER = 2

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
# Frame access: normal in libraries, so it only counts while a check is running
# (then the student's function could rewrite the check's rows through frames).
_FRAMES = frozenset({"sys._getframe", "object.__getattr__"})
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


def cell_names(sources: list[str]) -> list[str]:
    """The file names ipykernel gives these cells in this process (a hash each)."""
    from ipykernel.compiler import get_file_name

    return [get_file_name(source) for source in sources]


def _library_roots(package_root: str) -> tuple[str, ...]:
    """Where library code lives: the Python installation, the venv, the course
    package, and the code torch.compile generates (student code writing a ``.py``
    anywhere is reported)."""
    import tempfile

    roots = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        package_root,
    }
    found = sorted(os.path.join(os.path.realpath(r), "") for r in roots if r)
    return (*found, os.path.join(tempfile.gettempdir(), "torchinductor_"))


# The modules a check's verdict depends on: the course, torch, and the standard
# library it calls. Others (ipykernel, asyncio, tempfile ...) rebind their own
# globals while the kernel runs.
WATCHED = (
    "amp_lessons",
    "torch",
    "numpy",
    "math",
    "cmath",
    "builtins",
    "warnings",
    "contextlib",
    "textwrap",
    "numbers",
    "dataclasses",
    "functools",
    "collections",
    "operator",
    "itertools",
    "types",
    "copy",
    "json",
    "hashlib",
    "ast",
    "pathlib",
    "posixpath",
    "os",
    "io",
    "re",
    "typing",
    "struct",
    "random",
    "fractions",
    "decimal",
    "statistics",
    "inspect",
    "abc",
    "enum",
    "traceback",
    "linecache",
    "importlib",
)
# builtins that IPython and ipykernel set per cell (input is forwarded to the client)
VOLATILE_BUILTINS = frozenset(
    {
        "input",
        "quit",
        "exit",
        "get_ipython",
        "display",
        "_",
        "__",
        "___",
        "__IPYTHON__",
        "help",
        "copyright",
        "credits",
        "license",
        "breakpoint",
    }
)


def _watched_classes() -> tuple:
    import torch

    return (
        torch.Tensor,
        torch.nn.Module,
        torch.optim.Optimizer,
        torch.amp.GradScaler,
        torch.autocast,
    )


# Outside the course package, a module-level flag or cache (a bool, a dict, None
# that later holds a module) is rebound by the library itself: only the functions,
# classes, modules and other objects (dtypes ...) there must keep their identity.
_CACHE_TYPES = (bool, int, float, str, bytes, type(None), dict, list, tuple, set)


def take_snapshot() -> dict[str, tuple[object, dict]]:
    """Each watched module and a copy of the names in it that must not change."""
    snapshot = {}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in WATCHED and type(module).__name__ == "module":
            namespace = dict(vars(module))
            if name == "builtins":
                for key in VOLATILE_BUILTINS:
                    namespace.pop(key, None)
            if name.split(".")[0] != "amp_lessons":
                namespace = {
                    k: v for k, v in namespace.items() if type(v) not in _CACHE_TYPES
                }
            snapshot[name] = (module, namespace)
    return snapshot


# ---------------------------------------------------------------------------------
# The hook's parts. Each make_* runs before student code; the functions it returns
# use only what it bound then (builtins included, as locals): never a global.


def make_sender(
    key: bytes, write: Callable[[bytes], None], max_records: int = MAX_RECORDS
) -> Callable[[dict], None]:
    """``send(record)``: writes one line, ``HMAC-SHA256(key) hex + " " + JSON``, with
    the record's ``seq`` (1, 2, ...) added; after ``max_records`` lines the rest are
    dropped. Values are written as JSON when they are bool, int, str (cut to
    TEXT_LIMIT characters), None or a list of those (cut to LIST_LIMIT items), and
    as ``"?"`` otherwise."""
    import _hashlib
    import _json

    _type, _str, _int, _list = type, str, int, list
    hmac_digest, quote = _hashlib.hmac_digest, _json.encode_basestring_ascii
    text_limit, list_limit = TEXT_LIMIT, LIST_LIMIT
    sent = [0]

    def encode(value) -> str:
        if value is True or value is False:
            return "true" if value else "false"
        if _type(value) is _int:
            return _str(value)
        if _type(value) is _str:
            return quote(value[:text_limit])
        if _type(value) is _list:
            return "[" + ",".join([encode(v) for v in value[:list_limit]]) + "]"
        if value is None:
            return "null"
        return quote("?")

    def send(record: dict) -> None:
        if sent[0] >= max_records:
            return
        sent[0] += 1
        record["seq"] = sent[0]
        payload = (
            "{"
            + ",".join([quote(k) + ":" + encode(v) for k, v in record.items()])
            + "}"
        )
        data = payload.encode()
        write((hmac_digest(key, data, "sha256").hex() + " ").encode() + data + b"\n")

    return send


def make_text_readers() -> tuple[Callable, Callable]:
    """``(text, clipped)``: ``text(value)`` is a str as it is, bytes decoded (UTF-8,
    errors replaced), an int in digits, anything else ``"<object>"`` (so no code of
    the value's own runs); ``clipped(value)`` is its first TEXT_LIMIT characters, all
    a record keeps, decoding no more bytes than those need (``marshal.loads`` gets a
    whole module's bytecode)."""
    _type, _str, _bytes, _int = type, str, bytes, int
    text_limit = TEXT_LIMIT
    byte_limit = 4 * TEXT_LIMIT + 4  # a UTF-8 character is at most 4 bytes

    def text(value) -> str:
        if _type(value) is _str:
            return value
        if _type(value) is _bytes:
            return value.decode("utf-8", "replace")
        if _type(value) is _int:
            return _str(value)
        return "<object>"

    def clipped(value) -> str:
        if _type(value) is _bytes:
            value = value[:byte_limit]
        return text(value)[:text_limit]

    return text, clipped


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


def make_clean_stacks(limit: int = CLEAN_FRAMES) -> tuple[Callable, Callable, Callable]:
    """``(positions, remember, forget)``: for each thread, the frames of its stack
    known to have no student frame at or below them, bottom first.

    Sound: a plain function's frame (not a generator's or a coroutine's, which can
    be resumed under another caller) keeps the frames below it for as long as it
    runs, and is never run again once it returns; so a known frame met again on the
    stack still has the frames below it that were walked. Worth it: the events of
    one import come from one stack some 100 frames deep, and each walk now reads only
    the frames above the last known one. The frames are held until the next walk in
    the thread moves past them, or ``forget``.

    ``positions(thread)``: frame -> index, a dict (empty when none is known).
    ``remember(thread, hit, walked)``: a walk found no student frame; it ended at the
    known frame of index ``hit`` (None: at the bottom of the stack), and ``walked``
    are the plain frames above that one, top first. ``forget(thread)``.
    """
    _len, _reversed = len, reversed
    stacks: dict[int, tuple[list, dict]] = {}
    stacks_get, none_known = stacks.get, {}

    def positions(me: int) -> dict:
        known = stacks_get(me)
        return none_known if known is None else known[1]

    def remember(me: int, hit: int | None, walked: list) -> None:
        known = stacks_get(me)
        if known is None or hit is None:
            order, index = [], {}
        else:  # the frames above the hit have returned since: not on this stack
            order, index = known
            for gone in order[hit + 1 :]:
                del index[gone]
            del order[hit + 1 :]
        for frame in _reversed(walked):
            index[frame] = _len(order)
            order.append(frame)
        if _len(order) > limit:
            stacks.pop(me, None)
        else:
            stacks[me] = (order, index)

    def forget(me: int) -> None:
        stacks.pop(me, None)

    return positions, remember, forget


def _test_cell_files(config: dict) -> dict[str, int]:
    """The file name of each graded test cell -> its index in the notebook."""
    return dict(
        zip(
            cell_names(list(config["test_cells"].values())),
            (int(i) for i in config["test_cells"]),
            strict=True,
        )
    )


def make_file_judge(
    config: dict, libraries: tuple[str, ...]
) -> tuple[Callable, Callable]:
    """``(known, judge)``: ``judge(name)`` says whether a file (an exact str) is
    student code and remembers it (KNOWN_FILES names); ``known(name)`` is what it
    said, or None. A cell's file is student code unless the course named it; any
    other file is unless it is a library's or made up (``<string>``)."""
    _len, startswith = len, str.startswith
    course = frozenset(cell_names(config["course_cells"])) | frozenset(
        _test_cell_files(config)
    )
    cell_prefix = cell_names([""])[0].rsplit("/", 1)[0] + "/"
    verdicts: dict[str, bool] = {}
    limit = KNOWN_FILES

    def judge(name: str) -> bool:
        student = name not in course and (
            startswith(name, cell_prefix)
            or not (startswith(name, libraries) or startswith(name, "<"))
        )
        if _len(verdicts) < limit:
            verdicts[name] = student
        return student

    return verdicts.get, judge


def make_stack_reader(
    config: dict, libraries: tuple[str, ...]
) -> tuple[Callable, Callable, Callable]:
    """``(student_file, test_cell, forget)``, which read the stack from a frame down.

    ``student_file(frame, stop=None)``: the file of the first student frame, or None;
    the walk ends before ``stop`` (``student_file(frame, frame.f_back)`` looks at
    ``frame`` alone). A file whose name is not an exact str is ``"<odd file
    name>"``, student code. Files' verdicts are remembered (``make_file_judge``), and
    so are the clean module-body and import-system frames of the thread's stack
    (``make_clean_stacks``): a walk reads a frame's code only above the last known
    one. ``test_cell(frame)``: the
    index of the first graded test cell on the way, or None. ``forget(thread)`` lets
    go of the frames known in that thread.
    """
    import _thread

    _type, _str, get_ident, resumable = type, str, _thread.get_ident, _RESUMABLE
    startswith, import_system = str.startswith, _IMPORT_SYSTEM
    test_cells = _test_cell_files(config)
    known, judge = make_file_judge(config, libraries)
    positions, remember, forget = make_clean_stacks()

    def student_file(frame, stop=None) -> str | None:
        me = get_ident()
        position = positions(me).get
        walked, hit = [], None
        while frame is not None and frame is not stop:
            hit = position(frame)  # frames hash by identity: no student code runs
            if hit is not None:
                break
            code = frame.f_code
            name = code.co_filename
            if _type(name) is not _str:
                return "<odd file name>"
            student = known(name)
            if student is None:
                student = judge(name)
            if student:
                return name
            if not code.co_flags & resumable and (
                code.co_name == "<module>" or startswith(name, import_system)
            ):
                walked.append(frame)
            frame = frame.f_back
        if stop is None or hit is not None:  # all the way down: all of it is clean
            remember(me, hit, walked)
        return None

    def test_cell(frame) -> int | None:
        while frame is not None:
            name = frame.f_code.co_filename
            if _type(name) is _str and name in test_cells:
                return test_cells[name]
            frame = frame.f_back
        return None

    return student_file, test_cell, forget


def make_fingerprint() -> Callable:
    """``fingerprint(value, budget)``: the contents of plain data (str, int, bytes,
    None, bool, float, and lists, tuples and dicts of them), the identity of anything
    else; ``budget`` (``[n]``) caps how many values it reads. No code of the value's
    own runs."""
    _type, _str, _int, _bytes, _float = type, str, int, bytes, float
    _list, _tuple, _dict, _id, none_type = list, tuple, dict, id, type(None)
    float_repr, dict_items = float.__repr__, dict.items

    def fingerprint(value, budget: list) -> object:
        budget[0] -= 1
        kind = _type(value)
        if budget[0] < 0:
            return ("id", _id(value))
        if (
            kind is _str
            or kind is _int
            or kind is _bytes
            or kind is none_type
            or value is True
            or value is False
        ):
            return (kind, value)
        if kind is _float:
            return (kind, float_repr(value))
        if kind is _list or kind is _tuple:
            return (kind, _id(value), _tuple([fingerprint(v, budget) for v in value]))
        if kind is _dict:
            return (
                kind,
                _id(value),
                _tuple(
                    [
                        (fingerprint(k, budget), fingerprint(v, budget))
                        for k, v in dict_items(value)
                    ]
                ),
            )
        return ("id", _id(value))

    return fingerprint


def make_rewrap_test(libraries: tuple[str, ...]) -> Callable:
    """``rewrapped(new, old)``: ``new`` is a library's own wrapper around ``old``:
    torch._dynamo wraps torch.manual_seed (``__wrapped__``) and, once torch.compile
    runs, patches nn.Module's ``__init__`` and ``__setstate__`` with closures over the
    originals (lesson 09 compiles a model before its NaN-hunt exercise)."""
    import types

    _type, _str, _range, _ValueError = type, str, range, ValueError
    function_type, startswith, dict_get = types.FunctionType, str.startswith, dict.get

    def rewrapped(new, old) -> bool:
        for _ in _range(3):
            if _type(new) is not function_type:
                return False
            where = new.__code__.co_filename
            if _type(where) is not _str or not startswith(where, libraries):
                return False
            for cell in new.__closure__ or ():
                try:
                    if cell.cell_contents is old:
                        return True
                except _ValueError:  # an empty cell
                    pass
            new = dict_get(new.__dict__, "__wrapped__")
            if new is old:
                return True
        return False

    return rewrapped


def _course_data(snapshot: dict, fingerprint: Callable) -> dict:
    """(module, name) -> fingerprint of each module-level list, tuple and dict of the
    course package, except the state a module changes as it runs (distributed's
    ended process groups), which it names in ``__runtime_state__``: replacing that
    is still seen."""
    data = {}
    for name, (_, namespace) in snapshot.items():
        if name.startswith("amp_lessons"):
            runtime = namespace.get("__runtime_state__", ())
            for attr, value in namespace.items():
                if (
                    type(value) in (list, tuple, dict)
                    and not attr.startswith("__")
                    and attr not in runtime
                ):
                    data[(name, attr)] = fingerprint(value, [20000])
    return data


def _watched_namespaces(snapshot: dict) -> tuple[list, list]:
    """``(modules, classes)``: ``(name, object, its live namespace's get, the names,
    their values, the snapshot's namespace)`` for each snapshotted module and for
    each class of the course or of torch's watched ones (setting a class attribute
    raises no audit event). Names and values as tuples let a check compare a whole
    namespace at C speed."""
    watched_classes = _watched_classes()

    def entry(name, owner, live, namespace):
        return (
            name,
            owner,
            live.get,
            tuple(namespace),
            tuple(namespace.values()),
            namespace,
        )

    modules = [
        entry(name, module, vars(module), namespace)
        for name, (module, namespace) in snapshot.items()
    ]
    classes = {}  # by name: a class bound to two names in its module is one class
    for name, (_, namespace) in snapshot.items():
        for value in namespace.values():
            if (
                type(value) is type
                and (name.startswith("amp_lessons") or value in watched_classes)
                and value.__module__ == name
            ):
                label = f"{name}.{value.__qualname__}"
                classes[label] = entry(label, value, vars(value), dict(vars(value)))
    return modules, list(classes.values())


def make_rebinding_test(libraries: tuple[str, ...]) -> Callable:
    """``rebound(get, names, values, namespace)``: the names of ``namespace`` (a
    snapshot) whose value, read with ``get`` from the live namespace, is no longer
    the snapshot's (a library's own rewrapping aside: ``make_rewrap_test``).
    ``names`` and ``values`` are the snapshot's as tuples: the first test, in C, is
    the whole check when nothing changed (no ``id()``: each call is an audit event).
    """
    import itertools
    import operator

    _all, _map, repeat, is_ = all, map, itertools.repeat, operator.is_
    rewrapped, missing = make_rewrap_test(libraries), object()

    def rebound(get, names: tuple, values: tuple, namespace: dict) -> list[str]:
        if _all(_map(is_, _map(get, names, repeat(missing)), values)):
            return []
        found = []
        for attr, value in namespace.items():
            current = get(attr, missing)
            if current is not value and not rewrapped(current, value):
                found.append(attr)
        return found

    return rebound


def make_module_watch(watched_modules: list, rebound: Callable) -> Callable:
    """``module_changes()``: the watched modules replaced in ``sys.modules`` and
    their names rebound, about ten at most. Every module and name is first compared
    in one pass in C; only when that finds a difference (torch._dynamo's rewrapping
    of ``torch.manual_seed`` is one) does it look module by module."""
    import itertools
    import operator

    _all, _map, _len, repeat, is_ = all, map, len, itertools.repeat, operator.is_
    dict_get, modules_get, missing = dict.get, sys.modules.get, object()
    module_names = tuple(entry[0] for entry in watched_modules)
    module_objects = tuple(entry[1] for entry in watched_modules)
    all_dicts = tuple(
        get.__self__ for _, _, get, names, _, _ in watched_modules for _ in names
    )
    all_names = tuple(name for entry in watched_modules for name in entry[3])
    all_values = tuple(value for entry in watched_modules for value in entry[4])

    def module_changes() -> list[str]:
        if _all(_map(is_, _map(modules_get, module_names), module_objects)) and _all(
            _map(is_, _map(dict_get, all_dicts, all_names, repeat(missing)), all_values)
        ):
            return []
        found = []
        for name, module, get, names, values, namespace in watched_modules:
            if modules_get(name) is not module:
                found.append(f"sys.modules[{name!r}] replaced")
            found += [
                f"{name}.{attr} replaced"
                for attr in rebound(get, names, values, namespace)
            ]
            if _len(found) > 10:
                break
        return found

    return module_changes


def make_tamper_watch(snapshot: dict, libraries: tuple[str, ...]) -> Callable:
    """``changes()``: what no longer holds of the snapshot (about ten lines at most):
    a module replaced in ``sys.modules`` or a name of it rebound
    (``make_module_watch``); the contents of the course's module-level data; an
    attribute of a course class or of a watched torch class; ``sys.audit`` or
    ``sys.modules`` replaced."""
    _len, modules, audit, sys_get = len, sys.modules, sys.audit, vars(sys).get
    fingerprint, rebound = make_fingerprint(), make_rebinding_test(libraries)
    watched_modules, watched_classes = _watched_namespaces(snapshot)
    module_changes = make_module_watch(watched_modules, rebound)
    module_gets = {name: get for name, _, get, _, _, _ in watched_modules}
    course_data = [
        (name, attr, module_gets[name], contents)
        for (name, attr), contents in _course_data(snapshot, fingerprint).items()
    ]

    def changes() -> list[str]:
        found = module_changes()
        if _len(found) > 10:
            return found
        for name, attr, get, contents in course_data:
            if fingerprint(get(attr), [20000]) != contents:
                found.append(f"the contents of {name}.{attr} changed")
        for name, _, get, names, values, namespace in watched_classes:
            if rebound(get, names, values, namespace):
                found.append(f"class {name} changed")
            if _len(found) > 10:
                return found
        if sys_get("audit") is not audit:
            found.append("sys.audit replaced")
        if sys_get("modules") is not modules:
            found.append("sys.modules replaced")
        return found

    return changes


def make_verdict_test(grade: Callable, check_codes: frozenset) -> Callable:
    """``genuine(caller, title)``: the verdict raised in ``caller``, the frame that
    raised ``CHECK_DONE``, is the engine's (``grade``, with the builtins it was
    loaded with), called by a check of the package named as ``title`` says, with the
    package's ``make_rows``. Membership in ``check_codes`` is by identity (hashing a
    code object hashes its constants, which could be student objects)."""
    import builtins
    import types

    _type, _str, _id = type, str, id
    function_type, builtins_dict = types.FunctionType, vars(builtins)
    grade_code, grade_globals = grade.__code__, grade.__globals__
    check_ids = frozenset(_id(code) for code in check_codes)
    locals_get, split = dict.get, str.split

    def genuine(caller, title) -> bool:
        check = caller.f_back
        make_rows = locals_get(caller.f_locals, "make_rows")
        return (
            caller.f_code is grade_code
            and caller.f_globals is grade_globals
            and caller.f_builtins is builtins_dict
            and check is not None
            and _id(check.f_code) in check_ids
            and _type(title) is _str
            and check.f_code.co_name == split(title, "[")[0]  # check_quick_check[q]
            and _type(make_rows) is function_type
            and _id(make_rows.__code__) in check_ids
        )

    return genuine


def make_check_watch(
    grade: Callable,
    check_codes: frozenset,
    stack: tuple,
    changes: Callable,
    send: Callable,
    taints: dict,
) -> tuple:
    """``(start, frame_access, done)``, the routes of a check's events.

    ``start``: a check began in this thread; ``taints[thread]`` collects what taints
    it. ``frame_access``: a frame read; it taints the running check when student
    code is on the stack. ``done``: the verdict, sent with whether it is genuine
    (``make_verdict_test``), what changed and what tainted it; the stack reader
    lets go of the check's frames.
    """
    import _thread

    get_ident, getframe, raiser = _thread.get_ident, sys._getframe, RAISER
    genuine = make_verdict_test(grade, check_codes)
    student_file, test_cell, forget = stack
    text, _ = make_text_readers()

    def start(event: str, args: tuple) -> None:
        taints[get_ident()] = []

    def frame_access(event: str, args: tuple) -> None:
        running = taints.get(get_ident())
        if running is not None and student_file(getframe(raiser)):
            running.append(event if event == "sys._getframe" else text(args[1]))

    def done(event: str, args: tuple) -> None:
        me, caller = get_ident(), getframe(raiser)
        title, hidden, passed = (args + (None, None, None))[:3]
        vouched = genuine(caller, title)
        tainted = taints.pop(me, [])
        forget(me)  # the check's frames, and what the student's function left in them
        send(
            {
                "kind": "check",
                "cell": test_cell(caller),
                "title": text(title),
                "hidden": hidden is True,
                "passed": passed is True,
                "genuine": vouched,
                "changed": changes(),
                "tainted": tainted[:5],
            }
        )

    return start, frame_access, done


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


def make_hook(
    config: dict,
    snapshot: dict,
    grade: Callable,
    check_codes: frozenset,
    write: Callable[[bytes], None],
) -> Callable[[str, tuple], None]:
    """The audit hook. ``grade`` is the real engine (``checks.grade``);
    ``check_codes`` every code object of the checks package; ``write(bytes)`` sends
    one line. The parts are made here, before student code runs (see the module
    docstring); the hook only routes each event to its part.
    """
    import _thread

    from amp_lessons.teaching.checks import CHECK_DONE, CHECK_START

    _BaseException, startswith = BaseException, str.startswith
    get_ident = _thread.get_ident
    libraries = _library_roots(config["package_root"])
    send = make_sender(bytes.fromhex(config["key"]), write)
    stack = make_stack_reader(config, libraries)
    taints: dict[int, list[str]] = {}  # thread -> what tainted the check it runs
    start, frame_access, done = make_check_watch(
        grade, check_codes, stack, make_tamper_watch(snapshot, libraries), send, taints
    )
    routes, always = make_event_routes(config, stack, send, taints)
    routes.update(
        {CHECK_START: start, CHECK_DONE: done, **dict.fromkeys(_FRAMES, frame_access)}
    )
    route_of, busy = routes.get, set()

    def hook(event: str, args: tuple) -> None:
        route = route_of(event)  # an audit event's name is always an exact str
        if route is None:
            if not startswith(event, "ctypes."):
                return  # import, builtins.id ...: most events, nothing to check
            route = always
        elif route is frame_access and not taints:
            return  # frames read outside a check: libraries do it all the time
        me = get_ident()
        if me in busy:
            return  # raised by the hook's own work (each frame.f_code it reads)
        busy.add(me)
        try:
            route(event, args)
        except _BaseException:  # never break the event, never show a hook frame
            pass
        finally:
            busy.discard(me)

    send({"kind": "hello", "pid": os.getpid()})
    return hook


def _open_channel(fifo: str):
    os_open, os_write, os_fstat = os.open, os.write, os.fstat
    flags, _OSError = os.O_WRONLY | os.O_CLOEXEC, OSError
    fd = os_open(fifo, flags)
    first = os_fstat(fd)

    def write(data: bytes) -> None:
        nonlocal fd
        try:
            now = os_fstat(fd)
            if (now.st_ino, now.st_dev) != (first.st_ino, first.st_dev):
                raise _OSError("replaced")
        except _OSError:  # closed or replaced by student code: open it again
            fd = os_open(fifo, flags)
        os_write(fd, data)

    return write


def check_codes() -> frozenset:
    """The code objects of the loaded checks' functions, nested ones included: a
    frame running one of them is the grader's, not the student's."""
    codes, code_type = set(), type(check_codes.__code__)
    for name, module in list(sys.modules.items()):
        if name.startswith("amp_lessons.teaching.checks"):
            for value in vars(module).values():
                stack = [getattr(value, "__code__", None)]
                while stack:
                    code = stack.pop()
                    if isinstance(code, code_type):
                        codes.add(code)
                        stack += [c for c in code.co_consts if isinstance(c, code_type)]
    return frozenset(codes)


def main() -> None:
    """Read and delete the config, snapshot, install the hook, become the kernel."""
    path = os.environ.pop(CONFIG_ENV)
    with open(path) as f:
        config = json.load(f)
    os.unlink(path)
    from ipykernel import kernelapp

    # the checks (and torch, which they rely on) are loaded before the snapshot
    from amp_lessons.teaching.checks import grade

    hook = make_hook(
        config, take_snapshot(), grade, check_codes(), _open_channel(config["fifo"])
    )
    sys.addaudithook(hook)
    del config, hook
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()

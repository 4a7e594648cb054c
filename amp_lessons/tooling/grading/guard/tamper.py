"""The guard's tamper watch: what student code changed of the course and of the
libraries a check's verdict depends on.

Before any student code runs, ``take_snapshot`` copies the namespace of every loaded
module of ``WATCHED`` (the course, torch, and the standard library they call).
``make_tamper_watch`` then says, each time a check ends, what no longer holds: a
module replaced in ``sys.modules`` or a name of it rebound (``make_module_watch``,
``make_rebinding_test``), the contents of the course's module-level data
(``make_fingerprint``), an attribute of a course class or of a watched torch class,
``sys.audit`` or ``sys.modules`` replaced. A library's own rewrapping (torch._dynamo's
of ``torch.manual_seed``, torch.compile's of ``nn.Module.__init__``) is not tampering
(``make_rewrap_test``).

The common case, nothing changed, is one pass in C over every name and value; only
when that finds a difference does the watch look name by name.

Example::

    changes = make_tamper_watch(take_snapshot(), libraries)
    changes()  # [] until student code rebinds, say, torch.max: ["torch.max replaced"]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

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


# Each make_* runs before student code; the functions it returns use only what it
# bound then (builtins included, as locals): never a global (tests/test_sandbox.py).


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

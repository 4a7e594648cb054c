"""Is the grading code this kernel runs the package's own? Every test cell asks
`verify_pristine()` before it calls a check, and each check asks again after the
student's function has run.

Pristine means: ``sys.modules`` holds the real checks modules, loaded from this
folder; every function and class they define is the one compiled from the file on
disk (same code, same module); the names the package re-exports are those same
objects; the builtins and ``sys.audit`` the checks use are the interpreter's; and,
when the grader recorded a seal of these sources (``AMP_LESSONS_SEAL`` names its
JSON file), the files still match it.

This catches a solution cell that replaces a check or a helper
(``amp_lessons.teaching.checks._engine.grade = ...``), swaps a module in
``sys.modules``, patches a builtin, or edits the package files. It cannot stop code that
also replaces this function or rewrites objects through ``gc``/``ctypes``: in the
grading sandbox, the guard (``amp_lessons.tooling.grading.guard``) watches for
that from outside the notebook's reach. Not covered here: whether the student's
answer is right (the checks).

Example:
    >>> verify_pristine()  # silent when nothing was touched
    >>> import amp_lessons.teaching.checks._engine as engine
    >>> real, engine.grade = engine.grade, lambda *a, **k: None
    >>> verify_pristine()
    Traceback (most recent call last):
    AssertionError: the grading code in this kernel was changed ...
    >>> engine.grade = real
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import json
import os
import sys
import types
from pathlib import Path

__all__ = [
    "CHECK_DONE",
    "CHECK_START",
    "SEAL_ENV",
    "seal",
    "tampering",
    "verify_pristine",
]

PACKAGE = Path(__file__).resolve().parent  # amp_lessons/teaching/checks
SEAL_ENV = "AMP_LESSONS_SEAL"
# sys.audit events each check raises, read by the grading sandbox's guard
CHECK_START = "amp_lessons.check.start"  # (title,)
CHECK_DONE = "amp_lessons.check"  # (title, hidden, passed)
# builtins the checks call; each must be the interpreter's own C function or type
_BUILTINS = (
    "__import__",
    "callable",
    "getattr",
    "isinstance",
    "issubclass",
    "len",
    "print",
    "repr",
    "sorted",
    "sum",
    "any",
    "all",
    "abs",
    "min",
    "max",
    "hasattr",
    "setattr",
    "iter",
    "next",
    "round",
    "vars",
    "id",
    "zip",
    "type",
    "str",
    "int",
    "float",
    "bool",
    "dict",
    "list",
    "tuple",
    "set",
    "range",
    "enumerate",
    "map",
    "filter",
    "object",
    "super",
    "property",
    "Exception",
    "AssertionError",
    "NotImplementedError",
    "BaseException",
)
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set on every class defined in Python
# captured at import, before any solution cell can rebind the builtins
_type, _builtin_type = type, types.BuiltinFunctionType


def seal(folder: Path = PACKAGE) -> dict[str, str]:
    """SHA-256 of each source file of the checks package: what a grader records.

    Example: ``seal()["quiz.py"]`` is 64 hex digits.
    """
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).glob("*.py"))
    }


def _module_name(path: Path) -> str:
    package = __name__.rsplit(".", 1)[0]  # amp_lessons.teaching.checks
    return package if path.stem == "__init__" else f"{package}.{path.stem}"


@functools.lru_cache(maxsize=64)  # not a module-level dict: the guard sees those
def _compiled(path: Path, digest: str) -> tuple[dict, set, dict]:
    """Every code object compiled from ``path`` by qualname, its top-level
    undecorated ``def``/``class`` names, and the names its top-level imports bind
    (``{name: (module, attribute or None)}``); parsed once per file content."""
    source = path.read_text()
    codes, stack = {}, [compile(source, str(path), "exec")]
    while stack:
        code = stack.pop()
        codes.setdefault(code.co_qualname, code)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    body = ast.parse(source).body
    top = {
        node.name
        for node in body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.decorator_list
    }
    imports = {}  # name bound at the top -> (module, attribute or None)
    for node in body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = (alias.name, None)
                else:
                    top_name = alias.name.split(".")[0]
                    imports[top_name] = (top_name, None)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and not node.level
            and node.module != "__future__"
        ):
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module, alias.name)
    return codes, top, imports


def _import_problems(module: types.ModuleType, imports: dict) -> list[str]:
    """Each imported name still the object its import gives (a solution cell may
    rebind ``amp_lessons.teaching.checks.quiz.grade`` rather than the engine's)."""
    problems, namespace, modules = [], vars(module), sys.__dict__["modules"]
    for name, (source, attr) in imports.items():
        origin = dict.get(modules, source)
        if origin is None:
            continue
        expected = origin if attr is None else vars(origin).get(attr, namespace)
        if expected is not namespace and dict.get(namespace, name) is not expected:
            problems.append(
                f"{module.__name__}.{name} is not {source}"
                + (f".{attr}" if attr else "")
            )
    return problems


def _function_problems(module: types.ModuleType, codes: dict, top: set) -> list[str]:
    problems, name = [], module.__name__
    namespace = vars(module)
    for attr in sorted(top):
        value = namespace.get(attr)
        if isinstance(value, types.FunctionType):
            if (
                value.__code__ != codes.get(value.__qualname__)
                or value.__qualname__ != attr
                or value.__globals__ is not namespace
            ):
                problems.append(f"{name}.{attr} is not the function in the file")
        elif isinstance(value, type):
            if value.__module__ != name or value.__qualname__ != attr:
                problems.append(f"{name}.{attr} is not the class in the file")
                continue
            for key, member in vars(value).items():
                if isinstance(
                    member, types.FunctionType
                ) and member.__code__ != codes.get(member.__qualname__):
                    problems.append(f"{name}.{attr}.{key} was replaced")
        else:
            problems.append(f"{name}.{attr} was replaced by {type(value).__name__}")
    return problems


def _reexport_problems(package: types.ModuleType) -> list[str]:
    problems = []
    for attr in getattr(package, "__all__", ()):
        value = getattr(package, attr, None)
        home = sys.modules.get(getattr(value, "__module__", "") or "")
        if callable(value) and (home is None or getattr(home, attr, None) is not value):
            problems.append(f"{package.__name__}.{attr} is not its module's own")
    return problems


def _builtin_problems() -> list[str]:
    problems = []
    for attr in _BUILTINS:
        value = dict.get(builtins.__dict__, attr)
        if _type(value) is _builtin_type:
            genuine = value.__self__ is builtins and value.__name__ == attr
        else:  # a C type such as zip or dict: Python code cannot make one
            genuine = (
                _type(value) is _type
                and not value.__flags__ & _HEAPTYPE
                and value.__name__ == attr
            )
        if not genuine:
            problems.append(f"builtins.{attr} was replaced")
    audit = dict.get(sys.__dict__, "audit")
    if not (_type(audit) is _builtin_type and audit.__self__ is sys):
        problems.append("sys.audit was replaced")
    modules = dict.get(sys.__dict__, "modules")
    if _type(modules) is not dict:
        problems.append("sys.modules was replaced")
    elif dict.get(modules, "builtins") is not builtins:
        problems.append("sys.modules['builtins'] was replaced")
    return problems


def _seal_problems(digests: dict[str, str]) -> list[str]:
    path = os.environ.get(SEAL_ENV)
    if not path:
        return []
    try:
        sealed = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return [f"the seal {path} cannot be read ({exc})"]
    return [
        f"checks/{name} differs from the grader's seal"
        for name in sorted(set(sealed) | set(digests))
        if sealed.get(name) != digests.get(name)
    ]


def tampering() -> list[str]:
    """What differs from the package's own grading code (empty: pristine)."""
    problems = _builtin_problems()
    if problems:  # nothing below can be trusted to run as written
        return problems
    digests = seal()
    problems = _seal_problems(digests)
    modules = sys.__dict__["modules"]
    me = dict.get(modules, __name__)
    if not isinstance(me, types.ModuleType) or vars(me) is not globals():
        problems.append(f"sys.modules[{__name__!r}] is not this module")
    for path in sorted(PACKAGE.glob("*.py")):
        name = _module_name(path)
        module = dict.get(modules, name)
        if module is None:
            continue  # not loaded: nothing of it can run
        where = getattr(module, "__file__", None)
        if (
            not isinstance(module, types.ModuleType)
            or where is None
            or Path(where).resolve() != path
        ):
            problems.append(f"sys.modules[{name!r}] is not loaded from {path}")
            continue
        codes, top, imports = _compiled(path, digests[path.name])
        problems += _function_problems(module, codes, top)
        problems += _import_problems(module, imports)
        if path.stem == "__init__":
            problems += _reexport_problems(module)
    return problems


def verify_pristine() -> None:
    """Raise AssertionError (after printing why) unless `tampering()` finds nothing.

    Test cells call it first: a check that was replaced cannot vouch for itself.
    """
    problems = tampering()
    if problems:
        message = (
            "the grading code in this kernel was changed ("
            + "; ".join(problems[:5])
            + (" ..." if len(problems) > 5 else "")
            + "): restart the kernel, remove the code that does this, and run "
            "all cells again"
        )
        print(message)
        raise AssertionError(message)

"""Labels a Spanish student reads that no catalogue can translate: the English keys of
a dict (or the strings of a tuple) that a loop prints.

The Spanish edition translates what a cell's code shows (print()'s literals, a plot's
``label=``; amp_lessons/tooling/translations.py), never a dict key: a key is code, and
a cell further on may look it up. So ``for name, run in {"cast as is": ...}.items():
print(f"{name:12} ...")`` prints English in Spanish. The lesson writes such a label as
a printed literal instead (``print(f"{'cast as is':12} ...")``, keyed by an identifier,
``"as_is"``), which the lesson's catalogue translates.

This reads the code of every Spanish lesson (no kernel): each dict literal with a key
that reads as English, and each tuple of such strings a ``for`` loop walks, followed
through a comprehension that keeps its keys, and reported where a loop over it prints
the key. `tests/spanish_outputs.py` judges the printed lines themselves, but only lines
of four or more words: a label of one to three words ("peak GB", "its gradient") passes
it, and is caught here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from amp_lessons.tooling import translations

EDITION = sorted(translations.EDITION.glob("[0-9][0-9]_*.ipynb"))
# words of an English label that Spanish does not use (names, dtypes and code are not
# words here: ``scaler.step``, ``unscale_`` and ``fp16`` are left out before judging)
ENGLISH = set(
    """the and of is are was with this that which what your its to in on not for from
by an as or than then after before each every only both all same more less when
without into over under step steps loss scale skipped gradient gradients
memory speed time measured smallest largest kept run layer layers value
values model case cases expected got right wrong first last twice cast scaled
recipe peak interval odd factors wide inputs negative standardized forgot loop
iterations two ends lesson fine plain batch accumulated safe""".split()
)
# lessons whose printed labels still come from English dict keys: reported, not enforced
NOT_YET: frozenset[str] = frozenset()  # none today
CODE = re.compile(r"\S*[._()\[\]=<>]\S*|`[^`]*`")  # identifiers, calls, comparisons


def reads_as_english(text: str) -> bool:
    """A label a Spanish reader would read as English: ``"cast as is"``, ``"peak
    GB"``; not ``"torchao fp8"``, ``"scaler.step(optimizer)"``, ``"bf16"``."""
    words = re.findall(r"[a-z]+", CODE.sub(" ", text.lower()))
    return any(w in ENGLISH for w in words)


def _english(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if reads_as_english(node.value) else None
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _source_name(iterable: ast.AST) -> str | None:
    """``runs`` for ``runs``, ``runs.items()``, ``runs.keys()``."""
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
        if iterable.func.attr in ("items", "keys"):
            iterable = iterable.func.value
    return iterable.id if isinstance(iterable, ast.Name) else None


def _key_target(target: ast.AST, iterable: ast.AST) -> set[str]:
    """The loop names that hold the key: ``name`` in ``for name, run in d.items()``
    and in ``for name in d``."""
    is_items = (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Attribute)
        and iterable.func.attr == "items"
    )
    if is_items and isinstance(target, ast.Tuple) and target.elts:
        return _names(target.elts[0])
    return _names(target)


def _dict_keys(value: ast.AST, labelled: dict[str, list[str]]) -> list[str]:
    """The English keys of a dict literal, or of a comprehension over a labelled
    dict that keeps its keys (``{k: f(v) for k, v in d.items()}``)."""
    if isinstance(value, ast.Dict):
        return [text for k in value.keys if k is not None and (text := _english(k))]
    if isinstance(value, ast.DictComp) and len(value.generators) == 1:
        loop = value.generators[0]
        if _names(value.key) <= _key_target(loop.target, loop.iter):
            source = _source_name(loop.iter)
            return labelled.get(source, []) if source else _tuple_labels(loop.iter)
    return []


def _tuple_labels(iterable: ast.AST) -> list[str]:
    """The English strings of a literal sequence a loop walks: ``(("cast as is",
    x), ("scaled cast", y))``."""
    if not isinstance(iterable, (ast.Tuple, ast.List)):
        return []
    return [
        text for item in iterable.elts for n in ast.walk(item) if (text := _english(n))
    ]


def _printed_names(body: list[ast.stmt]) -> set[str]:
    """The names a loop's body passes to print() (an f-string's fields included)."""
    found = set()
    for statement in body:
        for call in ast.walk(statement):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "print":
                for arg in call.args:
                    found |= _names(arg)
    return found


def _filled(loop: ast.For) -> set[str]:
    """The dicts a loop fills keyed by its key name: ``runs`` in ``for name, x in
    (...): runs[name] = ...``."""
    keys = _key_target(loop.target, loop.iter)
    return {
        node.value.id
        for statement in loop.body
        for assign in ast.walk(statement)
        if isinstance(assign, ast.Assign)
        for node in assign.targets
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and _names(node.slice) <= keys
        and _names(node.slice)
    }


def printed_english_labels(nb) -> list[str]:
    """``cell N: 'label'`` for each English dict key or tuple string that a loop of
    ``nb`` prints, its cells read in order (a dict made in one cell, printed in a
    later one, counts)."""
    labelled: dict[str, list[str]] = {}
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = translations._parsed(cell.source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    keys = _dict_keys(node.value, labelled)
                    if keys:
                        labelled[target.id] = keys
                    else:
                        labelled.pop(target.id, None)
        for loop in (n for n in ast.walk(tree) if isinstance(n, ast.For)):
            source = _source_name(loop.iter)
            labels = labelled.get(source, []) if source else []
            labels = labels or _tuple_labels(loop.iter)
            for name in _filled(loop) if labels else ():
                labelled[name] = labels  # runs[name] = ...: runs is keyed by them
            if labels and _key_target(loop.target, loop.iter) & _printed_names(
                loop.body
            ):
                found += [f"cell {index}: {label!r}" for label in labels]
    return found


@pytest.mark.parametrize("path", EDITION, ids=lambda p: p.stem)
def test_no_english_label_is_printed_from_a_dict_key(path: Path):
    found = printed_english_labels(nbformat.read(path, as_version=4))
    if path.stem in NOT_YET:
        assert found, f"{path.stem} prints no English label now: drop it from NOT_YET"
        pytest.skip(
            f"{len(found)} English label(s), not yet fixed: " + "; ".join(found)
        )
    assert not found, (
        f"{path.name}: these English labels are printed from a dict key or a "
        "tuple, which no catalogue translates: key the dict by an identifier and "
        "print the label as a literal (print(f\"{'label':12} ...\")), see "
        "this file's docstring:\n  " + "\n  ".join(found)
    )


def notebook(*cells: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return nb


# lesson 11's cells as they were: the labels were the dict's keys and a tuple's strings
BEFORE = (
    'errors = {}\nfor name, back in (("cast as is", a), ("scaled cast", b)):\n'
    "    errors[name] = back\n"
    '    print(f"{name:12}: relative error {errors[name]:6.2%}")',
    'twin = {"MLP, fp32": rows(), "GPT, ends kept, bf16 autocast": rows()}\n'
    'for name, rows in twin.items():\n    print(f"{name:30} {len(rows)} tensors")',
    'kept = {"weight": w, "its gradient": w.grad}\n'
    "sizes = {k: t.element_size() for k, t in kept.items()}\n",
    'for name in sizes:\n    print(name, sizes[name], "bytes")',
    'literature = {"TE Llama 2 7B ms/step": (252, 226), "8 x H100, peak GB": (47, 48)}'
    "\nfor name, (before, after) in literature.items():\n"
    '    print(f"{name:48} {before:>7g} -> {after:<7g}")',
)
# and as they are: keyed by identifiers, the labels printed as literals
AFTER = (
    'errors = {}\nfor key, back in (("as_is", a), ("scaled", b)):\n'
    "    errors[key] = back\n"
    "print(f\"{'cast as is':12}: relative error {errors['as_is']:6.2%}\")",
    'kept = {"weight": w, "weight.grad": w.grad}\n'
    'for name, t in kept.items():\n    print(f"{name:16} {t.element_size()}")',
    'runs = {"bf16": 1, "fp8 + bf16": 2, "torchao fp8": 3}\n'
    'for name, run in runs.items():\n    print(f"{name:22} loss {run}")',
    # an English key that is looked up, never printed, is code
    'twin = {"the same": 1}\nfor name, n in twin.items():\n    print(n)',
)


def test_the_check_catches_lesson_11s_english_labels_as_they_were():
    found = printed_english_labels(notebook(*BEFORE))
    assert found == [
        "cell 0: 'cast as is'",
        "cell 0: 'scaled cast'",
        "cell 1: 'GPT, ends kept, bf16 autocast'",
        "cell 3: 'its gradient'",
        "cell 4: 'TE Llama 2 7B ms/step'",
        "cell 4: '8 x H100, peak GB'",
    ]
    assert printed_english_labels(notebook(*AFTER)) == []


def test_labels_reached_through_a_comprehension_or_a_filled_dict_are_caught():
    """Lesson 05 as it was: a dict comprehension over a literal tuple, and a loop
    over one that fills a dict a later loop prints."""
    comprehension = (
        'schedule = {name: run(s) for name, s in (("safe scale 2**10", 1), '
        '("scale 2**21", 2))}\n'
        'for name, lrs in schedule.items():\n    print(f"{name:16s} {lrs}")'
    )
    filled = (
        'runs = {}\nfor name, k in (("fp32, batch 64", 1), ("fp16, 4 x 16", 4)):\n'
        "    runs[name] = k\n"
        'for name, k in runs.items():\n    print(f"{name:26s} {k} passes")'
    )
    assert printed_english_labels(notebook(comprehension, filled)) == [
        "cell 0: 'safe scale 2**10'",
        "cell 0: 'scale 2**21'",
        "cell 1: 'fp32, batch 64'",
    ]


def test_a_label_is_judged_by_its_words_not_its_code():
    for english in ("cast as is", "peak GB", "ms/step", "its gradient", "odd factors"):
        assert reads_as_english(english), english
    for fine in (
        "torchao fp8",
        "fp8 + bf16",
        "MLP, fp32",
        "nn.Linear",
        "scaler.step(optimizer)",
        "unscale_",
        "tokens/s",
    ):
        assert not reads_as_english(fine), fine

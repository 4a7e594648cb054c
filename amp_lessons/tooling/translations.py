"""The Spanish edition: generated from the English notebooks and one gettext catalogue
per notebook, never copied by hand.

A notebook's translatable units are its markdown cells (one entry per cell, the whole
cell), the comments of its code cells (one entry per comment), and the strings its code
shows a reader (one entry per string literal, the literal's source with its quotes:
what a cell prints, a plot's title, labels and legend, a widget's description; an
f-string's translation keeps its placeholders, in any order; a field that is only a
string constant, ``{'loss scale':>12}``, is text: its words are translated, its format
spec kept), and in an exercise's solution cell the docstrings of its functions (the
literal's source with its quotes: the words a student reads to know what to write). Each
entry's
context (``msgctxt``) is the cell's id, so the catalogue follows a cell that moves, and
an English cell that changes after its translation no longer matches: `problems`
reports it as stale and names the cell. Code, identifiers, API names and command lines
are never translated; nbgrader's markers (``### BEGIN SOLUTION``) and linter pragmas
(``# noqa``) are left alone, and so is a string that is not prose (one word, a dtype
name, a path). The package's own printed strings (hints, labels, plot
titles) are translated by gettext in the package (``amp_lessons.set_language``), which
the generated notebook switches on in its first code cell that uses the package.

Layout: ``notebooks/es/po/NAME.po`` (the catalogue) and ``notebooks/es/NAME.ipynb``
(generated; committed, so that a student opens it without any tool).

Example (``make translations``, after editing an English notebook)::

    python -m amp_lessons.tooling.translations update   # new/changed cells into .po
    # ... translate the empty and fuzzy entries of notebooks/es/po/*.po ...
    python -m amp_lessons.tooling.translations build    # notebooks/es/*.ipynb, the .mo
    python -m amp_lessons.tooling.translations check    # stale or missing: exit 1
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
LANGUAGE = "es"
EDITION = NOTEBOOKS / LANGUAGE
CATALOGUES = EDITION / "po"
# every lesson: the entry lesson, the core path 00-08 and the further lessons 09-11
TRANSLATED = re.compile(r"^(00|01|02|03|04|05|06|07|08|09|10|11)_.*\.ipynb$")
# catalogued, not yet translated: no Spanish notebook is generated for them until
# their catalogue is complete (tests/test_translations.py keeps this list honest)
PENDING: frozenset[str] = frozenset()  # none today: every lesson is in Spanish
# lessons whose printed strings (the "text" units) are catalogued but not translated
# yet: `problems` does not count them missing (a stale or broken one still counts)
TEXTS_PENDING: frozenset[str] = frozenset()  # none today
# comments that are instructions to a tool, not prose for a reader
KEEP = re.compile(
    r"^(#+ (BEGIN|END) (SOLUTION|HIDDEN TESTS)|# ?(noqa|type:|fmt:|ruff:|"
    r"pragma)|#!|# YOUR CODE HERE)"
)
PRAGMA = re.compile(r"\s+# ?(noqa|type:)\S*.*$")  # a pragma after a comment's prose
# Where a string literal is text a reader sees: any literal argument of print(), the
# keyword arguments below of any call, and the first literal argument of these methods.
SHOWN_KEYWORDS = frozenset(
    {
        "title",
        "label",
        "xlabel",
        "ylabel",
        "description",
        "placeholder",
        "tooltip",
        "text",
        "suptitle",
    }
)
SHOWN_METHODS = frozenset(
    {
        "set_title",
        "set_xlabel",
        "set_ylabel",
        "suptitle",
        "set_text",
        "annotate",
        "text",
        "title",
        "xlabel",
        "ylabel",
    }
)
PROSE = re.compile(r"[^\W\d_]{2,}[^\w{]+[^\W\d_]{2,}")  # two words, at least
SWITCH = (
    "import amp_lessons\n"
    'amp_lessons.set_language("{lang}")  # pistas y gráficos en español'
)


@dataclass(frozen=True)
class Unit:
    """One translatable piece: a markdown cell, or one comment of a code cell."""

    cell_id: str
    index: int  # the cell's position, to name it in messages
    kind: str  # "markdown", "comment", "text" or "docstring" (a literal's source)
    text: str

    @property
    def context(self) -> str:
        return f"{self.cell_id} {self.kind}"

    def where(self, stem: str) -> str:
        first = self.text.strip().splitlines()[0][:60] if self.text.strip() else ""
        return f"{stem}, cell {self.index} ({self.cell_id}, {self.kind}: {first!r})"


def english_notebooks(pending: bool = False) -> list[Path]:
    """The lessons of the Spanish edition (with ``pending``: those still being
    translated too, whose catalogues `update` keeps current)."""
    return sorted(
        p
        for p in NOTEBOOKS.glob("*.ipynb")
        if TRANSLATED.match(p.name) and (pending or p.stem not in PENDING)
    )


def _comments(source: str) -> list[tuple[int, int, str]]:
    """(line, column, text) of each comment token: tokenize, so a ``#`` inside a
    string is not a comment. A cell that does not tokenize (a shell escape) has none
    to translate."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return [
        (t.start[0], t.start[1], t.string) for t in tokens if t.type == tokenize.COMMENT
    ]


def _prose(comment: str) -> str | None:
    """The words of a comment a reader reads (``# why: ...`` -> ``why: ...``), or
    None for a tool's comment."""
    if KEEP.match(comment):
        return None
    text = PRAGMA.sub("", comment).lstrip("#").strip()
    return text if re.search(r"[A-Za-z]{2}", text) else None


def _parsed(source: str) -> ast.Module | None:
    """The cell's syntax tree, its IPython magics and shell lines read as comments
    (one character added at the start of those lines: no string sits there)."""
    python = "\n".join(
        "#" + line if line.lstrip().startswith(("%", "!")) else line
        for line in source.split("\n")
    )
    try:
        return ast.parse(python)
    except SyntaxError:
        return None


def _constant_field(part: ast.expr) -> bool:
    """An f-string field that is only a string constant: ``{'loss scale':>12}``, a
    column header padded to its width. Its words are text, like the parts between
    fields."""
    return (
        isinstance(part, ast.FormattedValue)
        and isinstance(part.value, ast.Constant)
        and isinstance(part.value.value, str)
    )


def _literal_text(node: ast.expr) -> str:
    """The fixed text of a string literal (an f-string's parts between fields, and
    its fields that are only a string constant)."""
    if isinstance(node, ast.Constant):
        return node.value
    return " ".join(
        part.value.value if _constant_field(part) else part.value
        for part in node.values
        if isinstance(part, ast.Constant) or _constant_field(part)
    )


def _is_prose(node: ast.AST) -> bool:
    literal = isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )
    return literal and bool(PROSE.search(_literal_text(node)))


def _shown_literals(tree: ast.Module) -> list[ast.expr]:
    """The string literals a reader sees, in source order: see SHOWN_KEYWORDS."""
    found: dict[int, ast.expr] = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = getattr(call.func, "id", None) or getattr(call.func, "attr", "")
        candidates = [k.value for k in call.keywords if k.arg in SHOWN_KEYWORDS]
        if name == "print":
            candidates += [n for arg in call.args for n in ast.walk(arg)]
        elif name in SHOWN_METHODS:
            candidates += [a for a in call.args if _is_prose(a)][:1]
        for node in candidates:
            if _is_prose(node):
                found.setdefault(id(node), node)
    nested = {
        id(v)
        for n in found.values()
        if isinstance(n, ast.JoinedStr)
        for v in ast.walk(n)
        if v is not n
    }
    return sorted(
        (n for k, n in found.items() if k not in nested),
        key=lambda n: (n.lineno, n.col_offset),
    )


def _span(source: str, node: ast.expr) -> tuple[int, int]:
    """(start, end) character offsets of ``node`` in ``source`` (ast counts columns
    in UTF-8 bytes)."""
    lines = source.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(row: int, col: int) -> int:
        return starts[row - 1] + len(lines[row - 1].encode()[:col].decode())

    return (
        offset(node.lineno, node.col_offset),
        offset(node.end_lineno, node.end_col_offset),
    )


def _texts(source: str) -> list[tuple[int, int, str]]:
    """(start, end, literal source) of each string literal a reader sees."""
    tree = _parsed(source)
    if tree is None:
        return []
    spans = [_span(source, node) for node in _shown_literals(tree)]
    return [(start, end, source[start:end]) for start, end in spans]


def _is_exercise(cell) -> bool:
    """A graded exercise's solution cell (nbgrader's ``solution`` metadata)."""
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def _docstrings(source: str) -> list[tuple[int, int, str]]:
    """(start, end, literal source) of each docstring of a function or class."""
    tree = _parsed(source)
    if tree is None:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                start, end = _span(source, first.value)
                found.append((start, end, source[start:end]))
    return sorted(found)


def _one_string(literal: str) -> bool:
    """``literal`` is the source of one plain string literal (no f-string), so that a
    translated docstring is still a docstring and nothing else."""
    try:
        node = ast.parse(literal.strip(), mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _placeholders(literal: str) -> list[str] | None:
    """The sorted fields of a string literal's source (an f-string's expressions, a
    str.format template's names), or None when it is not one literal."""
    try:  # in parentheses: the pieces of a literal spread over lines join
        node = ast.parse(f"({literal.strip()})", mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.JoinedStr):
        return sorted(
            _blanked(v) if _constant_field(v) else ast.unparse(v.value)
            for v in node.values
            if isinstance(v, ast.FormattedValue)
        )
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return sorted(re.findall(r"\{[^{}]*\}", node.value))
    return None


def _blanked(field: ast.FormattedValue) -> str:
    """A constant field with its words taken out, its conversion and format spec
    kept: ``{'loss scale':>12}`` -> ``f"{'':>12}"``, so that a translation may change
    the words of a header, not its width."""
    blank = ast.FormattedValue(
        value=ast.Constant(""),
        conversion=field.conversion,
        format_spec=field.format_spec,
    )
    return ast.unparse(ast.JoinedStr(values=[blank]))


def units(nb) -> list[Unit]:
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and cell.source.strip():
            found.append(Unit(cell.id, index, "markdown", cell.source))
        elif cell.cell_type == "code":
            for _, _, comment in _comments(cell.source):
                text = _prose(comment)
                if text is not None:
                    found.append(Unit(cell.id, index, "comment", text))
            found += [
                Unit(cell.id, index, "text", literal)
                for _, _, literal in _texts(cell.source)
            ]
            if _is_exercise(cell):
                found += [
                    Unit(cell.id, index, "docstring", literal)
                    for _, _, literal in _docstrings(cell.source)
                ]
    return found


def catalogue_path(stem: str, catalogues: Path = CATALOGUES) -> Path:
    return Path(catalogues) / f"{stem}.po"


def _load(path: Path):
    import polib

    if path.exists():
        return polib.pofile(str(path), wrapwidth=0)
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": "amp_lessons",
        "Language": LANGUAGE,
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    return po


def update(path: Path, catalogues: Path = CATALOGUES) -> tuple[int, int]:
    """Bring ``path``'s catalogue in line with the English notebook: a new unit gets
    an empty entry, a changed one keeps its old translation marked fuzzy (with the old
    English as ``previous_msgid``, as msgmerge does), a unit that is gone is dropped.
    Returns (new, changed)."""
    import polib

    po = _load(catalogue_path(path.stem, catalogues))
    by_key = {(e.msgctxt, e.msgid): e for e in po}
    by_context = {}
    for entry in po:
        by_context.setdefault(entry.msgctxt, []).append(entry)
    fresh = polib.POFile(wrapwidth=0)
    fresh.metadata = po.metadata
    new = changed = 0
    seen = set()
    for unit in units(nbformat.read(path, as_version=4)):
        key = (unit.context, unit.text)
        if key in seen:
            continue
        seen.add(key)
        entry = by_key.get(key)
        if entry is None:
            old = [e for e in by_context.get(unit.context, []) if e.msgstr]
            entry = polib.POEntry(msgctxt=unit.context, msgid=unit.text, msgstr="")
            if unit.kind == "markdown" and len(old) == 1:
                entry.msgstr, entry.previous_msgid = old[0].msgstr, old[0].msgid
                entry.flags.append("fuzzy")
                changed += 1
            else:
                new += 1
        entry.occurrences = [(f"{path.name}:cell {unit.index}", "")]
        fresh.append(entry)
    catalogue_path(path.stem, catalogues).parent.mkdir(parents=True, exist_ok=True)
    fresh.save(str(catalogue_path(path.stem, catalogues)))
    return new, changed


def problems(path: Path, catalogues: Path = CATALOGUES) -> list[str]:
    """What keeps ``path``'s Spanish edition from being complete: each unit with no
    translation, or whose translation was made for other English (stale)."""
    po = _load(catalogue_path(path.stem, catalogues))
    entries = {(e.msgctxt, e.msgid): e for e in po}
    contexts = {e.msgctxt for e in po if e.msgstr}
    found = []
    for unit in units(nbformat.read(path, as_version=4)):
        entry = entries.get((unit.context, unit.text))
        if entry is not None and entry.msgstr and "fuzzy" not in entry.flags:
            if unit.kind == "text" and (
                _placeholders(entry.msgstr) != _placeholders(unit.text)
            ):
                found.append(
                    f"broken: {unit.where(path.stem)}: the translation must "
                    "be one string literal with the same placeholders"
                )
            if unit.kind == "docstring" and not _one_string(entry.msgstr):
                found.append(
                    f"broken: {unit.where(path.stem)}: the translation must "
                    "be one plain string literal, quotes included"
                )
            continue
        if unit.kind == "text" and path.stem in TEXTS_PENDING:
            continue  # printed strings not translated yet: see TEXTS_PENDING
        if (entry is not None and "fuzzy" in entry.flags) or (
            entry is None and unit.context in contexts
        ):
            found.append(
                f"stale: {unit.where(path.stem)} changed after its "
                "translation: run `make translations` and translate it again"
            )
        else:
            found.append(f"missing: {unit.where(path.stem)} has no translation")
    return found


def _translate_comments(source: str, table: dict[str, str]) -> str:
    lines = source.split("\n")
    for row, col, comment in reversed(_comments(source)):
        text = _prose(comment)
        if text is None or not table.get(text):
            continue
        line = lines[row - 1]
        prefix = re.match(r"#+\s*", comment).group(0)
        pragma = PRAGMA.search(comment)
        lines[row - 1] = (
            line[:col]
            + prefix
            + table[text]
            + (pragma.group(0) if pragma else "")
            + line[col + len(comment) :]
        )
    return "\n".join(lines)


def _translate_texts(
    source: str, table: dict[str, str], docstrings: dict[str, str] | None = None
) -> str:
    """``source`` with its shown strings from ``table`` and (an exercise cell) its
    docstrings from ``docstrings``: the literals are replaced, the code around them
    kept."""
    spans = [(s, e, lit, table) for s, e, lit in _texts(source)]
    spans += [(s, e, lit, docstrings or {}) for s, e, lit in _docstrings(source)]
    for start, end, literal, found in sorted(spans, key=lambda t: -t[0]):
        if found.get(literal):
            source = source[:start] + found[literal] + source[end:]
    return source


def _with_switch(source: str, switch: str) -> str:
    """``source`` with the language switch right after its leading imports, before
    the cell prints anything (a quiz printed by the import cell comes out Spanish)."""
    tree = _parsed(source)
    end = 0  # the last line of the cell's leading imports
    for node in tree.body if tree is not None else []:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            break
        end = node.end_lineno
    if end == 0 or end >= len(source.rstrip("\n").split("\n")):
        return source.rstrip("\n") + "\n" + switch
    lines = source.split("\n")
    return "\n".join(lines[:end] + switch.split("\n") + lines[end:])


def translate(nb, po, lang: str = LANGUAGE):
    """The Spanish notebook: ``nb`` with its markdown and comments from ``po`` (an
    entry that is missing or fuzzy leaves the English, which `problems` reports)."""
    done = {
        (e.msgctxt, e.msgid): e.msgstr
        for e in po
        if e.msgstr and "fuzzy" not in e.flags
    }
    out = copy.deepcopy(nb)
    switched = False
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = done.get((f"{cell.id} markdown", cell.source), cell.source)
        elif cell.cell_type == "code":
            texts = {
                msgid: msgstr
                for (ctx, msgid), msgstr in done.items()
                if ctx == f"{cell.id} text"
            }
            docstrings = {
                msgid: msgstr
                for (ctx, msgid), msgstr in done.items()
                if ctx == f"{cell.id} docstring" and _is_exercise(cell)
            }
            cell.source = _translate_texts(cell.source, texts, docstrings)
            comments = {
                msgid: msgstr
                for (ctx, msgid), msgstr in done.items()
                if ctx == f"{cell.id} comment"
            }
            cell.source = _translate_comments(cell.source, comments)
            if not switched and re.search(
                r"^\s*(from|import) amp_lessons", cell.source, re.M
            ):
                cell.source = _with_switch(cell.source, SWITCH.format(lang=lang))
                switched = True
    out.metadata["language"] = lang
    return out


def build(path: Path, catalogues: Path = CATALOGUES, edition: Path = EDITION) -> Path:
    """Write ``notebooks/es/NAME.ipynb`` from the English notebook and its catalogue."""
    out = translated(path, catalogues)
    target = Path(edition) / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(out, target)
    return target


def link_results(edition: Path = EDITION) -> None:
    """``notebooks/es/results`` -> ``../results``: the Spanish lessons read the same
    recorded GPU results, by the same relative path, as the English ones."""
    link = Path(edition) / "results"
    if not link.is_symlink():
        link.symlink_to(Path("..") / "results", target_is_directory=True)


def translated(path: Path, catalogues: Path = CATALOGUES):
    """The Spanish notebook of the English one at ``path``, as `build` writes it."""
    nb = nbformat.read(path, as_version=4)
    return translate(nb, _load(catalogue_path(path.stem, catalogues)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m amp_lessons.tooling.translations",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("command", choices=["update", "build", "check"])
    args = parser.parse_args(argv)
    found = []
    for path in english_notebooks(pending=args.command == "update"):
        if args.command == "update":
            new, changed = update(path)
            print(
                f"{catalogue_path(path.stem).relative_to(ROOT)}: {new} new, "
                f"{changed} changed (fuzzy)"
            )
        elif args.command == "build":
            print(f"wrote {build(path).relative_to(ROOT)}")
            link_results()
        else:
            found += problems(path)
    if args.command == "build":  # the package's printed strings: its .po -> .mo
        from amp_lessons import i18n

        print(f"wrote {i18n.compile_catalogue(LANGUAGE).relative_to(ROOT)}")
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

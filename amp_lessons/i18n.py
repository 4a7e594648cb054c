"""The language the package speaks to a student: English, or Spanish for the Spanish
edition (``notebooks/es/``), chosen by the notebook with ``set_language("es")``.

What a student reads from the package (the checks' tables, hints and verdicts, widget
labels, plot titles and legends) goes through `_` (standard-library gettext) when it is
printed or drawn, not when a module is imported, so switching language in a running
kernel takes effect at the next check or plot. English is the source text itself:
with the language "en", `_` returns its argument unchanged, so English output is
byte-identical to the untranslated package. A string with values keeps named
placeholders and is formatted after translation::

    _("{failed} of {total} cases failed — see hints above").format(failed=1, total=4)

Module-level text (the quiz's questions, a table of labels) is marked with `N_`, which
returns it unchanged, and translated with ``_(text)`` where it is shown.

The catalogue: ``amp_lessons/locale/es/LC_MESSAGES/amp_lessons.po`` (edited by a
translator), compiled to the ``.mo`` beside it (committed: a student needs no tool)::

    python -m amp_lessons.i18n extract   # every wrapped string into the .po
    python -m amp_lessons.i18n compile   # .po -> .mo (translations build runs it too)

Example:
    >>> set_language("es")
    >>> _("hint")
    'pista'
    >>> set_language("en")
"""

from __future__ import annotations

import gettext as _gettext
import re
import sys
from pathlib import Path

__all__ = [
    "LANGUAGES",
    "N_",
    "_",
    "gettext",
    "language",
    "number",
    "set_language",
    "yes_no",
]

DOMAIN = "amp_lessons"
LOCALE = Path(__file__).resolve().parent / "locale"
LANGUAGES = ("en", "es")  # "en" is the source text; each other has a catalogue
# The current language and its loaded catalogue, changed in place by set_language:
# the grading guard (tooling/grading/guard/tamper.py) does not take a language
# switch for tampering with the course's data.
_STATE: dict = {"language": "en", "catalogue": None}
__runtime_state__ = ("_STATE",)
# calls whose first argument is a translatable string (what `extract` collects)
MARKERS = ("_", "N_", "gettext")
PLACEHOLDER = re.compile(r"\{(\w*)\}")  # a named placeholder: {total}


def catalogue_path(lang: str = "es", suffix: str = ".po") -> Path:
    return LOCALE / lang / "LC_MESSAGES" / f"{DOMAIN}{suffix}"


def set_language(lang: str) -> None:
    """Print hints, labels and plot titles in `lang` from now on: "en" or "es".

    Example: ``amp_lessons.set_language("es")`` in a Spanish notebook's first cell.
    """
    if type(lang) is not str or lang not in LANGUAGES:
        raise ValueError(
            f"amp_lessons cannot speak {lang!r}: set_language accepts "
            + " or ".join(repr(code) for code in LANGUAGES)
            + ' (English, Spanish), e.g. amp_lessons.set_language("es")'
        )
    catalogue = None
    if lang != "en":
        catalogue = _gettext.translation(DOMAIN, str(LOCALE), languages=[lang])
    _STATE["catalogue"] = catalogue
    _STATE["language"] = lang


def yes_no(flag: object) -> str:
    """ "yes" or "no" in the current language, for a flag a lesson prints in a
    sentence: Python's True and False read as English in the Spanish edition.

    Example: ``yes_no(True) == "yes"``; after ``set_language("es")``, ``"sí"``.
    """
    return gettext("yes") if flag else gettext("no")


def language() -> str:
    """The language the package prints in now ("en" unless `set_language` said)."""
    return _STATE["language"]


def gettext(message: str) -> str:
    """`message` in the current language (itself in English, or when the catalogue
    has no translation for it)."""
    catalogue = _STATE["catalogue"]
    return message if catalogue is None else catalogue.gettext(message)


_ = gettext


def number(value: float, spec: str = "") -> str:
    """``value`` formatted by ``spec`` with the current language's thousands mark: a
    comma in English (``131,072``), none in Spanish (``131072``: a Spanish reader
    takes ``131,072`` for 131 point 072; the glossary writes 65504). The decimal mark
    is the point in both, as in the code.

    Example: ``number(131072)`` -> ``'131,072'``; ``number(1234.5, ".1f")`` ->
    ``'1,234.5'``; after ``set_language("es")``, ``'131072'`` and ``'1234.5'``.
    """
    text = format(value, "," + spec)
    return text if language() == "en" else text.replace(",", "")


def N_(message: str) -> str:
    """Mark module-level text for translation; `_` translates it where it is shown."""
    return message


def wrapped_strings(root: Path | None = None) -> dict[str, list[str]]:
    """Every string literal passed to `_`, `N_` or `gettext` in the package's modules:
    {msgid: ["module.py:line", ...]}, by an AST scan (course tooling excluded)."""
    import ast

    root = Path(root) if root else Path(__file__).resolve().parent
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if "tooling" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in MARKERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                where = f"{path.relative_to(root.parent).as_posix()}:{node.lineno}"
                found.setdefault(node.args[0].value, []).append(where)
    return found


def extract(lang: str = "es") -> tuple[int, int]:
    """Bring the .po in line with the wrapped strings: a new one gets an empty entry,
    one no longer wrapped is dropped, translations are kept. Returns (new, dropped).
    Needs polib (a dev dependency)."""
    import polib

    path = catalogue_path(lang)
    old = (
        {e.msgid: e for e in polib.pofile(str(path), wrapwidth=0)}
        if path.exists()
        else {}
    )
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": DOMAIN,
        "Language": lang,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    strings = wrapped_strings()
    for msgid, places in strings.items():
        entry = old.get(msgid) or polib.POEntry(msgid=msgid, msgstr="")
        entry.occurrences = [tuple(p.rsplit(":", 1)) for p in places]
        if PLACEHOLDER.search(msgid) and "python-brace-format" not in entry.flags:
            entry.flags.append("python-brace-format")
        po.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.save(str(path))
    return len(set(strings) - set(old)), len(set(old) - set(strings))


def compile_catalogue(lang: str = "es") -> Path:
    """Write the .mo from the .po (untranslated and fuzzy entries left out, so the
    English shows). Needs polib (a dev dependency)."""
    import polib

    po = polib.pofile(str(catalogue_path(lang)), wrapwidth=0)
    for entry in [e for e in po if "fuzzy" in e.flags or not e.msgstr]:
        po.remove(entry)
    target = catalogue_path(lang, ".mo")
    po.save_as_mofile(str(target))
    return target


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m amp_lessons.i18n", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["extract", "compile"])
    args = parser.parse_args(argv)
    for lang in LANGUAGES[1:]:
        if args.command == "extract":
            new, dropped = extract(lang)
            print(f"{catalogue_path(lang)}: {new} new, {dropped} dropped")
        else:
            print(f"wrote {compile_catalogue(lang)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

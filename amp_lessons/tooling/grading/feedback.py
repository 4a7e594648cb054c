"""Each student's feedback on a graded lesson, showing only what a student may see:
what ``python -m amp_lessons.grading feedback`` writes.

One HTML page per student and lesson, ``<course>/feedback/<student>/<lesson>/
<lesson>.html`` (where nbgrader's ``release_feedback`` looks, beside the
``timestamp.txt`` and ``submission_secret.txt`` of a hand-in through the exchange):
the score, each exercise's points with the table of its visible cases and hints as
the check printed it, and the review flags in plain words. Never in it: the hidden
tests' code or cases (their tables are cut from the output; a hidden failure is said
in one sentence), tracebacks (only the error's one line), absolute paths, or the
output of a test cell whose pass was not trusted (a forged "all cases passed").
nbgrader's own ``generate_feedback`` shows all of those: do not hand its pages out.

The page speaks the lessons' language (English, or Spanish for the Spanish
edition), from `TEXTS`, as ``course.CODE_STUBS`` does.

Example::

    python -m amp_lessons.grading feedback            # every graded submission
    python -m amp_lessons.grading feedback --student alice --lesson 03_loss_scaling
"""

from __future__ import annotations

import fnmatch
import gettext
import html
import re
import shutil
from pathlib import Path

import nbformat

from amp_lessons.tooling.grading import gradebook
from amp_lessons.tooling.grading.course import (
    COURSE_DIR,
    autograded_path,
    is_test_cell,
    lessons_language,
    nbgrader_meta,
)

TEXTS = {
    "en": {
        "title": "Feedback: {lesson}",
        "student": "Student: {student}",
        "handed_in": "Handed in: {when}",
        "score": "Score: {score:g} of {max:g} (core {core:g} of {core_max:g}, "
        "optional {opt:g} of {opt_max:g})",
        "exercise": "{title}: {score:g} of {max:g} points",
        "optional": " (optional)",
        "hidden_failed": "Your answer passed the cases shown but failed hidden "
        "cases: try it on more inputs (edge cases, other sizes).",
        "untrusted": "This exercise scored 0: its check's result could not be "
        "trusted (see the notes below); its output is not shown.",
        "not_run": "This exercise did not run (see the notes below).",
        "notes": "Notes from grading",
        "no_notes": "None.",
        "tamper": "A test cell's pass could not be trusted and scored 0: the test "
        "cell or the grading code was changed, or bypassed. Your instructor will "
        "look at it.",
        "crash": "The notebook stopped before its end (its kernel died); the "
        "exercises after that point scored 0.",
        "timeout": "The notebook ran past its time limit; the exercises it did not "
        "reach scored 0.",
        "corrupt": "The file could not be read as a notebook; it scored 0. Hand in "
        "the .ipynb file saved from JupyterLab.",
        "error": "The grader could not run this notebook; it scored 0. Your "
        "instructor will look at it.",
        "runtime": "While it ran, your code did something your instructor reviews "
        "by hand:",
        "scan": "Your code uses something your instructor reviews by hand:",
        "output": "The notebook's output was too long and was cut:",
        "other": "Note:",
    },
    "es": {
        "title": "Comentarios: {lesson}",
        "student": "Estudiante: {student}",
        "handed_in": "Entregado: {when}",
        "score": "Nota: {score:g} de {max:g} (ruta principal {core:g} de "
        "{core_max:g}, partes opcionales {opt:g} de {opt_max:g})",
        "exercise": "{title}: {score:g} de {max:g} puntos",
        "optional": " (opcional)",
        "hidden_failed": "Su respuesta superó los casos mostrados pero falló casos "
        "ocultos: pruébela con más entradas (casos límite, otros tamaños).",
        "untrusted": "Este ejercicio obtuvo 0: no se pudo confiar en el resultado de "
        "su comprobación (vea las notas más abajo); su salida no se muestra.",
        "not_run": "Este ejercicio no se ejecutó (vea las notas más abajo).",
        "notes": "Notas de la corrección",
        "no_notes": "Ninguna.",
        "tamper": "No se pudo confiar en que una celda de prueba pasara y obtuvo 0: "
        "se cambió o se eludió la celda de prueba o el código de corrección. Su "
        "instructor lo revisará.",
        "crash": "El cuaderno se detuvo antes del final (su kernel murió); los "
        "ejercicios posteriores obtuvieron 0.",
        "timeout": "El cuaderno superó su tiempo límite; los ejercicios a los que no "
        "llegó obtuvieron 0.",
        "corrupt": "El archivo no se pudo leer como cuaderno; obtuvo 0. Entregue el "
        "archivo .ipynb guardado desde JupyterLab.",
        "error": "El corrector no pudo ejecutar este cuaderno; obtuvo 0. Su "
        "instructor lo revisará.",
        "runtime": "Mientras se ejecutaba, su código hizo algo que su instructor "
        "revisa a mano:",
        "scan": "Su código usa algo que su instructor revisa a mano:",
        "output": "La salida del cuaderno era demasiado larga y se recortó:",
        "other": "Nota:",
    },
}
# Flags whose details are for the instructor only: the sentence says it all
SENTENCE_ONLY = ("tamper", "crash", "timeout", "corrupt", "error")
# An absolute path (POSIX or Windows), and the name at its end
ABSOLUTE_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][^\s'\"/\\:]+)+[/\\]?")


def without_paths(text: str) -> str:
    """``text`` with every absolute path cut to its last name.

    Example: ``without_paths("in /home/me/course/_engine.py")`` is
    ``"in _engine.py"``.
    """
    return ABSOLUTE_PATH.sub(
        lambda m: re.split(r"[/\\]", m.group(0).rstrip("/\\"))[-1], text
    )


def _header_patterns(*templates: str) -> re.Pattern:
    """A line printed from any of ``templates`` (a header's singular and plural) in
    English or any catalogue's language."""
    from amp_lessons import i18n

    forms = set(templates)
    for lang in i18n.LANGUAGES[1:]:
        catalogue = gettext.translation(i18n.DOMAIN, str(i18n.LOCALE), languages=[lang])
        forms.update(catalogue.gettext(template) for template in templates)
    alternatives = [
        re.escape(form)
        .replace(re.escape("{title}"), ".+")
        .replace(re.escape("{total}"), r"\d+")
        for form in forms
    ]
    return re.compile(r"^\s*(?:" + "|".join(alternatives) + r")\s*$")


# the headers checks/_table.py prints (`header`), one case in the singular
HIDDEN_HEADER = _header_patterns(
    "{title}: {total} hidden cases", "{title}: {total} hidden case"
)
VISIBLE_HEADER = _header_patterns("{title}: {total} cases", "{title}: {total} case")


def visible_output(cell) -> tuple[str, str | None, bool]:
    """(the printed text of a test cell without its hidden tables, its error's one
    line or None, whether the hidden cases failed). An error raised once the hidden
    check had started is the hidden check's: it is left out, and the third value
    says so."""
    lines, hidden, hidden_ran = [], False, False
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    for line in text.splitlines():
        if HIDDEN_HEADER.match(line):
            hidden = hidden_ran = True
        elif VISIBLE_HEADER.match(line):
            hidden = False
        if not hidden:
            lines.append(line)
    error = next((o for o in cell.outputs if o.output_type == "error"), None)
    message = None
    if error is not None and not hidden_ran:
        message = f"{error.get('ename', 'Error')}: {error.get('evalue', '')}".strip()
    shown = without_paths("\n".join(lines))
    return shown, message and without_paths(message), error is not None and hidden_ran


def _flag_notes(flags: list[str], texts: dict) -> list[str]:
    """Each flag as a sentence for the student (details only where they are the
    student's own code or output)."""
    notes = []
    for flag in flags:
        kind, _, detail = flag.partition(": ")
        sentence = texts.get(kind, texts["other"])
        if kind in SENTENCE_ONLY:
            notes.append(sentence)
        else:
            notes.append(f"{sentence} {without_paths(detail)}")
    return list(dict.fromkeys(notes))


def _exercise_html(cell, graded: dict, untrusted: bool, texts: dict) -> str:
    title = graded["title"]
    if graded["optional"] and not gradebook.OPTIONAL.search(title):
        title += texts["optional"]
    parts = [
        "<h2>"
        + html.escape(
            texts["exercise"].format(
                title=title, score=graded["score"], max=graded["max_score"]
            )
        )
        + "</h2>"
    ]
    if untrusted:
        parts.append(f"<p>{html.escape(texts['untrusted'])}</p>")
        return "\n".join(parts)
    if cell is None or cell.get("execution_count") is None:
        parts.append(f"<p>{html.escape(texts['not_run'])}</p>")
        return "\n".join(parts)
    shown, error, hidden_failed = visible_output(cell)
    if shown.strip():
        parts.append(f"<pre>{html.escape(shown)}</pre>")
    if error:
        parts.append(f"<pre>{html.escape(error)}</pre>")
    if hidden_failed:
        parts.append(f"<p>{html.escape(texts['hidden_failed'])}</p>")
    return "\n".join(parts)


def feedback_html(row: dict, nb, language: str = "en") -> str:
    """The feedback page of one gradebook row (``gradebook.rows``) from its
    autograded notebook ``nb``."""
    texts = TEXTS[language]
    cells = {nbgrader_meta(c).get("grade_id"): c for c in nb.cells if is_test_cell(c)}
    distrusted = {
        m.group(1)
        for flag in row["flags"]
        if (m := re.match(r"tamper: cell \d+ \(([^)]*)\)", flag))
    }
    head = [
        texts["title"].format(lesson=row["lesson"]),
        texts["student"].format(student=row["student"]),
        texts["handed_in"].format(when=row["submitted_at"] or "-"),
        texts["score"].format(
            score=row["score"],
            max=row["max_score"],
            core=row["core_score"],
            core_max=row["core_max"],
            opt=row["optional_score"],
            opt_max=row["optional_max"],
        ),
    ]
    body = [f"<h1>{html.escape(head[0])}</h1>"]
    body += [f"<p>{html.escape(line)}</p>" for line in head[1:]]
    for grade_id, graded in row["exercises"].items():
        body.append(
            _exercise_html(cells.get(grade_id), graded, grade_id in distrusted, texts)
        )
    notes = _flag_notes(row["flags"], texts)
    body.append(f"<h2>{html.escape(texts['notes'])}</h2>")
    body.append(
        "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"
        if notes
        else f"<p>{html.escape(texts['no_notes'])}</p>"
    )
    return (
        f'<!DOCTYPE html>\n<html lang="{language}"><head><meta charset="utf-8">'
        f"<title>{html.escape(head[0])}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "pre{background:#f6f6f6;padding:.8em;overflow-x:auto}</style></head>"
        "<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_feedback(
    course_dir: Path = COURSE_DIR, student: str = "*", lesson: str = "*"
) -> list[Path]:
    """Write the feedback page of every graded submission matching ``student`` and
    ``lesson`` (glob patterns); return the pages written."""
    course_dir = Path(course_dir)
    sources = sorted((course_dir / "source").glob("*/*.ipynb"))
    language = lessons_language(sources) if sources else "en"
    written = []
    for row in gradebook.rows(course_dir):
        if not (
            fnmatch.fnmatchcase(row["student"], student)
            and fnmatch.fnmatchcase(row["lesson"], lesson)
        ):
            continue
        executed = autograded_path(course_dir, row["student"], row["lesson"])
        try:
            nb = nbformat.read(executed, as_version=4)
        except (OSError, ValueError):  # not run (a corrupt hand-in): no outputs
            nb = nbformat.v4.new_notebook()
        folder = course_dir / "feedback" / row["student"] / row["lesson"]
        folder.mkdir(parents=True, exist_ok=True)
        page = folder / f"{row['lesson']}.html"
        page.write_text(feedback_html(row, nb, language), encoding="utf-8")
        handed_in = course_dir / "submitted" / row["student"] / row["lesson"]
        for name in ("timestamp.txt", "submission_secret.txt"):
            # what nbgrader's release_feedback reads (the secret: exchange only)
            kept = [p / name for p in (executed.parent, handed_in)]
            kept = [p for p in kept if p.exists()]
            if kept:
                shutil.copyfile(kept[0], folder / name)
        written.append(page)
    return written

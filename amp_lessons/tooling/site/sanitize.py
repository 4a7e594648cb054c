"""What a reader of the site may see of an executed lesson: never a solution.

- An exercise's solution cell keeps its stub and hint: what lies between
  ``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes nbgrader's stub (as its
  ClearSolutions does), and its outputs go.
- Hidden tests (``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``) go from every
  cell. A test cell keeps its visible source but not its output: it ran against the
  reference answer, and its table shows what is right (lesson 08 names the letters).
- Any other output that holds a line of a solution (a later cell printing the
  package's reference function, say) is replaced by a note.
- A widget becomes a static picture of its state (its images and HTML, read from the
  notebook's saved widget state) and a line saying the live one runs in JupyterLab.
- Collapsed proof cells stay collapsed (myst-nb's ``hide-input``/``hide-output`` tags);
  the Colab set-up cell goes (the page links to Colab itself), and so do the cells
  that show a learner's progress (``lesson-end``, ``learner-progress``).

Example: ``sanitize(nb, leaks=solution_lines(nbs))`` returns the page's notebook;
``solution_lines`` gives the lines no page may show.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable

import nbformat

from amp_lessons.tooling.grading.course import CODE_STUBS, TEXT_STUBS
from amp_lessons.tooling.student_edition import (  # noqa: F401 (the site's names too)
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    END_HIDDEN,
    END_SOLUTION,
    between,
    clear_hidden_tests,
    clear_solution,
    is_solution_cell,
    is_test_cell,
)

# nbgrader's stubs, in each edition's language, as the student edition has them
CODE_STUB, TEXT_STUB = CODE_STUBS["en"], TEXT_STUBS["en"]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_NOTE = (
    "A picture of this widget as the lesson left it. The live widget runs "
    "in JupyterLab (or Colab): run the lesson to move it."
)
TEST_NOTE = (
    "This check runs your answer when you run the lesson; its table is not "
    "shown here (it was produced by the reference answer)."
)
LEAK_NOTE = (
    "[output not shown on the site: it contains the answer to an exercise "
    "of the course; run the lesson to see it]"
)
# What a page says in place of what it leaves out, in each edition's language
NOTES = {
    "en": {"widget": WIDGET_NOTE, "test": TEST_NOTE, "leak": LEAK_NOTE},
    "es": {
        "widget": (
            "Una imagen de este widget tal como lo dejó la lección. El "
            "widget interactivo funciona en JupyterLab (o en Colab): ejecute "
            "la lección para moverlo."
        ),
        "test": (
            "Esta comprobación evalúa su respuesta cuando usted ejecuta la "
            "lección; su tabla no se muestra aquí (la produjo la respuesta de "
            "referencia)."
        ),
        "leak": (
            "[salida no mostrada en el sitio: contiene la respuesta a un "
            "ejercicio del curso; ejecute la lección para verla]"
        ),
    },
}
MIN_LEAK_CHARS = 12  # shorter lines ("else:", "return x") are not an answer
SETUP_TAG = "colab-setup"
# A learner's progress (the welcome's table, each lesson's last line) is nobody's on
# a static page: the site's own navigation says what comes next
LEFT_OUT_TAGS = (SETUP_TAG, "lesson-end", "learner-progress")


def _normal(text: str) -> str:
    return " ".join(text.split())


def secret_lines(nb) -> set[str]:
    """Every line of a solution block or a hidden test, whitespace-normalised."""
    lines = set()
    for cell in nb.cells:
        for begin, end in ((BEGIN_SOLUTION, END_SOLUTION), (BEGIN_HIDDEN, END_HIDDEN)):
            if begin in cell.source:
                for block in between(cell.source, begin, end)[1]:
                    lines.update(_normal(ln) for ln in block)
        if is_solution_cell(cell) and BEGIN_SOLUTION not in cell.source:
            lines.update(_normal(ln) for ln in cell.source.split("\n"))
    return lines


def student_text(nb) -> str:
    """All a student edition shows before running: sources, stubs cleared."""
    parts = []
    for cell in nb.cells:
        source = cell.source
        if is_solution_cell(cell):
            source = clear_solution(source, cell.cell_type == "code")
        parts.append(clear_hidden_tests(source))
    return _normal("\n".join(parts))


def solution_lines(nbs: Iterable) -> set[str]:
    """The lines no page may show: the non-trivial lines of every solution and hidden
    test that the student edition of no lesson shows anyway (a signature line, the
    check call a hidden test repeats)."""
    nbs = list(nbs)
    visible = "\n".join(student_text(nb) for nb in nbs)
    return {
        line
        for nb in nbs
        for line in secret_lines(nb)
        if len(line) >= MIN_LEAK_CHARS and line not in visible
    }


def _output_text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", []))
    data = output.get("data", {})
    return "\n".join(
        v if isinstance(v, str) else "".join(v)
        for k, v in data.items()
        if k.startswith("text/") or "json" in k
    )


def leaked(text: str, leaks: set[str]) -> list[str]:
    """The solution lines found in ``text`` (whitespace-normalised)."""
    flat = _normal(text)
    return sorted(line for line in leaks if line in flat)


def _widget_models(nb) -> dict:
    return nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def widget_snapshot(model_id: str, models: dict, note: str = WIDGET_NOTE) -> list:
    """Outputs showing a widget's state: each Image widget's picture and HTML widget's
    markup, in the order the widget lays them out, then the note."""
    images, html, seen = [], [], set()

    def walk(ref):
        mid = ref[len("IPY_MODEL_") :] if isinstance(ref, str) else None
        if not mid or mid in seen or mid not in models:
            return
        seen.add(mid)
        model = models[mid]
        state, name = model.get("state", {}), model.get("model_name", "")
        if name == "ImageModel":
            for buffer in model.get("buffers", []):
                if (
                    buffer.get("path") == ["value"]
                    and buffer.get("encoding") == "base64"
                ):
                    fmt = state.get("format", "png")
                    images.append((f"image/{fmt}", buffer["data"]))
        elif name in ("HTMLModel", "HTMLMathModel") and state.get("value"):
            html.append(state["value"])
        for value in state.values():
            for item in value if isinstance(value, list) else [value]:
                walk(item)

    walk("IPY_MODEL_" + model_id)
    outputs = [
        nbformat.v4.new_output("display_data", data={mime: data})
        for mime, data in images
        if mime in ("image/png", "image/jpeg")
    ]
    if html:
        outputs.append(
            nbformat.v4.new_output("display_data", data={"text/html": "\n".join(html)})
        )
    outputs.append(nbformat.v4.new_output("stream", name="stdout", text=f"[{note}]\n"))
    return outputs


def _tags(cell) -> list:
    return cell.setdefault("metadata", {}).setdefault("tags", [])


def sanitize(nb, leaks: set[str], banner: str | None = None, lang: str = "en"):
    """A copy of the executed lesson ``nb`` that a reader may see (module docstring).

    ``leaks`` are the lines no output may hold (``solution_lines``); ``banner`` is
    markdown put under the title (what executed the lesson, the Colab link); ``lang``
    the language of the notes put in place of what is left out ("en", "es").
    """
    notes = NOTES[lang]
    nb = copy.deepcopy(nb)
    models = _widget_models(nb)
    cells = []
    for cell in nb.cells:
        if set(LEFT_OUT_TAGS) & set(cell.get("metadata", {}).get("tags", [])):
            continue
        if is_solution_cell(cell):
            cell.source = clear_solution(cell.source, cell.cell_type == "code", lang)
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        cell.source = clear_hidden_tests(cell.source)
        if cell.cell_type == "code":
            if is_test_cell(cell):
                cell.outputs = [
                    nbformat.v4.new_output(
                        "stream", name="stdout", text=f"[{notes['test']}]\n"
                    )
                ]
            outputs = []
            for output in cell.outputs:
                view = output.get("data", {}).get(WIDGET_VIEW)
                if view:
                    outputs.extend(
                        widget_snapshot(
                            view.get("model_id", ""), models, notes["widget"]
                        )
                    )
                elif leaked(_output_text(output), leaks):
                    outputs.append(
                        nbformat.v4.new_output(
                            "stream", name="stdout", text=notes["leak"] + "\n"
                        )
                    )
                else:
                    outputs.append(output)
            cell.outputs = outputs
            shown = cell.get("metadata", {}).get("jupyter", {})
            if shown.get("source_hidden"):
                _tags(cell).append("hide-input")
            if shown.get("outputs_hidden"):
                _tags(cell).append("hide-output")
        cells.append(cell)
    if banner and cells and cells[0].cell_type == "markdown":
        cells.insert(1, nbformat.v4.new_markdown_cell(banner))
    nb.cells = cells
    nb.metadata.pop("widgets", None)  # no live widget: its scripts come from CDNs
    return nb


def strip_colab_line(markdown: str, start: str) -> str:
    """The first cell without its "Run it without installing" line, or any line that
    links to Colab (a translated one): the page has its own, under the title."""
    markdown = re.sub(rf"\n*^{re.escape(start)}.*$", "", markdown, flags=re.M)
    return re.sub(
        r"\n*^.*\]\(https://colab\.research\.google\.com/.*$", "", markdown, flags=re.M
    )

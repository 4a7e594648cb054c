"""The Spanish edition (notebooks/es/): every markdown cell and comment of every
lesson (the entry lesson and 00-11) translated, none stale, the generated notebooks
exactly what their catalogues give, and the code untouched. Each check is shown
catching its defect on a small fixture.
"""

from __future__ import annotations

import io
import re
import tokenize

import nbformat
import pytest

from amp_lessons.tooling import translations

pytest.importorskip("polib")

ENGLISH = translations.english_notebooks()
# words far more frequent in one language than the other: a cell left in English
# shows many of the first and few of the second
ENGLISH_WORDS = {
    "the",
    "and",
    "of",
    "is",
    "are",
    "with",
    "this",
    "that",
    "which",
    "what",
    "you",
    "it",
    "to",
    "in",
    "on",
    "not",
    "for",
}
SPANISH_WORDS = {
    "el",
    "la",
    "los",
    "las",
    "de",
    "del",
    "que",
    "y",
    "es",
    "en",
    "con",
    "un",
    "una",
    "por",
    "para",
    "no",
    "se",
    "lo",
    "su",
}
# synonyms the glossary (notebooks/es/GLOSARIO.md) rules out
OFF_GLOSSARY = [
    "retropropagación",
    "sobreflujo",
    "subdesbordamiento",
    "desbordamiento inferior",
    "núcleos tensoriales",
    "pase hacia adelante",
    "escalado de pérdida ",
    "tú ",
]


def words(text: str) -> list[str]:
    text = re.sub(r"`[^`]*`|\([^)]*\.ipynb\)|https?://\S+", " ", text)
    return re.findall(r"[a-záéíóúñü]+", text.lower())


def left_in_english(text: str) -> bool:
    found = words(text)
    english = sum(w in ENGLISH_WORDS for w in found)
    spanish = sum(w in SPANISH_WORDS for w in found)
    return len(found) >= 8 and english > spanish


def code_without_comments(source: str) -> str:
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return tokenize.untokenize(
            (t.type, t.string) for t in tokens if t.type != tokenize.COMMENT
        )
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source


def shown_strings_of(path, kind: str = "text") -> dict[str, dict[str, str]]:
    """{cell id: {English literal: its translation}} from the lesson's catalogue (the
    shown strings, or with ``kind="docstring"`` the exercises' docstrings)."""
    import polib

    found: dict[str, dict[str, str]] = {}
    for entry in polib.pofile(str(translations.catalogue_path(path.stem))):
        if entry.msgctxt.endswith(f" {kind}") and entry.msgstr:
            found.setdefault(entry.msgctxt.split()[0], {})[entry.msgid] = entry.msgstr
    return found


@pytest.mark.parametrize("path", ENGLISH, ids=lambda p: p.stem)
def test_every_cell_is_translated_and_none_is_stale(path):
    problems = translations.problems(path)
    assert not problems, "run `make translations` and translate:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize("path", ENGLISH, ids=lambda p: p.stem)
def test_the_spanish_notebook_is_generated_from_its_catalogue(path):
    spanish = nbformat.read(translations.EDITION / path.name, as_version=4)
    expected = translations.translated(path)
    assert [c.source for c in spanish.cells] == [c.source for c in expected.cells], (
        f"notebooks/es/{path.name} is not what its catalogue gives: run "
        "`make translations`"
    )
    assert [c.metadata for c in spanish.cells] == [c.metadata for c in expected.cells]


@pytest.mark.parametrize("path", ENGLISH, ids=lambda p: p.stem)
def test_no_markdown_cell_is_left_in_english(path):
    spanish = nbformat.read(translations.EDITION / path.name, as_version=4)
    english = nbformat.read(path, as_version=4)
    left = [
        i
        for i, (es, en) in enumerate(zip(spanish.cells, english.cells, strict=True))
        if es.cell_type == "markdown"
        and (
            left_in_english(es.source)
            or (len(words(en.source)) >= 8 and es.source == en.source)
        )
    ]
    assert not left, f"{path.name}: markdown cells {left} are still in English"


@pytest.mark.parametrize("path", ENGLISH, ids=lambda p: p.stem)
def test_code_is_the_english_code(path):
    spanish = nbformat.read(translations.EDITION / path.name, as_version=4)
    english = nbformat.read(path, as_version=4)
    assert len(spanish.cells) == len(english.cells)
    switch = translations.SWITCH.format(lang="es")
    texts = shown_strings_of(path)
    docstrings = shown_strings_of(path, "docstring")
    for index, (es, en) in enumerate(zip(spanish.cells, english.cells, strict=True)):
        assert es.cell_type == en.cell_type and es.id == en.id
        if es.cell_type == "code":
            source = es.source.replace("\n" + switch, "")
            english_code = translations._translate_texts(
                en.source, texts.get(en.id, {}), docstrings.get(en.id, {})
            )
            assert code_without_comments(source) == code_without_comments(
                english_code
            ), (
                f"{path.name}, cell {index}: the Spanish code differs "
                "beyond comments and the strings it shows"
            )
    assert sum(switch in c.source for c in spanish.cells) == 1


def test_pending_lessons_are_exactly_the_untranslated_ones():
    """A lesson leaves PENDING once its catalogue is complete, and only then; every
    other lesson of the edition has its Spanish notebook (today none is pending)."""
    pending = [
        p
        for p in translations.english_notebooks(pending=True)
        if p.stem in translations.PENDING
    ]
    assert sorted(p.stem for p in pending) == sorted(translations.PENDING)
    assert all(translations.problems(p) for p in pending)
    assert not any((translations.EDITION / p.name).exists() for p in pending)
    assert all((translations.EDITION / p.name).exists() for p in ENGLISH)


def test_the_glossary_terms_are_used():
    text = "\n".join(
        c.source
        for p in ENGLISH
        for c in nbformat.read(translations.EDITION / p.name, 4).cells
    ).lower()
    found = [term for term in OFF_GLOSSARY if term in text]
    assert not found, f"terms the glossary rules out: {found}"
    assert "propagación hacia atrás" in text and "escalado de la pérdida" in text


# ---- each check can fail ----------------------------------------------------------


def fixture_notebook(first_cell: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(first_cell, id="c000"),
        nbformat.v4.new_code_cell(
            "x = 1  # one comment for the reader\n"
            "### BEGIN SOLUTION\nimport amp_lessons",
            id="c001",
        ),
    ]
    return nb


def test_a_changed_cell_is_reported_stale_and_named(tmp_path):
    import polib

    path = tmp_path / "00_fixture.ipynb"
    nbformat.write(fixture_notebook("## A heading\n\nThe first words."), path)
    assert translations.update(path, tmp_path) == (2, 0)
    assert [p.split(":")[0] for p in translations.problems(path, tmp_path)] == [
        "missing",
        "missing",
    ]
    po = polib.pofile(str(tmp_path / "00_fixture.po"))
    for entry in po:
        entry.msgstr = {
            "markdown": "## Un título\n\nLas primeras palabras.",
            "comment": "un comentario para el lector",
        }[entry.msgctxt.split()[1]]
    po.save()
    assert translations.problems(path, tmp_path) == []
    spanish = translations.translated(path, tmp_path)
    assert spanish.cells[0].source == "## Un título\n\nLas primeras palabras."
    assert spanish.cells[1].source.startswith(
        "x = 1  # un comentario para el lector\n### BEGIN SOLUTION\n"
        'import amp_lessons\nimport amp_lessons\namp_lessons.set_language("es")'
    )

    nbformat.write(fixture_notebook("## A heading\n\nThe first words, changed."), path)
    problems = translations.problems(path, tmp_path)
    assert problems == [
        "stale: 00_fixture, cell 0 (c000, markdown: '## A heading') changed after its "
        "translation: run `make translations` and translate it again"
    ]
    assert translations.update(path, tmp_path) == (0, 1)  # kept, marked fuzzy
    assert translations.problems(path, tmp_path) == problems
    assert translations.translated(path, tmp_path).cells[0].source.endswith("changed.")


def test_english_left_in_a_cell_is_caught():
    assert left_in_english("This is the cell that a translator forgot to translate.")
    assert not left_in_english("Esta es la celda que el traductor tradujo entera.")
    assert not left_in_english("`torch.amp.autocast` y `GradScaler`")  # too short


def test_code_changed_beyond_comments_is_caught():
    same = code_without_comments("x = 1  # uno\n") == code_without_comments(
        "x = 1  # one\n"
    )
    other = code_without_comments("x = 2  # uno\n") == code_without_comments(
        "x = 1  # one\n"
    )
    assert same and not other


def test_tool_comments_stay_as_they_are():
    kept = translations.units(fixture_notebook("# t"))
    assert [u.text for u in kept if u.kind == "comment"] == [
        "one comment for the reader"
    ]  # not '### BEGIN SOLUTION'


SHOWN = """%matplotlib inline
print(f"{n:3d} gradients of {total}, {share:.0%} lost")
ax.set_title("an inf at steps 5 and 11")
ax.plot(xs, label="clean data")
ax.set_xlabel("step")
name = "not shown to anyone"
print("fp16", 2)
print("loss {x}".format(x=1))
"""


def test_the_strings_a_reader_sees_are_catalogued_and_nothing_else():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SHOWN, id="c000")]
    assert [u.text for u in translations.units(nb) if u.kind == "text"] == [
        'f"{n:3d} gradients of {total}, {share:.0%} lost"',
        '"an inf at steps 5 and 11"',
        '"clean data"',
    ]  # one word or none: code


def test_a_translated_string_keeps_its_fields_and_is_put_in_place(tmp_path):
    import polib

    path = tmp_path / "00_fixture.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SHOWN, id="c000")]
    nbformat.write(nb, path)
    translations.update(path, tmp_path)
    po = polib.pofile(str(tmp_path / "00_fixture.po"))
    spanish = {
        # reordered
        'f"{n:3d} gradients of {total}, {share:.0%} lost"': (
            'f"{share:.0%} perdido: {n:3d} gradientes de {total}"'
        ),
        '"an inf at steps 5 and 11"': '"un inf en los pasos 5 y 11"',
        '"clean data"': '"datos limpios"',
    }
    for entry in po:
        entry.msgstr = spanish[entry.msgid]
    po.save()
    assert translations.problems(path, tmp_path) == []
    source = translations.translated(path, tmp_path).cells[0].source
    assert 'print(f"{share:.0%} perdido: {n:3d} gradientes de {total}")' in source
    assert 'ax.plot(xs, label="datos limpios")' in source
    assert source.startswith("%matplotlib inline\n")

    po = polib.pofile(str(tmp_path / "00_fixture.po"))
    next(
        e for e in po if e.msgid.startswith("f")
    ).msgstr = (
        'f"{share:.0%} perdido: "\n      f"{n:3d} gradientes de {total}"'  # two lines
    )
    po.save()
    assert translations.problems(path, tmp_path) == []
    for wrong in (
        'f"{n:3d} gradientes de {total}"',  # a field lost
        'f"{n:3d} gradientes "\n  f"de {total}"',  # over two lines, too
        'f"{n:3d} gradientes de {total}, {share:.0%} perdidos',  # no quote
        '"{n} gradientes de {total}, {share} perdidos"',
    ):  # not an f-string
        po = polib.pofile(str(tmp_path / "00_fixture.po"))
        next(e for e in po if e.msgid.startswith("f")).msgstr = wrong
        po.save()
        assert [p.split(":")[0] for p in translations.problems(path, tmp_path)] == [
            "broken"
        ], wrong


HEADER = """\
print(f"{'step':>4s} {'loss scale':>12s} {n:6d}  skipped")
"""


def test_a_header_field_may_be_translated_but_not_a_real_field(tmp_path):
    """A field that is only a string constant (a column header padded to its width)
    is text: one-word headers make the f-string a unit, and a translation may change
    the constant's words, not its format spec, nor any real field."""
    import polib

    path = tmp_path / "00_fixture.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(HEADER, id="c000")]
    nbformat.write(nb, path)
    assert [u.text for u in translations.units(nb) if u.kind == "text"] == [
        "f\"{'step':>4s} {'loss scale':>12s} {n:6d}  skipped\""
    ]  # one unit: the constants inside it are not units of their own
    translations.update(path, tmp_path)

    def verdict(msgstr: str) -> list[str]:
        po = polib.pofile(str(tmp_path / "00_fixture.po"))
        po[0].msgstr = msgstr
        po.save()
        return [p.split(":")[0] for p in translations.problems(path, tmp_path)]

    spanish = "f\"{'paso':>4s} {'escala':>12s} {n:6d}  omitidos\""
    assert verdict(spanish) == []
    source = translations.translated(path, tmp_path).cells[0].source
    assert source == f"print({spanish})\n"
    assert verdict("f\"{n:6d} {'escala':>12s} {'paso':>4s}  omitidos\"") == []  # moved
    for wrong in (
        "f\"{'paso':>4s} {'escala':>12s} {m:6d}  omitidos\"",  # a real field changed
        "f\"{'paso':>4s} {'escala':>12s} {n:6d} {n:6d} omitidos\"",  # one added
        "f\"{'paso':>4s} {'escala':>16s} {n:6d}  omitidos\"",  # a header's width
        "f\"{'paso':>4s} {'escala'!r:>12s} {n:6d}  omitidos\"",  # a conversion
        "f\"{'paso':>4s} {escala:>12s} {n:6d}  omitidos\"",  # a name, not a constant
        "f\"{'paso':>4s} {n:6d}  omitidos\"",  # a header lost
    ):
        assert verdict(wrong) == ["broken"], wrong


def exercise_prose(source: str) -> list[str]:
    """The words a student reads in an exercise cell: its docstrings and comments
    (a tool's comment, ``### BEGIN SOLUTION``, excluded)."""
    texts = [lit for _, _, lit in translations._docstrings(source)]
    for _, _, comment in translations._comments(source):
        if translations._prose(comment) is not None:
            texts.append(translations._prose(comment))
    return texts


@pytest.mark.parametrize("path", ENGLISH, ids=lambda p: p.stem)
def test_exercise_docstrings_and_comments_are_spanish(path):
    """What a student reads while solving an exercise (the function's docstring, the
    comments of its cell, the stub nbgrader leaves) is Spanish: a docstring or comment
    of three words or more equal to its English one, or with more English words than
    Spanish ones, is a defect."""
    from amp_lessons.tooling.grading.course import CODE_STUBS

    spanish = nbformat.read(translations.EDITION / path.name, as_version=4)
    english = nbformat.read(path, as_version=4)
    left = []
    for index, (es, en) in enumerate(zip(spanish.cells, english.cells, strict=True)):
        if es.cell_type != "code" or not translations._is_exercise(es):
            continue
        pairs = zip(exercise_prose(es.source), exercise_prose(en.source), strict=True)
        for es_text, en_text in pairs:
            found = words(es_text)
            english_words = sum(w in ENGLISH_WORDS for w in found)
            if (len(found) >= 3 and es_text == en_text) or english_words > sum(
                w in SPANISH_WORDS for w in found
            ):
                left.append(f"cell {index}: {es_text!r}")
    assert not left, f"{path.name}: English in exercise cells:\n" + "\n".join(left)
    assert "ESCRIBA SU CÓDIGO AQUÍ" in CODE_STUBS["es"]


EXERCISE = '''def double(x):
    """Twice the number `x`, as a float."""
    ### BEGIN SOLUTION
    return 2.0 * x  # a float, even for an int
    ### END SOLUTION
'''


def test_an_exercise_docstring_is_a_unit_and_is_put_in_place(tmp_path):
    """The docstring of a function in a solution cell is catalogued (in any other
    code cell it is code, left alone); its translation replaces the literal, the code
    is kept, and a translation that is not one plain string literal is broken."""
    import polib

    path = tmp_path / "00_fixture.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(EXERCISE, id="c000"),
        nbformat.v4.new_code_cell(EXERCISE.replace("double", "triple"), id="c001"),
    ]
    nb.cells[0].metadata["nbgrader"] = {"solution": True, "grade": False}
    nbformat.write(nb, path)
    assert [(u.cell_id, u.kind, u.text) for u in translations.units(nb)] == [
        ("c000", "comment", "a float, even for an int"),
        ("c000", "docstring", '"""Twice the number `x`, as a float."""'),
        ("c001", "comment", "a float, even for an int"),
    ]
    translations.update(path, tmp_path)

    def verdict(docstring: str) -> list[str]:
        po = polib.pofile(str(tmp_path / "00_fixture.po"))
        for entry in po:
            entry.msgstr = (
                docstring if entry.msgctxt.endswith("docstring") else "un float"
            )
        po.save()
        return [p.split(":")[0] for p in translations.problems(path, tmp_path)]

    assert verdict('"""El doble del número `x`, como float."""') == []
    source = translations.translated(path, tmp_path).cells[0].source
    assert '"""El doble del número `x`, como float."""' in source
    assert "return 2.0 * x  # un float" in source
    for wrong in (
        'f"""El doble de {x}."""',  # an f-string is no docstring
        '"""El doble de `x`.',  # no closing quotes
        '"""El doble.""" + x',  # code
    ):
        assert verdict(wrong) == ["broken"], wrong

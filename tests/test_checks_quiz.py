"""Lesson 08's grader (amp_lessons.teaching.checks.quiz): reference, known-wrong answers
with the reason for each wrong choice, the stub, the questions of
amp_lessons.teaching.quiz, and fair grading: one point per question in notebook 08, and
no table that prints the right letter."""

import contextlib
import io
import json
import re
import sys

import pytest
from grader_harness import grader_tests
from paths import NOTEBOOKS_DIR

from amp_lessons.teaching import self_study
from amp_lessons.teaching.checks import check_quick_check
from amp_lessons.teaching.quiz import QUESTIONS, QUICK_CHECK, quick_check_text

NOTEBOOK = NOTEBOOKS_DIR / "08_quick_check.ipynb"

# --- reference solutions (copy into the solution cells) -------------------------


def quick_check_answers():
    return {
        "autocast_scope": "b",
        "why_scale": "c",
        "step_with_inf": "d",
        "update_after_overflow": "a",
        "memory_saving": "b",
        "bf16_scaler": "c",
        "backward_call": "a",
        "where_fastest": "d",
        "deprecated_api": "b",
        "where_clip": "c",
    }


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def quiz_all_a():
    return {qid: "a" for qid in QUICK_CHECK}


def quiz_one_wrong():
    return {**quick_check_answers(), "autocast_scope": "a", "bf16_scaler": "d"}


def quiz_older_gpus():
    return {**quick_check_answers(), "where_fastest": "b"}


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "quiz": (
        check_quick_check,
        quick_check_answers,
        [
            (quiz_all_a, False, "the docs advise against wrapping backward"),
            (quiz_one_wrong, True, "its advantage is range, not precision"),
            # P100: fp16 at 2x fp32; consumer Pascal: 1/64 (the option is wrong both
            # ways, and the hint says so)
            (quiz_older_gpus, True, "twice its fp32 rate (21.2 vs 10.6 TFLOPS)"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_quiz_has_one_right_choice_and_a_reason_for_every_wrong_one():
    for _, choices in QUESTIONS.values():
        reasons = [why for _, why in choices.values()]
        assert sum(not why for why in reasons) == 1
    text = quick_check_text()
    assert all(qid in text for qid in QUICK_CHECK)


# --- fair grading: one point per question, and never the right letter --------------


def right_letter(qid):
    return next(k for k, (_, why) in QUESTIONS[qid][1].items() if not why)


def wrong_letter(qid):
    return next(k for k, (_, why) in QUESTIONS[qid][1].items() if why)


def quiz_all_wrong():
    return {qid: wrong_letter(qid) for qid in QUESTIONS}


VISIBLE = list(QUESTIONS)[:5]
HIDDEN = list(QUESTIONS)[5:]


def test_visible_table_never_prints_the_right_choice(capsys):
    with pytest.raises(AssertionError):
        check_quick_check(quiz_all_wrong)
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    # a failed table is compact (at most 15 lines): each hint while it fits, and
    # the failing cases that did not fit named on one line
    explained, more = 0, out.split("more failing:")[-1]
    for qid in VISIBLE:
        choices = QUESTIONS[qid][1]
        row = [line for line in out.splitlines() if line.split()[:1] == [qid]]
        assert row or qid in more
        assert not row or (
            "(not shown)" in row[0] and row[0].split()[-2] == wrong_letter(qid)
        )
        assert choices[right_letter(qid)][0] not in flat  # the right choice's text
        chosen, why = choices[wrong_letter(qid)]
        explained += f"({wrong_letter(qid)}) {chosen}: {why}" in flat  # the chosen
    assert explained >= 2 and len(out.splitlines()) <= 14


@pytest.mark.parametrize("qid", QUESTIONS)
def test_one_question_at_a_time(qid, capsys, monkeypatch):
    monkeypatch.setenv(self_study.ENV, "0")  # in a class: hidden tests grade five
    answers = quick_check_answers()
    check_quick_check(quick_check_answers, qid)
    check_quick_check(quick_check_answers, qid, hidden=True)
    capsys.readouterr()
    wrong = {**answers, qid: wrong_letter(qid)}
    if qid in VISIBLE:  # graded where the student sees it
        with pytest.raises(AssertionError, match="the case failed"):
            check_quick_check(lambda: wrong, qid)
    else:  # the visible case only checks that a letter was given ...
        check_quick_check(lambda: wrong, qid)
        assert "hidden tests" in capsys.readouterr().out
        with pytest.raises(AssertionError, match="the case failed"):
            check_quick_check(lambda: {**answers, qid: "z"}, qid)
    with pytest.raises(AssertionError, match="the case failed"):  # ... these grade
        check_quick_check(lambda: wrong, qid, hidden=True)
    out = capsys.readouterr().out  # of wrong answers only: no right letter in it
    rows = [
        line.split()
        for line in out.splitlines()
        if line.split()[:1] == [qid] and "answered" not in line
    ]  # the letter-only row of the visible case
    assert rows and all(row[1:3] == ["(not", "shown)"] for row in rows)
    assert right_letter(qid) not in [row[-2] for row in rows]


def graded_cells():
    notebook = json.loads(NOTEBOOK.read_text())
    return [
        cell
        for cell in notebook["cells"]
        if cell["metadata"].get("nbgrader", {}).get("grade")
    ]


def test_notebook_gives_one_point_per_question_and_says_so():
    cells = graded_cells()
    assert [c["metadata"]["nbgrader"]["points"] for c in cells] == [1] * len(QUESTIONS)
    asked = [
        re.search(
            r'check_quick_check\(quick_check_answers, "(\w+)"\)', "".join(c["source"])
        ).group(1)
        for c in cells
    ]
    assert asked == list(QUESTIONS)
    text = " ".join(
        " ".join(c["source"])
        for c in json.loads(NOTEBOOK.read_text())["cells"]
        if c["cell_type"] == "markdown"
    )
    assert "one per question, one point each" in " ".join(text.split())


def test_one_wrong_answer_costs_one_point():
    # each graded cell, run in full (hidden tests too) as nbgrader's autograde does
    def score(answers):
        points = 0
        for cell in graded_cells():
            namespace = {
                "check_quick_check": check_quick_check,
                "quick_check_answers": answers,
            }
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec("".join(cell["source"]), namespace)
            except AssertionError:
                continue
            points += cell["metadata"]["nbgrader"]["points"]
        return points

    assert score(quick_check_answers) == 10
    assert score(quiz_one_wrong) == 8  # one visible and one hidden question wrong
    assert score(quiz_all_wrong) == 0


@pytest.mark.parametrize("written", ["B", "(b)", " b ", "b)"])
def test_a_letter_in_another_form_is_wrong_and_told_how_to_write_it(written, capsys):
    with pytest.raises(AssertionError, match="the case failed"):
        check_quick_check(lambda: {"autocast_scope": written}, "autocast_scope")
    out = " ".join(capsys.readouterr().out.split())
    assert f"write the letter alone, in lower case: 'b', not {written!r}" in out


def test_no_choice_gives_the_right_one_away_by_its_length():
    # a learner picks the longest choice when unsure: the right one must not be
    # much longer than the longest wrong one
    for qid, (_question, choices) in QUESTIONS.items():
        right = next(text for text, why in choices.values() if not why)
        wrong = max(len(text) for text, why in choices.values() if why)
        assert len(right) <= 1.6 * wrong, qid


@pytest.mark.parametrize("qid", sorted(set(QUESTIONS) - set(VISIBLE)))
def test_on_your_own_the_visible_cell_grades_every_question(qid, capsys, monkeypatch):
    # no instructor, no hidden tests: a wrong letter fails where the learner sees it
    # (and so progress never records it as passed)
    monkeypatch.setenv(self_study.ENV, "1")
    wrong = {**quick_check_answers(), qid: wrong_letter(qid)}
    with pytest.raises(AssertionError, match="the case failed"):
        check_quick_check(lambda: wrong, qid)
    out = capsys.readouterr().out
    assert "hidden tests" not in out and right_letter(qid) not in out.split()
    check_quick_check(quick_check_answers, qid)


def test_on_your_own_means_the_learners_lab_or_colab(monkeypatch):
    monkeypatch.delenv(self_study.ENV, raising=False)
    assert not self_study.on_your_own()
    monkeypatch.setitem(sys.modules, "google.colab", object())
    assert self_study.on_your_own()
    monkeypatch.setenv(self_study.ENV, "0")  # grading says so, even in Colab
    assert not self_study.on_your_own()

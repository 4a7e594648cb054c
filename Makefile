# Two commands for everything: `make lab` (open the course) and `make test` (prove it).
# Each one sets up .venv by itself first (amp_lessons/tooling/bootstrap.py), so either
# works on a fresh clone.
PYTHON ?= python3
VENV_PY := .venv/bin/python

.PHONY: lab test test-notebook setup setup-dev student grade slides bench clean

setup:
	@$(PYTHON) amp_lessons/tooling/bootstrap.py

setup-dev:
	@$(PYTHON) amp_lessons/tooling/bootstrap.py dev,instructor

lab: setup
	$(VENV_PY) -m amp_lessons.tooling.lab

test: setup-dev
	$(VENV_PY) -m pytest

# One notebook under nbval, e.g. `make test-notebook NB=notebooks/02_underflow.ipynb`
test-notebook: setup-dev
	$(VENV_PY) -m pytest $(NB)

bench: setup
	$(VENV_PY) -m amp_lessons bench --json bench.json

# Teaching (notebooks/INSTRUCTORS.md): the student edition into student/, autograding
# of what is filed in build/course/submitted/, offline slide decks into build/slides/.
# `make grade` runs each submission in a bubblewrap sandbox (apt-get install
# bubblewrap) and refuses without one; GRADE_ARGS=--unsafe-no-sandbox overrides that.
GRADE_ARGS ?=
student: setup-dev
	$(VENV_PY) -m amp_lessons.grading student

grade: setup-dev
	$(VENV_PY) -m amp_lessons.grading autograde $(GRADE_ARGS)

slides: setup-dev
	$(VENV_PY) -m amp_lessons.grading slides

clean:
	rm -rf .venv student build

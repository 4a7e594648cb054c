# Two commands for everything: `make lab` (open the course) and `make test` (prove it).
# Each one sets up .venv by itself first (amp_lessons/tooling/bootstrap.py), so either
# works on a fresh clone.
PYTHON ?= python3
VENV_PY := .venv/bin/python

.PHONY: lab lab-instructor test test-newest-torch test-newest-torch-env test-newest-torch-tests test-notebook setup setup-dev student grade slides site \
	translations bench gpu-check gpu-wheels colab-edition clean

setup:
	@$(PYTHON) amp_lessons/tooling/bootstrap.py

setup-dev:
	@$(PYTHON) amp_lessons/tooling/bootstrap.py dev,instructor,fp8,site

# `make lab` opens the learner's own copy of the lessons, the student edition (no
# solutions, no hidden tests) in my-course/en/, made the first time and never
# written over; `make lab EDITION=es` the Spanish one, my-course/es/ (EDITION: see
# below). `make lab-instructor` opens the course's own solved lessons, notebooks/.
lab: setup
	$(VENV_PY) -m amp_lessons.tooling.lab --edition $(EDITION)

lab-instructor: setup
	$(VENV_PY) -m amp_lessons.tooling.lab --instructor --edition $(EDITION)

# Two workers (pytest-xdist): tests/conftest.py keeps each file, each notebook and the
# tests that share the lesson runs whole on one worker.
TEST_WORKERS ?= 2
# the lessons these targets run record nobody's progress (tests/conftest.py says so
# too; a notebook named alone, as test-notebook does, never loads it)
test test-notebook test-newest-torch-tests: export AMP_LESSONS_PROGRESS = off
test: setup-dev
	$(VENV_PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

# The English lessons (nbval; make test runs both editions on the pinned torch) and
# the parity tests (the scaler, the formats, the fp8 twin, each against torch) on the
# newest torch requirements.txt resolves to: what a newcomer's `pip install` gets. A second environment, .venv-newest, beside .venv, with
# the course from this folder on PYTHONPATH (no second editable install racing the
# first one's build files: CI makes this environment while `make test` runs).
NEWEST_PY := .venv-newest/bin/python
PARITY_TESTS := tests/test_scaler.py tests/test_scaler_vs_torch.py tests/test_formats.py \
	tests/test_fp8.py
# NEWEST_INSTALL: the installer (.ci/run passes uv's, which takes seconds)
NEWEST_INSTALL ?= $(NEWEST_PY) -m pip install -q --disable-pip-version-check
test-newest-torch-env:
	@test -x $(NEWEST_PY) || $(PYTHON) -m venv .venv-newest
	$(NEWEST_INSTALL) --upgrade -r requirements.txt 'pytest<9.2' pytest-timeout pytest-xdist

test-newest-torch: test-newest-torch-env test-newest-torch-tests

# The tests alone, in the environment as it is (.ci/run has just installed it)
test-newest-torch-tests:
	@$(NEWEST_PY) -c "import torch; print('newest torch:', torch.__version__)"
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(NEWEST_PY) -m pytest \
		-n $(TEST_WORKERS) --dist loadgroup $(wildcard notebooks/*.ipynb) $(PARITY_TESTS)

# One notebook under nbval, e.g. `make test-notebook NB=notebooks/02_underflow.ipynb`
test-notebook: setup-dev
	$(VENV_PY) -m pytest $(NB)

bench: setup
	$(VENV_PY) -m amp_lessons bench --json bench.json

# The whole GPU proof in one run, at most 8 minutes on one H100/H200: the gpu tests,
# every lesson executed (Spanish 00 and 06 too), the bench, the ladder (AMP at full
# speed), and notebooks/results/gpu_check_<gpu>.md (see notebooks/results/README.md).
# Without CUDA it stops at once with exit status 2. `python -m amp_lessons gpu-check
# --plan` lists the steps and what a GPU machine would lack, here, on the CPU.
# On a GPU machine that cannot install packages but whose Python already has torch
# with CUDA: `make gpu-check GPU_PYTHON=python3` uses that Python and skips the set-up.
GPU_PYTHON ?=
# torchao for the GPU machine's torch (2.11+; 0.18 is the course's range), and what
# runs the lessons with its dependencies, for that machine's Python (its image lacks
# them), downloaded here into build/gpu-wheels/ (about 23 MB), which gpu-check
# installs from: no network there. It installs torchao, and each other wheel whose
# distribution that Python lacks.
TORCHAO_WHEEL ?= torchao==0.18.0
GPU_PYTHON_VERSION ?= 3.12
RUNNER_WHEELS := nbclient nbformat ipykernel ipywidgets
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
gpu-wheels: setup
	rm -rf build/gpu-wheels
	$(VENV_PY) -m pip download -q --no-deps -d build/gpu-wheels '$(TORCHAO_WHEEL)'
	$(VENV_PY) -m pip download -q --only-binary=:all: --implementation cp \
	  --python-version $(GPU_PYTHON_VERSION) $(GPU_PLATFORMS:%=--platform %) \
	  -d build/gpu-wheels $(RUNNER_WHEELS)

gpu-check:
ifeq ($(GPU_PYTHON),)
	@$(PYTHON) amp_lessons/tooling/bootstrap.py dev
	$(VENV_PY) -m amp_lessons gpu-check
else
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(GPU_PYTHON) -m amp_lessons gpu-check
endif

# Teaching (notebooks/INSTRUCTORS.md): the student edition into student/, autograding
# of what is filed in build/course/submitted/, offline slide decks into build/slides/.
# `make grade` runs each submission in a bubblewrap sandbox (apt-get install
# bubblewrap) and refuses without one; GRADE_ARGS=--unsafe-no-sandbox overrides that.
# EDITION=es does the same for the Spanish edition (notebooks/es/), in a course of its
# own: build/course-es/, student/es/, build/slides/es/.
# SLIDES_ARGS=03_loss_scaling builds one lesson's decks (presenter and handout).
GRADE_ARGS ?=
STUDENT_ARGS ?=
SLIDES_ARGS ?=
EDITION ?= en
ifeq ($(EDITION),es)
EDITION_ARGS := --notebooks notebooks/es --course build/course-es
STUDENT_OUT := --out student/es
SLIDES_OUT := --out build/slides/es
else ifneq ($(EDITION),en)
$(error EDITION=$(EDITION): the course has the editions en (notebooks/) and es (notebooks/es/))
endif
student: setup-dev
	$(VENV_PY) -m amp_lessons.grading $(EDITION_ARGS) student $(STUDENT_OUT) $(STUDENT_ARGS)

grade: setup-dev
	$(VENV_PY) -m amp_lessons.grading $(EDITION_ARGS) autograde $(GRADE_ARGS)

slides: setup-dev
	$(VENV_PY) -m amp_lessons.grading $(EDITION_ARGS) slides $(SLIDES_OUT) $(SLIDES_ARGS)

# The Spanish edition after an English notebook changed: new and changed cells into
# notebooks/es/po/*.po (changed ones keep their old translation, marked fuzzy), then,
# once they are translated, notebooks/es/*.ipynb regenerated and checked.
translations: setup-dev
	$(VENV_PY) -m amp_lessons.tooling.translations update
	$(VENV_PY) -m amp_lessons.tooling.translations build
	$(VENV_PY) -m amp_lessons.tooling.translations check

# The course as an offline website in build/site/ (README, "Read it without
# installing"), its Spanish edition in build/site/es/: every lesson executed here
# first, or, with SITE_ARGS="--executed DIR", built in seconds from DIR/<lesson>.ipynb
# and DIR/es/<lesson>.ipynb executed before
# (`python -m amp_lessons.tooling.site execute DIR` records what ran them).
# REPOSITORY=owner/name (what the site workflow passes, from GITHUB_REPOSITORY): the
# Colab links open that repository's lessons, from the branch `colab` that
# `make colab-edition` fills; unset, pyproject.toml's repository, on main.
SITE_ARGS ?=
REPOSITORY ?=
site:
	@$(PYTHON) amp_lessons/tooling/bootstrap.py site
	$(VENV_PY) -m amp_lessons.tooling.site $(if $(REPOSITORY),--repository $(REPOSITORY)) \
		$(SITE_ARGS)

# The lessons as Colab opens them, into build/colab/: each set-up cell installs
# REPOSITORY at REF (default: this commit). The site workflow pushes it to `colab`.
REF ?= $(shell git rev-parse HEAD 2>/dev/null)
colab-edition: setup
	$(VENV_PY) -m amp_lessons.tooling.colab --edition build/colab \
		--repository "$(REPOSITORY)" --ref "$(REF)"

clean:
	rm -rf .venv .venv-newest student build

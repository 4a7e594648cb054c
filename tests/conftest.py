import os

import pytest
import torch

# No test records a learner's progress (amp_lessons.teaching.progress): every kernel,
# JupyterLab and subprocess the tests start inherits this
os.environ["AMP_LESSONS_PROGRESS"] = "off"


@pytest.fixture
def one_thread():
    """Tiny tensors: a second OpenMP thread only adds wake-ups, and on a busy 2-core
    machine a CPU fp16 matmul then takes 30 ms instead of 10 us."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def spanish():
    """The package speaks Spanish for one test, and English again after it, whatever
    the test raised."""
    import amp_lessons

    amp_lessons.set_language("es")
    yield
    amp_lessons.set_language("en")


@pytest.fixture
def no_pyplot_figures():
    """Widgets and plots must not leave figures in pyplot (a leak, and a double
    display in notebooks)."""
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before


@pytest.fixture(scope="session")
def lesson_runs() -> dict:
    """Each lesson run once for the whole session (student_paths.paused_twice, its
    second pass the Spanish edition): the path tests check the run, the slide test
    and the site render its outputs."""
    return {}


@pytest.fixture(scope="module")
def grads():
    """4000 gradient-like values spread evenly over 2^-40 .. 2^0, both signs, and
    some zeros: what the histogram plot and explorer are checked on."""
    gen = torch.Generator().manual_seed(0)
    g = 2.0 ** (torch.rand(4000, generator=gen) * 40 - 40)
    g[::2] *= -1
    g[::97] = 0
    return g


# Under pytest-xdist (`make test` runs two workers, `--dist loadgroup`), each group
# runs whole on one worker: a test file by default, so a module-scoped fixture (the
# course rehearsal, the attack grading) runs once; a notebook under nbval (make
# test-newest-torch), whose cells share one kernel; and the tests that share
# conftest's session-wide lesson runs (the student paths, the Spanish output check,
# the slides, the site), so each lesson executes once per run.
SHARED_FIXTURE_GROUPS = {"lesson_runs": "lesson-runs"}
# The order the groups start in (pyproject's --no-loadscope-reorder keeps it: by
# default xdist starts the groups with the most tests first, whatever they cost).
# The two workers start on the first two and queue the next two: the browser tests,
# which mostly wait (for JupyterLab, for each redraw to settle), run beside the
# grading tests, whose rehearsal grades two notebooks at once and fills those waits
# (the other way round, one core stayed idle for minutes); then the lesson runs
# beside the student paths, a kernel each. Then the others that take 10 s or more,
# longest first, so that the run ends on short ones; the rest in collection order.
# Seconds of make test on 2 cores, measured 2026-12-06 (the whole run is CPU-bound:
# 1.9 cores busy of 2).
FIRST_GROUPS = [
    "test_browser_py",  # 200 s, much of it waiting
    "test_grading_py",  # 190 s, two sandboxes at a time
    "lesson-runs",  # 250 s: every lesson, English then Spanish, in one kernel each
    "test_student_paths_py",  # 135 s
    "test_sandbox_py",  # 115 s
    "test_estimate_py",  # 60 s: the fit traces its 41 published rows
    "test_grading_term_py",  # 45 s: a class of six, sandboxed, two at a time
    "test_cli_py",  # 45 s
    "test_checks_fuzz_py",  # 40 s
    "test_train_distributed_py",  # 40 s
    "test_launch_stress_py",  # 30 s
    "test_tooling_py",  # 30 s
    # a notebook under nbval, in make test-newest-torch (where these two are the
    # slowest, 30 and 15 s, and start first)
    "10_distributed_amp_ipynb",
    "09_amp_in_practice_ipynb",
    "test_gpu_check_py",  # 15 s
    "test_rank_memory_py",  # 15 s
    "test_progress_py",  # 15 s
    "test_ladder_py",  # 15 s: torch.compile on the CPU
]


def start_order(group: str) -> int:
    return FIRST_GROUPS.index(group) if group in FIRST_GROUPS else len(FIRST_GROUPS)


def xdist_group(item) -> str:
    for fixture, group in SHARED_FIXTURE_GROUPS.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    return item.path.name.replace(".", "_")  # a dot would split xdist's node ids


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into node ids
def pytest_collection_modifyitems(config, items):
    """Group the tests for pytest-xdist (above); skip `gpu`-marked tests cleanly
    where CUDA is absent."""
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
        items.sort(key=lambda item: start_order(xdist_group(item)))
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none found)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)

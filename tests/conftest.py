import pytest
import spanish_outputs
import torch


def pytest_configure(config):
    """English in a Spanish lesson's output fails it (tests/spanish_outputs.py)."""
    spanish_outputs.pytest_configure(config)


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
    """Each lesson run once for the whole session (student_paths.paused_twice): the
    path tests check the run, the slide test renders its outputs."""
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
# course rehearsal, the attack grading) runs once; a notebook under nbval, whose cells
# share one kernel; and the tests that share conftest's session-wide lesson runs
# (the student paths, the slides, the site), so each lesson executes once per run.
SHARED_FIXTURE_GROUPS = {"lesson_runs": "lesson-runs"}
# Groups that start first, longest first (seconds on 2 cores, from .ci/run's
# --durations): a long group started last would leave the other worker idle.
LONG_GROUPS = {
    "test_grading_py": 230,
    "lesson-runs": 200,
    "test_sandbox_py": 160,
    "test_student_paths_py": 150,
    "test_browser_py": 130,
}


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
        items.sort(key=lambda item: -LONG_GROUPS.get(xdist_group(item), 0))
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none found)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)

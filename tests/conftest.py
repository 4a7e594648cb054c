import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny tensors: a second OpenMP thread only adds wake-ups, and on a busy 2-core
    machine a CPU fp16 matmul then takes 30 ms instead of 10 us."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests cleanly where CUDA is absent."""
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none found)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)

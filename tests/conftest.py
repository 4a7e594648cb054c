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


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests cleanly where CUDA is absent."""
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none found)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)

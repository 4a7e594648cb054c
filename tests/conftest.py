import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests cleanly where CUDA is absent."""
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none found)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)

"""Shared pytest setup: the `device` parametrization, CUDA skipping, per-test seeding and a
clean float32 matmul precision for every test.

Run with the operator library on the path, e.g.
    FUSEDOPS_LIBRARY=build/libfusedops.so python -m pytest
(pytest.ini puts models/ on sys.path, so `import fusedops` finds the package.)
"""
import zlib

import pytest
import torch

import fusedops  # noqa: F401  (loads libfusedops.so: registers torch.ops.fusedops.*)

HAS_CUDA = torch.cuda.is_available()
CUDA_COUNT = torch.cuda.device_count() if HAS_CUDA else 0

# Every model-vs-reference test takes `device`; the cuda case carries the `cuda` mark, so the
# same test file runs unchanged on the GPU machine and skips cleanly elsewhere.
DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def pytest_collection_modifyitems(config, items):
    skip_cuda = pytest.mark.skip(reason="CUDA is not available")
    skip_multi = pytest.mark.skip(reason="needs at least 2 CUDA GPUs")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_cuda)
        if "multi_gpu" in item.keywords and CUDA_COUNT < 2:
            item.add_marker(skip_multi)


@pytest.fixture(autouse=True)
def seed(request):
    """Fresh random inputs in every test, reproducible from the test's id."""
    s = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(s)
    return s


@pytest.fixture(autouse=True)
def float32_matmul_highest():
    """Tests start at PyTorch's default ("highest": no TF32) and cannot leak a change."""
    saved = torch.get_float32_matmul_precision()
    saved_cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(saved)
    torch.backends.cudnn.allow_tf32 = saved_cudnn

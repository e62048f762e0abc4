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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    skip_cuda = pytest.mark.skip(reason="CUDA is not available")
    skip_multi = pytest.mark.skip(reason="needs at least 2 CUDA GPUs")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_cuda)
        if "multi_gpu" in item.keywords and CUDA_COUNT < 2:
            item.add_marker(skip_multi)
        group = shared_fixture_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def shared_fixture_group(item):
    """A module-scoped fixture is made once per worker that runs a test needing it; several of
    ours export models, an AOTInductor one compiling C++ for about a minute. Under pytest-xdist
    with --dist loadgroup (the GPU check) the tests sharing one stay on one worker, so it is made
    once per run: the group is the module and its fixture (an AOTInductor one first, where a
    test needs several)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    names = [name for name, defs in info.name2fixturedefs.items()
             if defs and defs[-1].scope == "module"]
    if not names:
        return None
    first = min(names, key=lambda name: ("aoti" not in name, name))
    return f"{item.module.__name__}:{first}"


@pytest.fixture(autouse=True)
def seed(request):
    """Fresh random inputs in every test, reproducible from the test's id."""
    # pytest-xdist's loadgroup appends "@<group>" to a grouped test's id: not part of its name.
    s = zlib.crc32(request.node.nodeid.split("@")[0].encode())
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

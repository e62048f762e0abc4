"""Model control through the repository API (--model-control-mode=explicit): unload, load and
reload a running model, and the server's memory back after a large model is unloaded."""
from __future__ import annotations

import time

import pytest
from tritonclient.utils import InferenceServerException

from triton_server import infer, pick, spec_name

# Resident memory the server may keep after a 256 MiB model is unloaded (allocator caches,
# the backend's per-model bookkeeping); the model's weights themselves must go.
RSS_SLACK = 48 << 20


def wait_until(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.parametrize("fmt", ("pt", "pt2"))
def test_unload_load_and_reload(main_server, exported, fmt):
    model = pick(exported, "39", fmt)
    http, grpc = main_server.client("http"), main_server.client("grpc")
    try:
        http.unload_model(model.name)
        assert wait_until(lambda: not http.is_model_ready(model.name))
        with pytest.raises(InferenceServerException):
            infer(grpc, model.name, model.rows(0, 2))

        grpc.load_model(model.name)
        assert http.is_model_ready(model.name)
        model.check(infer(http, model.name, model.rows(0, 4)), 0, 4, "after load")

        http.load_model(model.name)  # a loaded model: Triton loads it again and swaps it in
        assert grpc.is_model_ready(model.name)
        model.check(infer(grpc, model.name, model.rows(4, 9)), 4, 9, "after reload")
        index = {entry["name"]: entry for entry in http.get_model_repository_index()}
        assert index[model.name]["state"] == "READY"
        assert main_server.alive()
    finally:
        if not http.is_model_ready(model.name):  # the other tests need it
            http.load_model(model.name)
        http.close()
        grpc.close()


def test_memory_comes_back_after_unload(main_server, spec_model):
    """Model 98 at SPEC size (256 MiB of weights) loaded, run and unloaded twice: loaded, the
    server's RSS holds the weights (the measurement sees the model); unloaded, it is back within
    RSS_SLACK of where it was before the first load."""
    name = spec_name(spec_model.name)
    weight_bytes = 8192 * 8192 * 4
    client = main_server.client("http")
    try:
        assert not client.is_model_ready(name)
        before = main_server.rss()
        for cycle in range(2):
            client.load_model(name)
            spec_model.check(infer(client, name, spec_model.rows(0, 1)), 0, 1, f"cycle {cycle}")
            loaded = main_server.rss()
            assert loaded - before >= 0.9 * weight_bytes, \
                f"cycle {cycle}: RSS {before >> 20} MiB before the load, {loaded >> 20} MiB loaded"
            client.unload_model(name)
            back = wait_until(lambda: main_server.rss() <= before + RSS_SLACK, 30)
            print(f"cycle {cycle}: RSS {before >> 20} MiB before, {loaded >> 20} MiB loaded, "
                  f"{main_server.rss() >> 20} MiB unloaded")
            assert back, (f"cycle {cycle}: RSS {before >> 20} MiB before the first load, "
                          f"{loaded >> 20} MiB loaded, {main_server.rss() >> 20} MiB 30 s after "
                          f"the unload")
    finally:
        if client.is_model_ready(name):
            client.unload_model(name)
        client.close()

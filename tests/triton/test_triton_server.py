"""Every exported model served by the real Triton Inference Server: Triton 2.51 (the
nvidia-pytriton wheel's tritonserver), Triton's PyTorch backend built from source, libfusedops
preloaded; the shipped configs (a .pt2's with the two lines Triton before 26.03 needs). Each
answer, over HTTP and gRPC, is compared with the reference output scripted/export.py wrote.
"""
from __future__ import annotations

import ipaddress
import itertools
import random
import threading
import time

import numpy as np
import psutil
import pytest
from tritonclient.utils import InferenceServerException

from triton_server import (KEYS, PROTOCOLS, ServerFailed, TritonServer, copy_model,
                           fresh_repository, infer, merged_name, pick)

FORMATS = ("pt", "pt2")
MODELS = [pytest.param(key, fmt, id=f"{key}-{fmt}") for key in KEYS for fmt in FORMATS]


def test_the_server_is_triton_2_51_listening_on_loopback_only(main_server):
    client = main_server.client("http")
    try:
        assert client.get_server_metadata()["version"] == "2.51.0"
    finally:
        client.close()
    def ipv4(text: str) -> ipaddress.IPv4Address:
        # gRPC listens on an IPv6 socket bound to the IPv4-mapped ::ffff:127.0.0.1.
        address = ipaddress.ip_address(text)
        return getattr(address, "ipv4_mapped", None) or address

    listening = {(ipv4(c.laddr.ip), c.laddr.port)
                 for c in psutil.Process(main_server.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN}
    expected = {(ipaddress.ip_address("127.0.0.1"), int(url.rsplit(":", 1)[1]))
                for url in (main_server.http_url, main_server.grpc_url)}
    assert listening == expected


def test_triton_2_51_needs_the_pt2_backend_named(exported):
    """The shipped .pt2 config unchanged: Triton before 26.03 has no torch_aoti platform, so
    the server refuses the model (why main_server adds the backend's name)."""
    model = pick(exported, "18", "pt2")
    repository = fresh_repository("repository_platform_only")
    copy_model(model.folder, repository)
    server = TritonServer("platform_only", repository, [model.name])
    with pytest.raises(ServerFailed, match="unexpected platform type 'torch_aoti'"):
        server.start()
    assert not server.alive()


def test_every_model_is_loaded(main_server, exported):
    """Each shipped folder and each merged copy is READY, and the server's log says so."""
    client = main_server.client("http")
    try:
        states = {entry["name"]: entry.get("state")
                  for entry in client.get_model_repository_index()}
    finally:
        client.close()
    log = main_server.log_path.read_text()
    for name in [*exported, *(merged_name(m.name) for m in exported.values() if not m.is_pt2)]:
        assert states.get(name) == "READY", (name, states)
        assert f"successfully loaded '{name}'" in log, name


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("key,fmt", MODELS)
def test_the_sample_batch_matches_the_reference(main_server, exported, key, fmt, protocol):
    model = pick(exported, key, fmt)
    client = main_server.client(protocol)
    try:
        rows = model.max_batch_size
        model.check(infer(client, model.name, model.rows(0, rows)), 0, rows, protocol)
    finally:
        client.close()


@pytest.mark.parametrize("key,fmt", MODELS)
def test_odd_batch_sizes(main_server, exported, key, fmt):
    """1 row, max_batch_size rows and sizes between, at several offsets, both protocols."""
    model = pick(exported, key, fmt)
    top = model.max_batch_size
    cases = [(0, 1), (top - 1, top), (2, 9), (5, 18), (1, top), (0, top)]
    clients = {protocol: main_server.client(protocol) for protocol in PROTOCOLS}
    try:
        for (start, stop), protocol in zip(cases, itertools.cycle(PROTOCOLS)):
            answer = infer(clients[protocol], model.name, model.rows(start, stop))
            model.check(answer, start, stop, protocol)
    finally:
        for client in clients.values():
            client.close()


def test_many_concurrent_clients(main_server, exported):
    """16 clients at once (half HTTP, half gRPC), 12 requests each, over every model, the
    shipped ones and the merged copies: random rows, every answer against the reference."""
    clients, requests_each, seconds = 16, 12, 300
    served = [(model, name) for model in exported.values()
              for name in (model.name, *([] if model.is_pt2 else [merged_name(model.name)]))]
    failures: list[str] = []
    answered = [0] * clients
    start_together = threading.Barrier(clients)

    def run(index: int) -> None:
        rng = random.Random(index)
        protocol = "http" if index % 2 == 0 else "grpc"
        client = main_server.client(protocol)
        try:
            start_together.wait()
            for _ in range(requests_each):
                model, name = rng.choice(served)
                start = rng.randrange(model.max_batch_size)
                stop = rng.randrange(start + 1, model.max_batch_size + 1)
                model.check(infer(client, name, model.rows(start, stop)), start, stop,
                            f"{protocol} via {name}")
                answered[index] += 1
        except Exception as error:  # each failure is reported, the others go on
            failures.append(f"client {index} ({protocol}): {error}")
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), \
        f"clients still waiting after {seconds} s"
    assert not failures, "\n".join(failures[:10])
    assert sum(answered) == clients * requests_each
    assert main_server.alive()


# Each bad request: what is wrong with it, given the model's sample rows.
BAD_REQUESTS = {
    "one_feature_short": lambda m: (np.ascontiguousarray(m.rows(0, 2)[:, :-1]), "INPUT__0", "FP32"),
    "one_feature_more": lambda m: (np.pad(m.rows(0, 2), ((0, 0), (0, 1))), "INPUT__0", "FP32"),
    "no_batch_dimension": lambda m: (m.rows(0, 1)[0], "INPUT__0", "FP32"),
    "batch_above_max_batch_size": lambda m: (
        np.concatenate([m.rows(0, m.max_batch_size), m.rows(0, 1)]), "INPUT__0", "FP32"),
    "float64": lambda m: (m.rows(0, 2).astype(np.float64), "INPUT__0", "FP64"),
    "int32": lambda m: (m.rows(0, 2).astype(np.int32), "INPUT__0", "INT32"),
    "unknown_input_name": lambda m: (m.rows(0, 2), "INPUT__1", "FP32"),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_a_bad_request_gets_an_error_and_the_server_stays_up(main_server, exported, case, fmt,
                                                             protocol):
    model = pick(exported, "62", fmt)
    x, input_name, datatype = BAD_REQUESTS[case](model)
    client = main_server.client(protocol)
    try:
        with pytest.raises(InferenceServerException) as error:
            infer(client, model.name, x, input_name, datatype)
        # Triton's own validation answers, naming the model (e.g. "unexpected shape for input
        # 'INPUT__0' for model ..."), before anything reaches the backend.
        assert model.name in str(error.value), str(error.value)
        assert main_server.alive()
        assert client.is_server_live() and client.is_model_ready(model.name)
        model.check(infer(client, model.name, model.rows(0, 3)), 0, 3, "after the bad request")
    finally:
        client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_unknown_model_gets_an_error(main_server, exported, protocol):
    model = pick(exported, "98", "pt")
    client = main_server.client(protocol)
    try:
        with pytest.raises(InferenceServerException):
            infer(client, "fusedops_no_such_model", model.rows(0, 1))
        assert client.is_server_live()
    finally:
        client.close()

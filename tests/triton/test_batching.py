"""Requests that Triton's dynamic batcher runs together, against the same requests sent one at
a time, and the .pt2 batching defect of the PyTorch backend (docs/TRITON_PT2_BATCHING.md):

- a .pt with a long queue delay (a test copy of its shipped config): merged answers equal the
  single answers and the reference;
- a .pt2 with its shipped config (no dynamic_batching): under the same concurrent load it runs
  each request alone, and each answer is right;
- the defect itself, with pt2_batching_repro.py's plain nn.Linear: on the backend as released,
  each request of a merged .pt2 batch is answered with the whole batch;
- the backend with the one-line fix: merged .pt2 answers right, for nn.Linear and for each
  fusedops model.
"""
from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
import torch

from fusedops.accuracy import assert_within_tolerance

import pt2_batching_repro as repro
from triton_server import KEYS, counting_runs, infer, merged_name, pick

# Requests of these many rows, sent at once: 32 rows, the small models' max_batch_size, so the
# batcher runs them as soon as they have all arrived.
SPLITS = (1, 3, 5, 7, 16)


def slices(model):
    assert sum(SPLITS) == model.max_batch_size
    bounds = list(itertools.accumulate(SPLITS, initial=0))
    return list(zip(bounds, bounds[1:]))


def send_together(server, name: str, model) -> list:
    """Each slice as its own request, all at once from as many threads, HTTP and gRPC
    alternating; returns each answer (or the exception it raised)."""
    parts = slices(model)
    answers: list = [None] * len(parts)
    ready = threading.Barrier(len(parts))

    def send(index: int, start: int, stop: int) -> None:
        client = server.client("http" if index % 2 == 0 else "grpc")
        try:
            x = model.rows(start, stop)
            ready.wait()
            answers[index] = infer(client, name, x)
        except Exception as error:  # checked with the answers
            answers[index] = error
        finally:
            client.close()

    threads = [threading.Thread(target=send, args=(i, *part)) for i, part in enumerate(parts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def single_answers(server, name: str, model) -> list[np.ndarray]:
    client = server.client("grpc")
    try:
        return [infer(client, name, model.rows(start, stop)) for start, stop in slices(model)]
    finally:
        client.close()


def check_merged(server, name: str, model, singles: list[np.ndarray]) -> None:
    """The slices sent together to `name` ran in fewer executions than requests (merged), and
    each answer is the single request's and the reference's."""
    answers, requests, executions = counting_runs(
        server, name, lambda: send_together(server, name, model), len(SPLITS))
    for (start, stop), answer, single in zip(slices(model), answers, singles):
        if isinstance(answer, Exception):
            raise AssertionError(f"{name} rows {start}:{stop}: {answer}")
        model.check(answer, start, stop, "merged")
        # The single answer may differ in the last bits: the GEMM sums in another order for
        # another row count (in process too), so "equal" is the accuracy contract's tolerance.
        assert answer.shape == single.shape, (name, start, stop, answer.shape, single.shape)
        assert_within_tolerance(torch.from_numpy(np.array(answer)),
                                torch.from_numpy(np.array(single)))
    assert requests == len(SPLITS)
    assert executions < requests, f"not merged: {requests} requests in {executions} executions"


@pytest.mark.parametrize("key", KEYS)
def test_merged_pt_requests_equal_single_requests(main_server, exported, key):
    model = pick(exported, key, "pt")
    singles = single_answers(main_server, model.name, model)
    check_merged(main_server, merged_name(model.name), model, singles)


@pytest.mark.parametrize("key", KEYS)
def test_shipped_pt2_config_runs_each_request_alone(main_server, exported, key):
    """The shipped .pt2 config has no dynamic_batching (the defect below): requests sent
    together run one by one, and every answer is right."""
    model = pick(exported, key, "pt2")
    assert not model.config.HasField("dynamic_batching")
    client = main_server.client("http")
    try:
        assert "dynamic_batching" not in client.get_model_config(model.name)
    finally:
        client.close()
    answers, requests, executions = counting_runs(
        main_server, model.name, lambda: send_together(main_server, model.name, model),
        len(SPLITS))
    for (start, stop), answer in zip(slices(model), answers):
        if isinstance(answer, Exception):
            raise AssertionError(f"{model.name} rows {start}:{stop}: {answer}")
        model.check(answer, start, stop, "sent together")
    assert requests == executions == len(SPLITS)


def same_rows_in_any_order(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether got's rows are want's rows, each once, in some order."""
    with np.errstate(all="ignore"):  # the other answers hold whatever lay past the output
        distance = np.abs(got[:, None, :] - want[None, :, :]).max(axis=2)
    close = distance <= 1e-5
    return bool(close.any(axis=0).all() and close.any(axis=1).all())


def test_released_backend_answers_each_merged_pt2_request_with_the_whole_batch(
        repro_unpatched_server):
    """The defect, with nn.Linear: four requests of 2 rows merged into one run of 8 rows each
    get an answer of 8 rows; the first request of the batch gets every request's rows, the
    others bytes from past the end of the output. If this fails because the answers are right,
    the pinned backend has the fix: batching can come back to the .pt2 configs."""
    server = repro_unpatched_server
    answers, requests, executions = counting_runs(
        server, repro.MODEL_NAME, lambda: repro.send_together(server.http_url), repro.REQUESTS)
    assert requests == repro.REQUESTS
    assert executions == 1, "the requests were not merged into one batch"
    for answer in answers:
        assert not isinstance(answer, Exception), answer
        assert answer.shape == (repro.MAX_BATCH_SIZE, repro.OUT_FEATURES)
    # One answer (the first request's in the batch) is the whole batch's output, the requests
    # in the order the batcher took them.
    assert any(same_rows_in_any_order(answer, np.concatenate(repro.expected_answers()))
               for answer in answers)
    assert len(repro.wrong_answers(answers)) == repro.REQUESTS


def test_fixed_backend_answers_each_merged_pt2_request_right(patched_server):
    server = patched_server
    answers, requests, executions = counting_runs(
        server, repro.MODEL_NAME, lambda: repro.send_together(server.http_url), repro.REQUESTS)
    assert repro.wrong_answers(answers) == []
    assert requests == repro.REQUESTS
    assert executions == 1, "the requests were not merged into one batch"


@pytest.mark.parametrize("key", KEYS)
def test_fixed_backend_merged_pt2_requests_equal_single_requests(patched_server, main_server,
                                                                 exported, key):
    """Each fusedops .pt2 with dynamic batching on the fixed backend; the single answers come
    from the shipped config on the released backend."""
    model = pick(exported, key, "pt2")
    singles = single_answers(main_server, model.name, model)
    check_merged(patched_server, merged_name(model.name), model, singles)

"""The .pt2 dynamic-batching defect of Triton's PyTorch backend, reproduced with a plain
nn.Linear and nothing of fusedops (docs/TRITON_PT2_BATCHING.md):

    python tests/triton/pt2_batching_repro.py export REPO     # REPO/linear_aoti: model.pt2 + config
    tritonserver --model-repository REPO ...                  # Triton 26.03+ (platform torch_aoti)
    python tests/triton/pt2_batching_repro.py request localhost:8000

`request` sends REQUESTS requests of ROWS rows at once; the config's dynamic batcher (a long
queue delay, and the requests fill max_batch_size exactly) runs them as one batch. Each answer
must be nn.Linear of its own rows: the expected values are the same seeded nn.Linear run by
PyTorch in this process. Exit status 0 when every answer is right, 1 when any is not (the
defect: each request is answered with the whole batch's rows).

tests/triton/test_pt2_batching.py runs the same two steps against Triton 2.51 with the backend
built from source, unpatched and with tests/triton/pt2_first_dim_batching.patch.
"""
from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import numpy as np
import torch

IN_FEATURES, OUT_FEATURES = 8, 4
REQUESTS, ROWS = 4, 2
MAX_BATCH_SIZE = REQUESTS * ROWS  # the batcher runs the requests as soon as they fill it
MODEL_NAME = "linear_aoti"
SEED = 0

CONFIG = f"""name: "{MODEL_NAME}"
platform: "torch_aoti"
max_batch_size: {MAX_BATCH_SIZE}
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {IN_FEATURES} ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {OUT_FEATURES} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
# Waits up to 2 s for more requests: the {REQUESTS} requests are batched together.
dynamic_batching {{ max_queue_delay_microseconds: 2000000 }}
"""


def make_model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Linear(IN_FEATURES, OUT_FEATURES).eval()


def request_inputs() -> list[np.ndarray]:
    generator = torch.Generator().manual_seed(SEED + 1)
    return [torch.rand(ROWS, IN_FEATURES, generator=generator).numpy() for _ in range(REQUESTS)]


def export(repository: Path) -> Path:
    """Writes repository/linear_aoti: 1/model.pt2 (batch dimension dynamic) and config.pbtxt."""
    folder = repository / MODEL_NAME
    (folder / "1").mkdir(parents=True, exist_ok=True)
    model = make_model()
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH_SIZE)
    program = torch.export.export(model, (torch.rand(ROWS, IN_FEATURES),),
                                  dynamic_shapes=({0: batch},))
    torch._inductor.aoti_compile_and_package(program,
                                             package_path=str(folder / "1" / "model.pt2"))
    (folder / "config.pbtxt").write_text(CONFIG)
    return folder


def send_together(url: str, model_name: str = MODEL_NAME) -> list[np.ndarray | Exception]:
    """Sends the REQUESTS requests from as many threads at once (HTTP, one client per thread:
    tritonclient's clients are not shared across threads); returns each answer or its error."""
    import tritonclient.http as httpclient

    answers: list[np.ndarray | Exception] = [RuntimeError("no answer")] * REQUESTS
    ready = threading.Barrier(REQUESTS)

    def send(index: int, x: np.ndarray) -> None:
        client = httpclient.InferenceServerClient(url, network_timeout=60)
        try:
            tensor = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            ready.wait()
            answers[index] = client.infer(model_name, [tensor]).as_numpy("OUTPUT__0")
        except Exception as error:  # reported with the answers
            answers[index] = error
        finally:
            client.close()

    threads = [threading.Thread(target=send, args=(i, x))
               for i, x in enumerate(request_inputs())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def expected_answers() -> list[np.ndarray]:
    model = make_model()
    with torch.no_grad():
        return [model(torch.from_numpy(x)).numpy() for x in request_inputs()]


def wrong_answers(answers: list[np.ndarray | Exception]) -> list[str]:
    """One line for each answer that is not nn.Linear of its own request's rows."""
    wrong = []
    for index, (got, want) in enumerate(zip(answers, expected_answers())):
        if isinstance(got, Exception):
            wrong.append(f"request {index}: error {got}")
        elif got.shape != want.shape:
            wrong.append(f"request {index}: {ROWS} rows sent, answer of shape {list(got.shape)}")
        elif not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            wrong.append(f"request {index}: values differ from nn.Linear by up to "
                         f"{np.abs(got - want).max():.3g}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("export", help="write the model repository").add_argument(
        "repository", type=Path)
    request = commands.add_parser("request", help="send the requests and check the answers")
    request.add_argument("url", help="the server's HTTP host:port")
    request.add_argument("--model", default=MODEL_NAME)
    args = parser.parse_args(argv)
    if args.command == "export":
        print(f"wrote {export(args.repository)}")
        return 0
    wrong = wrong_answers(send_together(args.url, args.model))
    for line in wrong:
        print(line)
    print(f"{REQUESTS - len(wrong)} of {REQUESTS} answers right")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

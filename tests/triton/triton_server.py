"""The real Triton Inference Server for the tests of tests/triton (conftest.py has the
fixtures): started on 127.0.0.1 with libfusedops preloaded, stopped by its PID; the exported
model folders with their configs, sample inputs and reference outputs.

scripts/triton_test.sh prepares everything and runs these tests; the environment it sets:
FUSEDOPS_TRITON_SERVER (the tritonserver binary), FUSEDOPS_TRITON_BACKENDS (the backend folder:
pytorch, pytorch_aoti, pytorch_aoti_patched), FUSEDOPS_TRITON_WORK (exported/, exported_spec/,
repro/, and where the model repositories and server logs are written), FUSEDOPS_LIBRARY.

Every expected value is a reference output: `reference_output.pt` (and its float64 twin) that
scripted/export.py computed with the *reference* models of fusedops.reference, or nn.Linear run
by PyTorch for the upstream reproduction.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from fusedops.accuracy import assert_within_tolerance

PROTOCOLS = {"http": httpclient, "grpc": grpcclient}
# What a shipped .pt2 config needs on Triton before 26.03 (server 2.67.0), which has no
# torch_aoti platform: the backend named, and its file (app/README.md, "Triton versions").
FOR_TRITON_BEFORE_26_03 = 'backend: "pytorch_aoti"\ndefault_model_filename: "model.pt2"\n'
# A queue delay far above a request's time: requests sent together are batched together (the
# batcher runs a batch at once when it reaches max_batch_size, so no test waits for it).
MERGING_QUEUE_DELAY_US = 2_000_000
STARTUP_SECONDS = 180
LOG_LINES_SHOWN = 400


def environment(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through scripts/triton_test.sh",
                    pytrace=False)
    return value


def work_dir() -> Path:
    return Path(environment("FUSEDOPS_TRITON_WORK"))


def fresh_repository(name: str) -> Path:
    """An empty model repository folder in the work folder (a rerun starts it anew)."""
    repository = work_dir() / name
    shutil.rmtree(repository, ignore_errors=True)
    repository.mkdir()
    return repository


# ---- model folders and their configs -------------------------------------------------------

def read_config(folder: Path) -> model_config_pb2.ModelConfig:
    """config.pbtxt parsed with protobuf's text format against Triton's schema."""
    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def copy_model(source: Path, repository: Path, name: str | None = None, edit=None) -> str:
    """Copies a model folder into repository as `name` (default: its own). With a new name or
    an edit, its config is rewritten through protobuf (name set, edit(config) applied);
    otherwise the shipped config.pbtxt stays byte for byte."""
    name = name or source.name
    target = repository / name
    shutil.copytree(source, target)
    if name != source.name or edit is not None:
        config = read_config(target)
        config.name = name
        if edit is not None:
            edit(config)
        (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return name


def name_backend(backend: str):
    """A .pt2 served by Triton before 26.03: its backend (a copy of the PyTorch backend under
    that name) and its file named, as FOR_TRITON_BEFORE_26_03 says."""
    def edit(config: model_config_pb2.ModelConfig) -> None:
        config.backend = backend
        config.default_model_filename = "model.pt2"
    return edit


def merging(backend: str | None = None):
    """Dynamic batching with a long queue delay (and, for a .pt2, the backend named)."""
    def edit(config: model_config_pb2.ModelConfig) -> None:
        config.dynamic_batching.max_queue_delay_microseconds = MERGING_QUEUE_DELAY_US
        if backend is not None:
            name_backend(backend)(config)
    return edit


@dataclass
class ExportedModel:
    """One folder that scripted/export.py wrote, with its sample input and reference outputs."""
    folder: Path
    config: model_config_pb2.ModelConfig
    sample: torch.Tensor
    reference: torch.Tensor
    reference64: torch.Tensor

    @classmethod
    def read(cls, folder: Path) -> "ExportedModel":
        def load(name):
            return torch.load(folder / name, weights_only=True)
        return cls(folder, read_config(folder), load("sample_input.pt"),
                   load("reference_output.pt"), load("reference_output_float64.pt"))

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def is_pt2(self) -> bool:
        return (self.folder / "1" / "model.pt2").exists()

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    def rows(self, start: int, stop: int) -> np.ndarray:
        return self.sample[start:stop].numpy()

    def answer_shape(self, rows: int) -> list[int]:
        """The shape a client gets: the batch, then the config's output dims (a (B,) output
        is declared dims [1] with reshape [], so it comes back as [B, 1])."""
        return [rows, *self.config.output[0].dims]

    def check(self, answer: np.ndarray, start: int, stop: int, what: str = "") -> None:
        """Raises AssertionError unless answer is the reference's rows start:stop (docs/MODELS.md's
        tolerance, or at least as close to the float64 reference as the float32 one is)."""
        where = f"{self.name} rows {start}:{stop}{' ' + what if what else ''}"
        if list(answer.shape) != self.answer_shape(stop - start):
            raise AssertionError(f"{where}: answer of shape {list(answer.shape)}, expected "
                                 f"{self.answer_shape(stop - start)}")
        expected = self.reference[start:stop]
        got = torch.from_numpy(np.array(answer)).reshape(expected.shape)
        try:
            assert_within_tolerance(got, expected, expected_float64=self.reference64[start:stop])
        except AssertionError as error:
            raise AssertionError(f"{where}: {error}") from None


def read_exported(folder: Path) -> dict[str, ExportedModel]:
    models = {}
    for config in sorted(folder.glob("*/config.pbtxt")):
        model = ExportedModel.read(config.parent)
        models[model.name] = model
    return models


# ---- the server ----------------------------------------------------------------------------

def free_loopback_ports(count: int) -> list[int]:
    """Ports the kernel gives for 127.0.0.1, all held at once so that they differ."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class ServerFailed(Exception):
    pass


class TritonServer:
    """tritonserver on 127.0.0.1 (HTTP and gRPC; metrics off), explicit model control, the
    given models loaded at startup, libfusedops preloaded, its log in log_path."""

    def __init__(self, name: str, repository: Path, load: list[str]):
        self.name = name
        self.repository = repository
        self.load = load
        self.log_path = repository.parent / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self.http_url = self.grpc_url = ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def command(self, http_port: int, grpc_port: int) -> list[str]:
        return [environment("FUSEDOPS_TRITON_SERVER"),
                f"--model-repository={self.repository}",
                f"--backend-directory={environment('FUSEDOPS_TRITON_BACKENDS')}",
                "--model-control-mode=explicit",
                # One model loaded at a time: PyTorch's AOTIModelPackageLoader reads every .pt2's
                # metadata into one function-static nlohmann::json (load_json_file), so .pt2
                # models loaded on parallel threads can read each other's half-parsed metadata
                # ("[json.exception.type_error.302] type must be string, but is null"; seen in
                # CI on the patched server's five .pt2 models, 1 run in 2). app/README.md.
                "--model-load-thread-count=1",
                *(f"--load-model={model}" for model in self.load),
                "--http-address=127.0.0.1", f"--http-port={http_port}",
                "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}",
                # The metrics endpoint would listen on 0.0.0.0 (and a third port): not needed.
                "--allow-metrics=false",
                "--exit-timeout-secs=30"]

    def process_environment(self) -> dict[str, str]:
        # The operators exist once libfusedops is loaded (its TORCH_LIBRARY initializers);
        # nothing in the server links it, so it is preloaded (app/README.md). libtorch's
        # folder: the backend and libfusedops carry no path to it.
        torch_lib = Path(torch.__file__).parent / "lib"
        return dict(os.environ, LD_PRELOAD=environment("FUSEDOPS_LIBRARY"),
                    LD_LIBRARY_PATH=f"{torch_lib}:{os.environ.get('LD_LIBRARY_PATH', '')}")

    def start(self) -> "TritonServer":
        for attempt in range(3):
            http_port, grpc_port = free_loopback_ports(2)
            self.http_url, self.grpc_url = f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
            with open(self.log_path, "w") as log:
                self.process = subprocess.Popen(
                    self.command(http_port, grpc_port), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=self.process_environment())
            try:
                self.wait_ready()
                return self
            except ServerFailed:
                self.stop(check=False)
                # Another process may take a port between our probe and the server's bind.
                if "Address already in use" in self.log_text() and attempt < 2:
                    continue
                raise ServerFailed(f"tritonserver {self.name} did not become ready:\n"
                                   f"{self.log_text()}") from None
        raise AssertionError("unreachable")

    def wait_ready(self) -> None:
        client = httpclient.InferenceServerClient(self.http_url)
        deadline = time.monotonic() + STARTUP_SECONDS
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise ServerFailed(f"exited with status {self.process.returncode}")
                try:
                    if client.is_server_ready():
                        return
                except Exception:  # not listening yet
                    pass
                time.sleep(0.2)
            raise ServerFailed(f"not ready after {STARTUP_SECONDS} s")
        finally:
            client.close()

    def stop(self, check: bool = True) -> None:
        """SIGTERM to the server's PID (Triton unloads its models and exits), SIGKILL if it
        has not exited after 60 s. With check, a status other than 0 is an error."""
        if self.process is None or self.process.poll() is not None:
            status = None if self.process is None else self.process.returncode
        else:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                status = self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
                raise ServerFailed(f"tritonserver {self.name} ignored SIGTERM for 60 s")
        if check and status != 0:
            raise ServerFailed(f"tritonserver {self.name} ended with status {status}:\n"
                               f"{self.log_text()}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        if len(lines) > LOG_LINES_SHOWN:
            lines = [f"... {len(lines) - LOG_LINES_SHOWN} lines before, in {self.log_path}"] + \
                lines[-LOG_LINES_SHOWN:]
        return "\n".join(lines)

    def client(self, protocol: str):
        if protocol == "http":
            return httpclient.InferenceServerClient(self.http_url, network_timeout=120)
        return grpcclient.InferenceServerClient(self.grpc_url)

    def rss(self) -> int:
        return psutil.Process(self.pid).memory_info().rss


def infer(client, model: str, x: np.ndarray, input_name: str = "INPUT__0",
          datatype: str = "FP32") -> np.ndarray:
    """One request through either protocol's client; returns OUTPUT__0."""
    protocol = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensor = protocol.InferInput(input_name, list(x.shape), datatype)
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor],
                          outputs=[protocol.InferRequestedOutput("OUTPUT__0")])
    return result.as_numpy("OUTPUT__0")


def statistics(server: TritonServer, model: str) -> tuple[int, int]:
    """(requests answered, model executions) so far."""
    client = server.client("http")
    try:
        stats = client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()
    return int(stats["inference_stats"]["success"]["count"]), int(stats["execution_count"])


def counting_runs(server: TritonServer, model: str, send, requests_sent: int):
    """Calls send() and returns (its result, the requests the model answered meanwhile, the
    executions that took): fewer executions than requests means the dynamic batcher ran
    requests together."""
    requests_before, executions_before = statistics(server, model)
    result = send()
    # Triton counts a request just after its response has gone out: wait for the count.
    deadline = time.monotonic() + 10
    while True:
        requests, executions = statistics(server, model)
        if requests - requests_before >= requests_sent or time.monotonic() > deadline:
            return result, requests - requests_before, executions - executions_before
        time.sleep(0.05)


KEYS = ("98", "18", "39", "62")


def pick(exported: dict[str, ExportedModel], key: str, fmt: str) -> ExportedModel:
    """Model `key`'s folder of format "pt" or "pt2"."""
    (model,) = [m for m in exported.values()
                if m.name.startswith(f"fusedops_{key}_") and m.is_pt2 == (fmt == "pt2")]
    return model


def merged_name(name: str) -> str:
    return f"{name}_merged"


def spec_name(name: str) -> str:
    return f"{name}_spec"

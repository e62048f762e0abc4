"""Fixtures of tests/triton: the model repositories and the servers that serve them (each
started once per session, stopped by its PID at the end), and the server log shown with every
failed test. triton_server.py has the server itself.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from triton_server import (FOR_TRITON_BEFORE_26_03, ExportedModel, TritonServer, copy_model,
                           fresh_repository, merged_name, merging, name_backend, read_exported,
                           spec_name, work_dir)

STARTED: list[TritonServer] = []


def start_server(name: str, repository: Path, load: list[str]) -> TritonServer:
    server = TritonServer(name, repository, load)
    STARTED.append(server)
    return server.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test (or fixture) shows the log of each server it used (all, in setup)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        used = [value for value in getattr(item, "funcargs", {}).values()
                if isinstance(value, TritonServer)]
        for server in used or STARTED:
            report.sections.append((f"tritonserver {server.name} log ({server.log_path})",
                                    server.log_text()))


# ---- fixtures ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def exported() -> dict[str, ExportedModel]:
    """The small repository scripted/export.py wrote, both formats: 8 folders."""
    models = read_exported(work_dir() / "exported")
    assert len(models) == 8, sorted(models)
    return models


@pytest.fixture(scope="session")
def spec_model() -> ExportedModel:
    """Model 98 at SPEC size (an 8192 x 8192 Linear: 256 MiB of weights), TorchScript."""
    (model,) = read_exported(work_dir() / "exported_spec").values()
    return model


@pytest.fixture(scope="session")
def main_server(exported, spec_model):
    """Triton 2.51 serving the shipped repository: the .pt folders as exported, the .pt2 folders
    with the two lines Triton before 26.03 needs; a copy of each .pt with a long queue delay
    (merged batches); the SPEC-size model 98 as <name>_spec, not loaded (model control)."""
    repository = fresh_repository("repository_main")
    load = []
    for model in exported.values():
        load.append(copy_model(model.folder, repository))
        if model.is_pt2:
            with open(repository / model.name / "config.pbtxt", "a") as config:
                config.write(FOR_TRITON_BEFORE_26_03)
        else:
            load.append(copy_model(model.folder, repository, merged_name(model.name), merging()))
    copy_model(spec_model.folder, repository, spec_name(spec_model.name))
    server = start_server("main", repository, load)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def repro_unpatched_server():
    """The nn.Linear .pt2 of pt2_batching_repro.py, dynamically batched, on the backend as
    released: a server of its own, since the defect can crash it (model 39 did)."""
    repository = fresh_repository("repository_repro_unpatched")
    load = [copy_model(work_dir() / "repro" / "linear_aoti", repository,
                       edit=name_backend("pytorch_aoti"))]
    server = start_server("repro_unpatched", repository, load)
    yield server
    server.stop(check=False)  # the defect may have hurt it: its status is not this test's


@pytest.fixture(scope="session")
def patched_server(exported):
    """The backend with the one-line fix: the nn.Linear .pt2 and each fusedops .pt2 with a long
    queue delay (merged batches)."""
    repository = fresh_repository("repository_patched")
    load = [copy_model(work_dir() / "repro" / "linear_aoti", repository,
                       edit=name_backend("pytorch_aoti_patched"))]
    for model in exported.values():
        if model.is_pt2:
            load.append(copy_model(model.folder, repository, merged_name(model.name),
                                   merging("pytorch_aoti_patched")))
    server = start_server("patched", repository, load)
    yield server
    server.stop()

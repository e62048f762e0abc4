"""bench/training.py (issue 40) on the CPU at small sizes: a run writes a row per model and mode
with both sides' times and the losses of identical steps agreeing with the reference's, and each
timed step starts from the same weights and optimizer state (its snapshot and restore)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_bench(name):
    """bench/<name>.py as a module (bench/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}",
                                                  REPO_ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


training = load_bench("training")


def test_cpu_run_writes_a_row_per_model_and_mode(tmp_path, capsys):
    out = tmp_path / "training.json"
    assert training.main(["--device", "cpu", "--sizes", "small", "--models", "18,39",
                          "--steps", "2", "--warmup", "1", "--check-steps", "2", "--no-compile",
                          "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    # On the CPU only the modes it has: no TF32, no float16 autocast.
    assert [(r["model"], r["mode"]) for r in rows] == [
        (m, mode) for m in ("18", "39") for mode in ("float32", "autocast-bfloat16", "bfloat16")]
    for r in rows:
        assert r["fusedops_ms"] > 0 and r["eager_ms"] > 0, r
        assert r["x_eager"] == r["eager_ms"] / r["fusedops_ms"]
        assert "compile_ms" not in r and r["fusedops_peak_mib"] is None  # CPU: no CUDA peak
        assert r["floor_ms"] > 0 and r["floor_peak_mib"] is None, r
        limit = 1e-5 if r["mode"] == "float32" else 2e-2
        assert r["loss_rel_diff"] <= limit, r
    assert "| 39 | bfloat16 |" in capsys.readouterr().out


def test_each_timed_step_starts_from_the_snapshot():
    """After restore(), a step repeats the step taken right after snapshot() bit for bit: the
    weights, the BatchNorm statistics and the optimizer's momentum all went back."""
    _, new, _ = training.make_models("39", (16, 24, (24,)), "float32", "cpu")
    x = torch.randn(8, 16)
    step = training.step_fn(new, "float32", "cpu")
    step(x)  # the optimizer holds momentum buffers from here on
    step.snapshot()
    before = [t.detach().clone() for t in (*new.parameters(), *new.buffers())]
    first = step(x)
    after_first = [t.detach().clone() for t in (*new.parameters(), *new.buffers())]
    assert any(not torch.equal(a, b) for a, b in zip(after_first, before))
    step.restore()
    assert all(torch.equal(a, b) for a, b in zip((*new.parameters(), *new.buffers()), before))
    second = step(x)
    assert torch.equal(first, second)
    assert all(torch.equal(a, b)
               for a, b in zip((*new.parameters(), *new.buffers()), after_first))


def test_the_floor_model_has_the_parameters_and_writes_each_gradient():
    """StepFloor (the step's floor) holds a copy of each of the model's parameters (shape, dtype)
    and its backward gives each a gradient of its shape: the optimizer's pass and the gradients'
    writes are the real step's."""
    _, new, _ = training.make_models("39", (16, 24, (24,)), "float32", "cpu")
    floor = training.StepFloor(new)
    assert [(p.shape, p.dtype) for p in floor.parameters()] == [
        (p.shape, p.dtype) for p in new.parameters()]
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(floor.parameters(), new.parameters()))
    y = floor(torch.randn(8, 16))
    assert y.shape == (8, 1)
    y.float().square().mean().backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in floor.parameters())


def test_training_phases_refuses_a_bad_mode_or_model(capsys):
    """bench/training_phases.py names the bad value and the allowed ones (exit 2), before it
    asks for a GPU."""
    phases = load_bench("training_phases")
    for argv, expected in ((["--modes", "float32,fp8"], "--modes: each must be one of"),
                           (["--models", "18,7"], "--models: each must be one of")):
        try:
            phases.main(argv)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{argv}: no error")
        err = capsys.readouterr().err
        assert expected in err and ("'fp8'" in err or "'7'" in err), err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is the CPU's")
def test_training_phases_needs_a_gpu(capsys):
    assert load_bench("training_phases").main(["--models", "18"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err

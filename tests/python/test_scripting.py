"""TorchScript: torch.jit.script(ModelNew) gives eager ModelNew's output, and survives a
torch.jit.save / torch.jit.load round trip."""
import copy

import pytest
import torch

from fusedops_testing import KEYS, make_input, make_pair
from fusedops.accuracy import assert_within_tolerance, tolerance_for

ARGS = {"98": (64, 100, 7, 2.0), "18": (64, 100), "39": (64, 100, (100,)), "62": (64, 100, 10)}


def assert_equal_outputs(a, b, device):
    # Same operator, same inputs: bitwise on CPU; CUDA kernels may use atomics.
    if device == "cpu":
        assert torch.equal(a, b), (a - b).abs().max()
    else:
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def modes(key):
    return ["train", "eval"] if key == "39" else ["eval"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("key", KEYS)
def test_script_matches_eager(key, dtype, device):
    ref, eager = make_pair(key, ARGS[key], device=device, dtype=dtype)
    for mode in modes(key):
        eager.train(mode == "train")
        ref.train(mode == "train")
        twin = copy.deepcopy(eager)  # the scripted copy starts from the same running stats
        scripted = torch.jit.script(twin)
        for batch in (5, 32):
            x = make_input((batch, ARGS[key][0]), "randn", dtype=dtype, device=device)
            with torch.no_grad():
                out_eager = eager(x)
                out_script = scripted(x)
                expected = ref(x)
            assert_equal_outputs(out_script, out_eager, device)
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            torch.testing.assert_close(out_script, expected, rtol=tol, atol=tol)
        if key == "39" and mode == "train":
            # the scripted module updated its own buffers exactly as eager did
            for name, buf in eager.bn.named_buffers():
                torch.testing.assert_close(getattr(twin.bn, name), buf, rtol=1e-12, atol=0)


@pytest.mark.parametrize("key", KEYS)
def test_script_save_load_roundtrip(key, device, tmp_path):
    ref, eager = make_pair(key, ARGS[key], device=device, dtype=torch.float32)
    eager.eval()
    ref.eval()
    scripted = torch.jit.script(copy.deepcopy(eager))
    path = tmp_path / f"model{key}.pt"
    torch.jit.save(scripted, str(path))
    loaded = torch.jit.load(str(path), map_location=device)
    # the graph calls the fused operator, not a decomposition
    assert "fusedops" in loaded.code
    for name, t in eager.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], t), name
    x = make_input((16, ARGS[key][0]), "rand", device=device)
    with torch.no_grad():
        out_loaded = loaded(x)
        out_eager = eager(x)
        expected = ref(x)
    assert_equal_outputs(out_loaded, out_eager, device)
    assert_within_tolerance(out_loaded, expected, tolerance_for(torch.float32))


@pytest.mark.parametrize("key", ["98", "18"])
def test_scripted_model_follows_weight_changes(key, device):
    ref, eager = make_pair(key, ARGS[key], device=device, dtype=torch.float64)
    scripted = torch.jit.script(eager)
    x = make_input((8, ARGS[key][0]), "randn", dtype=torch.float64, device=device)
    linear = "matmul" if key == "98" else "linear"
    with torch.no_grad():
        scripted(x)
        getattr(ref, linear).weight.mul_(-1.5)
        getattr(scripted, linear).weight.mul_(-1.5)
        assert_within_tolerance(scripted(x), ref(x), tolerance_for(torch.float64))

"""Which GEMM ran, and why (ops/plan/: the planner, the settings, explain): what a user sees
through fusedops.explain, FUSEDOPS_LOG=routes and fusedops.settings. The planner's rules
themselves are walked as a table by tests/cpp/test_planner.cpp."""
import os
import re
import subprocess
import sys

import pytest
import torch

import fusedops
from fusedops_testing import make_input, make_pair

CUDA = torch.cuda.is_available()
HOPPER = CUDA and torch.cuda.get_device_capability() == (9, 0)
ROUTES = {"folded-matvec", "aten-linear", "cublas-f64", "cublas-half", "sm90-half-fused",
          "skinny", "skinny-half", "skinny-half-fused", "skinny-3xfp16", "skinny-3xfp16-fused",
          "3xfp16", "3xfp16-splitk", "3xfp16-fused", "1xfp16", "1xfp16-splitk", "1xfp16-fused",
          "2xfp16-fused", "3xtf32", "sgemm", "tf32", "bf16x"}
OPS = {"18": "matmul_sum_max_avgpool_logsumexp_logsumexp", "39": "gemm_scale_batchnorm",
       "62": "matmul_groupnorm_leakyrelu_sum", "98": "matmul_avgpool_gelu_scale_max"}
SMALL = {"18": (64, 48), "39": (64, 48, (48,)), "62": (64, 48, 6), "98": (64, 48, 4, 2.0)}


def test_settings_block_sets_and_restores_the_environment(monkeypatch):
    monkeypatch.setenv("FUSEDOPS_HALF_GEMM", "cublas")
    monkeypatch.delenv("FUSEDOPS_FP32_GEMM", raising=False)
    try:
        with fusedops.settings(FUSEDOPS_HALF_GEMM="fused", FUSEDOPS_FP32_GEMM="ieee"):
            assert os.environ["FUSEDOPS_HALF_GEMM"] == "fused"
            assert os.environ["FUSEDOPS_FP32_GEMM"] == "ieee"
        assert os.environ["FUSEDOPS_HALF_GEMM"] == "cublas"
        assert "FUSEDOPS_FP32_GEMM" not in os.environ
        with pytest.raises(ValueError, match="HALF_GEMM is not a FUSEDOPS_\\* setting"):
            with fusedops.settings(HALF_GEMM="fused"):
                pass
    finally:
        # The block's exit read FUSEDOPS_HALF_GEMM=cublas into the process's settings; the
        # environment's own value comes back with it, or later tests in this process (one
        # pytest-xdist worker) would plan with cublas.
        monkeypatch.undo()
        fusedops.reload_settings()


# issue 36: each of these ran silently on the CPU build (the model ran, reload_settings() and
# explain() raised nothing, fusedops_app run exited 0).
BAD_SETTINGS = [
    ("FUSEDOPS_HALF_GEMM", "garbage", "auto, cublas or fused"),
    ("FUSEDOPS_HALF_GEMM", "", "auto, cublas or fused"),
    ("FUSEDOPS_FP32_GEMM", "bogus", "auto, ieee, 3xtf32 or 3xfp16"),
    ("FUSEDOPS_3XTF32_CHUNK", "99999999999999999999", "a positive multiple of 32"),
    ("FUSEDOPS_LOG", "yes", "empty or routes"),
    ("FUSEDOPS_CHECK_FOLDS", "yes", "0 or 1"),
]


@pytest.mark.parametrize("name,value,allowed", BAD_SETTINGS,
                         ids=[f"{n}={v or 'empty'}" for n, v, _ in BAD_SETTINGS])
def test_a_bad_setting_is_refused_when_read_and_at_every_call(monkeypatch, name, value, allowed):
    _, new = make_pair("18", SMALL["18"])
    x = make_input((8, 64))
    expected = f"{name} must be {allowed}"
    monkeypatch.setenv(name, value)
    try:
        with pytest.raises(RuntimeError, match=re.escape(expected)) as raised:
            fusedops.reload_settings()
        assert f"got {value}" in str(raised.value)
        with pytest.raises(RuntimeError, match=re.escape(expected)):
            new(x)  # the CPU kernel, while the value stays
        with pytest.raises(RuntimeError, match=re.escape(expected)):
            fusedops.explain(new, x)
        # A fresh process: `import fusedops` fails, naming it.
        result = subprocess.run([sys.executable, "-c", "import fusedops"], capture_output=True,
                                text=True, env=dict(os.environ), timeout=300)
        assert result.returncode != 0 and expected in result.stderr, result.stderr[-2000:]
    finally:
        monkeypatch.undo()
        fusedops.reload_settings()
    new(x)


@pytest.mark.parametrize("name,value,dtype", [
    ("FUSEDOPS_FP32_GEMM", "3xfp16", torch.float32), ("FUSEDOPS_FP32_GEMM", "3xtf32", torch.float32),
    ("FUSEDOPS_HALF_GEMM", "fused", torch.bfloat16), ("FUSEDOPS_HALF_GEMM", "cublas", torch.float16)])
def test_a_forced_cuda_gemm_is_an_error_at_a_cpu_call(name, value, dtype):
    """A setting that forces a CUDA GEMM cannot run on the CPU: an error at a call it applies
    to, never the CPU kernel in its place; a call of another dtype runs."""
    _, new = make_pair("62", SMALL["62"], dtype=dtype)
    other_dtype = torch.float64
    _, other = make_pair("62", SMALL["62"], dtype=other_dtype)
    with fusedops.settings(**{name: value}):
        with pytest.raises(RuntimeError, match=re.escape(
                f"matmul_groupnorm_leakyrelu_sum: {name}={value} forces a CUDA GEMM, and this "
                "call runs on the CPU")):
            new(make_input((8, 64), dtype=dtype))
        other(make_input((8, 64), dtype=other_dtype))
    new(make_input((8, 64), dtype=dtype))


def test_cpu_kernels_plan_no_gemm():
    _, new = make_pair("62", SMALL["62"])
    assert fusedops.explain(new, make_input((8, 64))) == []


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("key", sorted(OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64],
                         ids=["f32", "f16", "f64"])
def test_explain_names_one_route_per_call(key, dtype):
    _, new = make_pair(key, SMALL[key], device="cuda", dtype=dtype)
    x = make_input((8, 64), dtype=dtype, device="cuda")
    lines = fusedops.explain(new, x)
    assert len(lines) == 1, lines
    head, _, reason = lines[0].partition(": ")
    name = "float64" if dtype == torch.float64 else str(dtype).removeprefix("torch.")
    m, n = 8, 12 if key == "98" else 48
    assert head == f"{OPS[key]} {name} accurate m={m} n={n} k=64 cuda:0", lines[0]
    route = reason.split(" ")[0]
    assert route in ROUTES, lines[0]
    assert reason.endswith(")") and "(" in reason, lines[0]
    if dtype == torch.float64 and key != "18":
        assert route == "cublas-f64"
    # Nothing is recorded outside explain.
    new(x)
    assert torch.ops.fusedops.routes_taken() == []


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_settings_change_the_route_and_bad_values_name_the_variable():
    _, new = make_pair("39", SMALL["39"], device="cuda")
    x = make_input((2, 64), device="cuda")
    with fusedops.settings(FUSEDOPS_FP32_GEMM="3xtf32"):
        assert ": 3xtf32 (FUSEDOPS_FP32_GEMM=3xtf32)" in fusedops.explain(new, x)[0]
    assert ": skinny (" in fusedops.explain(new, x)[0]  # 2 rows, the environment restored
    with pytest.raises(RuntimeError,
                       match="FUSEDOPS_FP32_GEMM must be auto, ieee, 3xtf32 or 3xfp16, got fast"):
        with fusedops.settings(FUSEDOPS_FP32_GEMM="fast"):
            pass
    new(x)  # the environment restored


@pytest.mark.cuda
@pytest.mark.skipif(not HOPPER, reason="the 3xFP16 engine and the fused half GEMM need sm_90")
def test_explain_on_hopper_reports_the_engines_and_a_refused_weight():
    _, new = make_pair("62", (256, 4096, 128), device="cuda", dtype=torch.float16)
    x = make_input((1024, 256), dtype=torch.float16, device="cuda")
    assert ": sm90-half-fused (" in fusedops.explain(new, x)[0]
    ref, new = make_pair("39", (256, 256, (256,)), device="cuda")
    x = make_input((256, 256), device="cuda")
    with fusedops.settings(FUSEDOPS_FP32_GEMM="3xfp16"):
        assert ": 3xfp16 (" in fusedops.explain(new, x)[0]
        with torch.no_grad():
            new.gemm.weight[3, 5] = float("inf")  # the engine's range check refuses the weight
        fusedops.explain(new, x)  # makes W's fold: its verdict reaches the host asynchronously
        torch.cuda.synchronize()
        lines = fusedops.explain(new, x)
    assert len(lines) == 2, lines
    assert ": 3xfp16 (" in lines[0]
    assert ": sgemm (the 3xFP16 engine refused the weight" in lines[1]
    assert lines[1].endswith(" instead of 3xfp16"), lines[1]


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_log_routes_prints_each_new_choice_once():
    code = (
        "import torch, fusedops\n"
        "from fusedops_testing import make_input, make_pair\n"
        "_, new = make_pair('18', (64, 48), device='cuda')\n"
        "for batch in (8, 8, 8, 16):\n"
        "    new(make_input((batch, 64), device='cuda'))\n"
        "torch.cuda.synchronize()\n")
    env = dict(os.environ, FUSEDOPS_LOG="routes",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("fusedops route: ")]
    assert lines == [
        "fusedops route: matmul_sum_max_avgpool_logsumexp_logsumexp float32 accurate m=8 n=48 "
        "k=64 cuda:0: folded-matvec (sum of a Linear = x . colsum(W))",
        "fusedops route: matmul_sum_max_avgpool_logsumexp_logsumexp float32 accurate m=16 n=48 "
        "k=64 cuda:0: folded-matvec (sum of a Linear = x . colsum(W))"], done.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("key", ["39", "62"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_autocast_runs_the_half_precision_gemm(key, dtype):
    """Inside torch.autocast a float32 model's Linear runs in the autocast dtype (the
    operator's autocast form), not the float32 engine on rounded values."""
    init = {"39": (256, 4096, (4096,)), "62": (256, 4096, 128)}[key]
    _, new = make_pair(key, init, device="cuda")
    x = make_input((1024, 256), device="cuda")
    with torch.autocast("cuda", dtype=dtype):
        lines = fusedops.explain(new, x)
        out = new(x)
    assert out.dtype == torch.float32
    name = str(dtype).removeprefix("torch.")
    assert len(lines) == 1 and f" {name} autocast accurate " in lines[0], lines
    expected = "sm90-half-fused" if HOPPER and key == "62" else "cublas-half"
    assert f": {expected} (" in lines[0], lines

"""KernelBench's fp16/bf16 correctness check (fusedops.kernelbench_check: its procedure, seeds,
torch.rand inputs, 5 trials, atol = rtol = 1e-2) passes for every model with "eager" numerics:
on the GPU at docs/MODELS.md's default sizes, on the CPU at small sizes."""
import pytest
import torch

from fusedops.kernelbench_check import KERNELBENCH_TRIALS, check
from fusedops_testing import KEYS

HALF = [pytest.param(torch.float16, id="f16"), pytest.param(torch.bfloat16, id="bf16")]
SMALL = {"98": ((512, 512, 16, 2.0), 64), "18": ((512, 512), 64),
         "39": ((512, 512, (512,)), 64), "62": ((512, 512, 32), 64)}


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("key", KEYS)
def test_kernelbench_check_default_sizes_cuda(key, dtype):
    result = check(key, dtype=dtype, numerics="eager", device="cuda")
    assert result.trials == KERNELBENCH_TRIALS
    assert result.passed, str(result)


CPU_PARAMS = [
    pytest.param(key, dtype, id=f"{key}-{dtype_id}",
                 marks=[pytest.mark.xfail(strict=True, reason=(
                     "ATen's CPU batch_norm for bfloat16 is itself 0.034 from the exact "
                     "normalization of its input (an exactly rounded result: 0.015), so no "
                     "exactly rounded kernel meets 1e-2 against it on the CPU (test_numerics.py "
                     "measures against its float32 batch_norm instead); on CUDA this check "
                     "passes"))] if (key, dtype) == ("39", torch.bfloat16) else [])
    for key in KEYS for dtype, dtype_id in ((torch.float16, "f16"), (torch.bfloat16, "bf16"))
]


@pytest.mark.parametrize("key,dtype", CPU_PARAMS)
def test_kernelbench_check_small_sizes_cpu(key, dtype):
    init_args, batch = SMALL[key]
    result = check(key, dtype=dtype, numerics="eager", device="cpu", init_args=init_args,
                   batch_size=batch)
    assert result.trials == KERNELBENCH_TRIALS
    assert result.passed, str(result)

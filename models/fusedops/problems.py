"""The four problems: reference model, drop-in, default constructor arguments and inputs
(docs/MODELS.md's default sizes), in one table."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import model_new, reference


@dataclass(frozen=True)
class Problem:
    key: str                 # "98", "18", "39", "62"
    name: str                # the KernelBench name
    op: str                  # the fused operator behind ModelNew
    model: type
    model_new: type
    init_args: tuple         # SPEC default constructor arguments
    batch_size: int          # SPEC default batch
    in_features_index: int = 0  # which init arg is the input width

    def input_shape(self, batch_size: int | None = None, init_args: tuple | None = None):
        args = self.init_args if init_args is None else init_args
        return (self.batch_size if batch_size is None else batch_size,
                args[self.in_features_index])

    def make_input(self, batch_size: int | None = None, init_args: tuple | None = None,
                   dist: str = "rand", dtype=torch.float32, device="cpu",
                   generator: torch.Generator | None = None) -> torch.Tensor:
        make: Callable = {"rand": torch.rand, "randn": torch.randn}[dist]
        return make(self.input_shape(batch_size, init_args), dtype=dtype, device=device,
                    generator=generator)


PROBLEMS: dict[str, Problem] = {
    "98": Problem("98", "Matmul_AvgPool_GELU_Scale_Max", "matmul_avgpool_gelu_scale_max",
                  reference.Model98, model_new.ModelNew98, (8192, 8192, 16, 2.0), 1024),
    "18": Problem("18", "Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp",
                  "matmul_sum_max_avgpool_logsumexp_logsumexp",
                  reference.Model18, model_new.ModelNew18, (8192, 8192), 1024),
    "39": Problem("39", "Gemm_Scale_BatchNorm", "gemm_scale_batchnorm",
                  reference.Model39, model_new.ModelNew39, (8192, 8192, (8192,)), 1024),
    "62": Problem("62", "Matmul_GroupNorm_LeakyReLU_Sum", "matmul_groupnorm_leakyrelu_sum",
                  reference.Model62, model_new.ModelNew62, (8192, 8192, 512), 1024),
}

# The public benchmark runs model 39 at another size as well (docs/MODELS.md).
BENCH_39_LARGE = {"init_args": (4096, 4096, (4096,)), "batch_size": 16384}


def get_problem(key: str) -> Problem:
    key = str(key)
    if key not in PROBLEMS:
        raise KeyError(f"unknown problem {key!r}; expected one of {sorted(PROBLEMS)}")
    return PROBLEMS[key]


def get_init_inputs(key: str) -> tuple:
    return get_problem(key).init_args


def get_inputs(key: str, batch_size: int | None = None, dist: str = "rand", **kw) -> list:
    return [get_problem(key).make_input(batch_size, dist=dist, **kw)]

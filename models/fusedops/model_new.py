"""Drop-in replacements for the reference models: same constructor, same submodules (so the
same parameter names, state_dict and random draws), forward through one fused operator.

Weight folds (model 98's pooled Linear, model 18's column sums, the GEMM engines' splits of W
on CUDA) are cached on the weight tensors inside the operator library, so a steady-state forward
does not refold, any change of the weights seen by their version counters is followed, and the
folds are freed with the weights (see ops/common/fold_cache.h). A ModelNew passes
`cache_folds=True`: it caches in every mode, with grad mode on and parameters that require grad
too (KernelBench times it so; an optimizer step, load_state_dict or `param.copy_()` is seen), where
a raw operator call with the default `cache_folds=None` folds afresh whenever autograd records it
with a weight that requires grad (gradcheck writes weights through `.data`). `cache_folds = False`
on a model computes them afresh on every call (exact, uncached): for hosts that write weights in
ways the version counter cannot see (`.data`, memcpy into data_ptr(), numpy views edited in
place, weights shared with another process); `fusedops.checking_folds()` finds such writes in a
test. It is a plain attribute: scripted models keep it, and a C++ host can set it on a loaded
module (module.setattr("cache_folds", false)).

`load_state_dict` of a ModelNew drops the folds of its tensors (a load_state_dict post-hook):
it writes the weights in place, which the version counters of ordinary tensors show, but a
model built under torch.inference_mode() holds inference tensors, which have no version counter
and nothing else that changes when their bytes do, so no cache key could see that write.

`numerics` (keyword-only constructor argument and attribute, "accurate" by default) is how a
float16/bfloat16 model computes: "accurate" keeps intermediates in float32 and rounds the
result once (closer to float64 than the reference); "eager" rounds every intermediate to the
model's dtype where the reference's own ops write it, so that a check against the reference
run in float16/bfloat16 (KernelBench's atol = rtol = 1e-2) sees the same roundings
(docs/MODELS.md, "Numerics"). float32 and float64 models compute the same either way. The
operator checks the value ("accurate" or "eager"); like cache_folds it survives scripting and
export, and a C++ host can set it (module.setattr("numerics", "eager")).

Each forward reads a submodule once (`fc = self.fc`): every read of a submodule or a parameter
goes through nn.Module.__getattr__, a Python function (about 0.6 us a read on a fast CPU), a
large share of a small-batch call's host time (issue 25; docs/PERFORMANCE.md).
"""
import torch
import torch.nn as nn

from ._library import load_library

load_library()


def _clear_folds_after_load(module, incompatible_keys):
    """load_state_dict post-hook of every ModelNew (see the module docstring)."""
    torch.ops.fusedops.clear_fold_cache([*module.parameters(), *module.buffers()])


class ModelNew98(nn.Module):
    def __init__(self, in_features, out_features, pool_kernel_size, scale_factor, *,
                 numerics="accurate"):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.avg_pool = nn.AvgPool1d(kernel_size=pool_kernel_size)
        self.scale_factor = scale_factor
        self.pool_kernel_size = int(pool_kernel_size)
        self.cache_folds = True
        self.numerics: str = numerics
        self.register_load_state_dict_post_hook(_clear_folds_after_load)

    def forward(self, x):
        matmul = self.matmul
        return torch.ops.fusedops.matmul_avgpool_gelu_scale_max(
            x, matmul.weight, matmul.bias, self.pool_kernel_size,
            float(self.scale_factor),
            cache_folds=self.cache_folds, numerics=self.numerics)


class ModelNew18(nn.Module):
    def __init__(self, in_features, out_features, *, numerics="accurate"):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.cache_folds = True
        self.numerics: str = numerics
        self.register_load_state_dict_post_hook(_clear_folds_after_load)

    def forward(self, x):
        linear = self.linear
        return torch.ops.fusedops.matmul_sum_max_avgpool_logsumexp_logsumexp(
            x, linear.weight, linear.bias,
            cache_folds=self.cache_folds, numerics=self.numerics)


class ModelNew39(nn.Module):
    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1, *,
                 numerics="accurate"):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)
        self.cache_folds = True
        self.numerics: str = numerics
        self.register_load_state_dict_post_hook(_clear_folds_after_load)

    def forward(self, x):
        bn = self.bn
        running_mean = bn.running_mean
        running_var = bn.running_var
        num_batches_tracked = bn.num_batches_tracked
        if running_mean is None or running_var is None or num_batches_tracked is None:
            raise RuntimeError(
                "ModelNew39: bn has no running statistics (BatchNorm1d with "
                "track_running_stats=False); fusedops.gemm_scale_batchnorm needs "
                "running_mean, running_var and num_batches_tracked, as Model39's "
                "BatchNorm1d(out_features) has them")
        gemm = self.gemm
        return torch.ops.fusedops.gemm_scale_batchnorm(
            x, gemm.weight, gemm.bias, self.scale, bn.weight, bn.bias,
            running_mean, running_var, num_batches_tracked, bn.training, bn.momentum, bn.eps,
            cache_folds=self.cache_folds, numerics=self.numerics)


class ModelNew62(nn.Module):
    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01, *,
                 numerics="accurate"):
        super().__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.leaky_relu = nn.LeakyReLU(negative_slope=negative_slope)
        self.cache_folds = True
        self.numerics: str = numerics
        self.register_load_state_dict_post_hook(_clear_folds_after_load)

    def forward(self, x):
        fc, gn = self.fc, self.gn
        # GroupNorm's constants through self.gn: TorchScript finds them only on that path.
        return torch.ops.fusedops.matmul_groupnorm_leakyrelu_sum(
            x, fc.weight, fc.bias, self.gn.num_groups, gn.weight, gn.bias,
            self.gn.eps, self.leaky_relu.negative_slope,
            cache_folds=self.cache_folds, numerics=self.numerics)

"""Exports each fusedops ModelNew as TorchScript into a Triton-style model repository.

    python -m scripted.export --output model_repo                 # SPEC sizes, all four models
    python scripted/export.py --sizes small --output /tmp/repo    # CI sizes, seconds on 2 cores

Layout (NVIDIA Triton's PyTorch backend, "pytorch_libtorch"):

    <output>/<model>/config.pbtxt          Triton model configuration
    <output>/<model>/1/model.pt            torch.jit.script(ModelNew), extra file fusedops.json
    <output>/<model>/sample_input.pt       one input batch        } TorchScript modules holding
    <output>/<model>/reference_output.pt   the reference's output } the tensor as buffer "tensor"

<model> is fusedops_<problem>_<op>, e.g. fusedops_98_matmul_avgpool_gelu_scale_max.

The sample tensors are TorchScript modules rather than torch.save pickles because
torch::jit::load reads them in C++ with nothing but libtorch (fusedops_app, the C++ tests)
and Python reads them with torch.jit.load(path).tensor.

Models are exported in eval() mode by default: that is how a deployed model runs, and for
model 39 it means BatchNorm uses its running statistics. Those statistics are first
calibrated by a few training-mode passes of the reference (so the exported model does not
hold the trivial mean 0 / var 1 of a fresh BatchNorm), and the reference output is computed
in the same mode from the same weights. --mode train exports the benchmark's mode instead
(batch statistics, running statistics updated on each call).

Loading a model.pt needs the fusedops operators registered: fusedops_app links libfusedops;
Triton needs LD_PRELOAD=libfusedops.so (app/README.md).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import fusedops
except ImportError:  # run from a checkout without PYTHONPATH=models
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
    import fusedops

from fusedops.problems import PROBLEMS, Problem

EXTRA_FILE_NAME = "fusedops.json"
# Bumped whenever the keys of the extra file change meaning; fusedops_app checks it.
METADATA_FORMAT = 1

# Small sizes for CI on a 2-core machine: the same structure as SPEC (98 keeps k=16 and
# a width divisible by it, 62 keeps 16 channels a group), a few ms per model.
SMALL_SIZES: dict[str, tuple[tuple, int]] = {
    "98": ((256, 512, 16, 2.0), 32),
    "18": ((256, 512), 32),
    "39": ((256, 512, (512,)), 32),
    "62": ((256, 512, 32), 32),
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
TRITON_DATA_TYPES = {torch.float32: "TYPE_FP32", torch.float16: "TYPE_FP16",
                     torch.bfloat16: "TYPE_BF16"}

# Training-mode passes of the reference that give model 39's BatchNorm non-trivial running
# statistics before an eval-mode export.
BATCHNORM_CALIBRATION_STEPS = 3


@dataclass(frozen=True)
class ExportSpec:
    problem: Problem
    init_args: tuple
    batch_size: int
    dtype: torch.dtype
    device: torch.device
    seed: int
    mode: str            # "eval" or "train"

    @property
    def model_name(self) -> str:
        return f"fusedops_{self.problem.key}_{self.problem.op}"

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.problem.input_shape(self.batch_size, self.init_args))


class TensorContainer(torch.nn.Module):
    """Holds tensors as buffers so that C++ reads them back with torch::jit::load."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor)


def save_tensor(tensor: torch.Tensor, path: Path) -> None:
    torch.jit.save(torch.jit.script(TensorContainer({"tensor": tensor.detach()})), str(path))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_json_value(value):
    """init args as JSON: model 39's scale_shape tuple becomes a list."""
    if isinstance(value, (tuple, list)):
        return [to_json_value(v) for v in value]
    return value


def build_models(spec: ExportSpec) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The reference Model and ModelNew, holding identical weights, in spec's dtype/device/mode."""
    torch.manual_seed(spec.seed)
    reference = spec.problem.model(*spec.init_args)
    torch.manual_seed(spec.seed)
    model_new = spec.problem.model_new(*spec.init_args)

    if spec.mode == "eval" and spec.problem.key == "39":
        calibrate_batchnorm(reference, spec)
    # The drop-in contract gives equal weights from equal seeds; loading the state dict makes
    # the export independent of it (and carries model 39's calibrated running statistics).
    model_new.load_state_dict(reference.state_dict(), strict=True)

    for model in (reference, model_new):
        model.to(device=spec.device, dtype=spec.dtype)
        model.train(spec.mode == "train")
    return reference, model_new


def calibrate_batchnorm(reference: torch.nn.Module, spec: ExportSpec) -> None:
    generator = torch.Generator().manual_seed(spec.seed + 2)
    reference.train()
    with torch.no_grad():
        for _ in range(BATCHNORM_CALIBRATION_STEPS):
            reference(spec.problem.make_input(spec.batch_size, spec.init_args, dist="randn",
                                              generator=generator))


def make_sample_input(spec: ExportSpec) -> torch.Tensor:
    # Drawn on the CPU so the sample is the same whichever device the model is exported for.
    generator = torch.Generator().manual_seed(spec.seed + 1)
    x = spec.problem.make_input(spec.batch_size, spec.init_args, generator=generator)
    return x.to(device=spec.device, dtype=spec.dtype)


def compute_reference_output(reference: torch.nn.Module, x: torch.Tensor,
                             spec: ExportSpec) -> torch.Tensor:
    """The reference model's output on x, in x's dtype.

    float16/bfloat16: the reference runs in float32 on the same (already rounded) weights and
    input and its output is rounded once, since fusedops accumulates in float32 (SPEC).
    """
    with torch.no_grad():
        if spec.dtype == torch.float32:
            return reference(x)
        wide = reference.float()
        try:
            return wide(x.float()).to(spec.dtype)
        finally:
            reference.to(spec.dtype)


def triton_config(spec: ExportSpec, output_shape: tuple[int, ...]) -> str:
    """config.pbtxt for Triton's PyTorch backend: dims exclude the batch dimension."""
    data_type = TRITON_DATA_TYPES[spec.dtype]

    def tensor_entry(name: str, dims: tuple[int, ...]) -> str:
        lines = ["  {", f'    name: "{name}"', f"    data_type: {data_type}"]
        if dims:
            lines.append(f"    dims: [ {', '.join(str(d) for d in dims)} ]")
        else:
            # A (batch,) tensor has no dims of its own; Triton spells that dims [1] + reshape [].
            lines += ["    dims: [ 1 ]", "    reshape: { shape: [ ] }"]
        lines.append("  }")
        return "\n".join(lines)

    kind = "KIND_GPU" if spec.device.type == "cuda" else "KIND_CPU"
    return "\n".join([
        f'name: "{spec.model_name}"',
        'platform: "pytorch_libtorch"',
        f"max_batch_size: {spec.batch_size}",
        "input [", tensor_entry("INPUT__0", spec.input_shape[1:]), "]",
        "output [", tensor_entry("OUTPUT__0", output_shape[1:]), "]",
        f"instance_group [ {{ count: 1, kind: {kind} }} ]",
        "",
    ])


def model_metadata(spec: ExportSpec, output: torch.Tensor) -> dict:
    return {
        "format": METADATA_FORMAT,
        "model_name": spec.model_name,
        "problem": spec.problem.key,
        "name": spec.problem.name,
        "op": f"fusedops::{spec.problem.op}",
        "init_args": to_json_value(spec.init_args),
        "mode": spec.mode,
        # The batch dimension (0) is free; the other input dims and the dtype are not.
        "input": {"shape": list(spec.input_shape), "dtype": dtype_name(spec.dtype)},
        "output": {"shape": list(output.shape), "dtype": dtype_name(output.dtype)},
        "device": str(spec.device),
        "seed": spec.seed,
        "fusedops_version": torch.ops.fusedops.version(),
        "torch_version": torch.__version__,
    }


def export_model(spec: ExportSpec, repo: Path) -> Path:
    reference, model_new = build_models(spec)
    x = make_sample_input(spec)
    reference_output = compute_reference_output(reference, x, spec)

    model_dir = repo / spec.model_name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    scripted = torch.jit.script(model_new)
    metadata = model_metadata(spec, reference_output)
    model_path = model_dir / "1" / "model.pt"
    torch.jit.save(scripted, str(model_path),
                   _extra_files={EXTRA_FILE_NAME: json.dumps(metadata, indent=2)})
    # Read it back: a file torch cannot load must fail here, not in the C++ host.
    torch.jit.load(str(model_path), map_location="cpu")

    save_tensor(x, model_dir / "sample_input.pt")
    save_tensor(reference_output, model_dir / "reference_output.pt")
    (model_dir / "config.pbtxt").write_text(triton_config(spec, tuple(reference_output.shape)))
    return model_dir


def parse_models(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in PROBLEMS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown model(s) {unknown or text!r}; expected a comma list of {list(PROBLEMS)}")
    return keys


def make_specs(args: argparse.Namespace) -> list[ExportSpec]:
    specs = []
    for key in args.models:
        problem = PROBLEMS[key]
        if args.sizes == "small":
            init_args, batch_size = SMALL_SIZES[key]
        else:
            init_args, batch_size = problem.init_args, problem.batch_size
        if args.batch_size is not None:
            batch_size = args.batch_size
        specs.append(ExportSpec(problem, init_args, batch_size, DTYPES[args.dtype],
                                torch.device(args.device), args.seed, args.mode))
    return specs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripted.export",
        description="Export the fusedops drop-in models as TorchScript into a Triton model "
                    "repository, with a sample input and the reference output per model.")
    parser.add_argument("--output", "-o", type=Path, required=True,
                        help="model repository folder (created; models in it are replaced)")
    parser.add_argument("--models", type=parse_models, default=list(PROBLEMS),
                        help="comma list of problems (default: %(default)s)")
    parser.add_argument("--sizes", choices=("spec", "small"), default="spec",
                        help="spec: SPEC.md default sizes; small: CI sizes (default: spec)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch of the sample input and Triton's max_batch_size "
                             "(default: the size preset's)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=("eval", "train"), default="eval",
                        help="module mode of the export (default: eval, see module docstring)")
    args = parser.parse_args(argv)
    if args.batch_size is not None and args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.mode == "train" and "39" in args.models and (args.batch_size or 2) < 2:
        parser.error("--mode train needs --batch-size >= 2: BatchNorm cannot train on one sample")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device is available")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    print(f"fusedops {torch.ops.fusedops.version()} ({fusedops.library_path}), "
          f"torch {torch.__version__}")
    for spec in make_specs(args):
        model_dir = export_model(spec, args.output)
        print(f"exported {spec.model_name}: input {list(spec.input_shape)} "
              f"{dtype_name(spec.dtype)} on {spec.device}, {spec.mode} mode -> {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

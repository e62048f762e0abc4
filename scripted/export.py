"""Exports each fusedops ModelNew into a Triton-style model repository, as TorchScript (.pt)
and as a torch.export + AOTInductor package (.pt2).

    python -m scripted.export --output model_repo                 # SPEC sizes, all four models
    python scripted/export.py --sizes small --output /tmp/repo    # CI sizes
    python scripted/export.py --sizes small --formats pt ...      # TorchScript only (seconds)

Layout (NVIDIA Triton's PyTorch backend: platform "pytorch_libtorch" for model.pt,
"torch_aoti" for model.pt2; one Triton model folder per artifact):

    <output>/<model>/config.pbtxt          platform "pytorch_libtorch"
    <output>/<model>/1/model.pt            torch.jit.script(ModelNew), extra file fusedops.json
    <output>/<model>_aoti/config.pbtxt     platform "torch_aoti"
    <output>/<model>_aoti/1/model.pt2      AOTInductor package, metadata entry fusedops.json
    <output>/<folder>/sample_input.pt      one input batch        } TorchScript modules holding
    <output>/<folder>/reference_output.pt  the reference's output } the tensor as buffer "tensor"

<model> is fusedops_<problem>_<op>, e.g. fusedops_98_matmul_avgpool_gelu_scale_max. The sample
input and reference output are computed once per model and shared by both folders (a hard
link where the file system allows it, else a copy), so that each folder checks on its own.

The .pt2 holds a shared library that AOTInductor compiled for the export's device type (on the
CPU with -march=native: for this machine's instruction set); the C++ compile takes 10 to 25 s
per model at the small sizes on a 2-core machine. Its batch dimension is dynamic
(torch.export.Dim, any batch >= 1), like the TorchScript model's. With --mode train, model 39's
package updates the running statistics it holds on each call, as the TorchScript model does.

The sample tensors are TorchScript modules rather than torch.save pickles because
torch::jit::load reads them in C++ with nothing but libtorch (fusedops_app, the C++ tests)
and Python reads them with torch.jit.load(path).tensor.

Models are exported in eval() mode by default: that is how a deployed model runs, and for
model 39 it means BatchNorm uses its running statistics. Those statistics are first
calibrated by a few training-mode passes of the reference (so the exported model does not
hold the trivial mean 0 / var 1 of a fresh BatchNorm), and the reference output is computed
in the same mode from the same weights. --mode train exports the benchmark's mode instead
(batch statistics, running statistics updated on each call).

Loading either artifact needs the fusedops operators registered (the .pt2 calls them through
the dispatcher too): fusedops_app links libfusedops; Triton needs LD_PRELOAD=libfusedops.so
(app/README.md).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import time
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

# Artifacts --formats chooses from: TorchScript and torch.export + AOTInductor.
FORMATS = ("pt", "pt2")
# Triton serves one artifact per model folder, so the .pt2 gets a folder of its own.
AOTI_FOLDER_SUFFIX = "_aoti"
TRITON_PLATFORMS = {"pt": "pytorch_libtorch", "pt2": "torch_aoti"}

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

    def folder_name(self, artifact_format: str) -> str:
        """The Triton model name (and folder) of one artifact of this model."""
        return self.model_name + (AOTI_FOLDER_SUFFIX if artifact_format == "pt2" else "")

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


def triton_config(spec: ExportSpec, output_shape: tuple[int, ...], artifact_format: str) -> str:
    """config.pbtxt for Triton's PyTorch backend: dims exclude the batch dimension.

    Both platforms take the same INPUT__0 / OUTPUT__0 names (the backend maps <name>__<index>
    to the forward's positional argument and output). For "torch_aoti" the backend loads
    <version>/model.pt2 and the package's model named "model", aoti_compile_and_package's
    default.
    """
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
        f'name: "{spec.folder_name(artifact_format)}"',
        f'platform: "{TRITON_PLATFORMS[artifact_format]}"',
        f"max_batch_size: {spec.batch_size}",
        "input [", tensor_entry("INPUT__0", spec.input_shape[1:]), "]",
        "output [", tensor_entry("OUTPUT__0", output_shape[1:]), "]",
        f"instance_group [ {{ count: 1, kind: {kind} }} ]",
        "",
    ])


def model_metadata(spec: ExportSpec, output: torch.Tensor, artifact_format: str) -> dict:
    """fusedops.json: inside model.pt as an extra file, inside model.pt2 as a metadata entry."""
    return {
        "format": METADATA_FORMAT,
        "model_name": spec.folder_name(artifact_format),
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


def save_torchscript(model_new: torch.nn.Module, metadata: dict, path: Path) -> None:
    torch.jit.save(torch.jit.script(model_new), str(path),
                   _extra_files={EXTRA_FILE_NAME: json.dumps(metadata, indent=2)})
    # Read it back: a file torch cannot load must fail here, not in the C++ host.
    torch.jit.load(str(path), map_location="cpu")


def tracing_input(x: torch.Tensor) -> torch.Tensor:
    """The input torch.export traces with. A batch of one would be specialized (export treats
    sizes 0 and 1 as constants), so a one-row sample is traced as two identical rows."""
    return x if x.shape[0] >= 2 else x.expand(2, *x.shape[1:]).contiguous()


def save_aoti_package(model_new: torch.nn.Module, x: torch.Tensor, metadata: dict,
                      path: Path) -> None:
    """torch.export with a dynamic batch dimension, then AOTInductor compiles the graph into a
    shared library for x's device, packaged with the weights as model.pt2."""
    batch = torch.export.Dim("batch", min=1)
    exported = torch.export.export(model_new, (tracing_input(x),),
                                   dynamic_shapes={"x": {0: batch}})
    torch._inductor.aoti_compile_and_package(
        exported, package_path=str(path),
        # Carried inside the package: C++ reads it with
        # AOTIModelPackageLoader::load_metadata_from_package, Python with
        # torch._inductor.aoti_load_package(path).get_metadata().
        inductor_configs={"aot_inductor.metadata": {
            EXTRA_FILE_NAME: json.dumps(metadata, indent=2)}})
    # Load it back (this dlopens the compiled library): a package that cannot load must fail
    # here, not in the C++ host.
    torch._inductor.aoti_load_package(str(path))


def share_file(source: Path, destination: Path) -> None:
    """destination holds source's bytes: one file under two names where the file system allows
    (the SPEC-size sample input is 32 MiB), a copy where it does not."""
    destination.unlink(missing_ok=True)
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)


def export_model(spec: ExportSpec, repo: Path, formats: list[str]) -> list[tuple[Path, float]]:
    """Writes one Triton model folder per format; returns each folder and its export seconds."""
    reference, model_new = build_models(spec)
    x = make_sample_input(spec)
    # The same reference in float64 (copied before the float32 run, which in train mode moves
    # the running statistics): lets `check` accept an element that misses the float32
    # reference only where it is at least as close to the exact value (cancelling sums).
    with torch.no_grad():
        reference_output_float64 = copy.deepcopy(reference).double()(x.double())
    reference_output = compute_reference_output(reference, x, spec)
    config_output_shape = tuple(reference_output.shape)

    written: list[tuple[Path, float]] = []
    for artifact_format in formats:
        start = time.perf_counter()
        model_dir = repo / spec.folder_name(artifact_format)
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        metadata = model_metadata(spec, reference_output, artifact_format)
        if artifact_format == "pt":
            save_torchscript(model_new, metadata, model_dir / "1" / "model.pt")
        else:
            save_aoti_package(model_new, x, metadata, model_dir / "1" / "model.pt2")

        if not written:
            save_tensor(x, model_dir / "sample_input.pt")
            save_tensor(reference_output, model_dir / "reference_output.pt")
            save_tensor(reference_output_float64, model_dir / "reference_output_float64.pt")
        else:
            first_dir = written[0][0]
            for sample in ("sample_input.pt", "reference_output.pt",
                           "reference_output_float64.pt"):
                share_file(first_dir / sample, model_dir / sample)
        (model_dir / "config.pbtxt").write_text(
            triton_config(spec, config_output_shape, artifact_format))
        written.append((model_dir, time.perf_counter() - start))
    return written


def parse_models(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in PROBLEMS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown model(s) {unknown or text!r}; expected a comma list of {list(PROBLEMS)}")
    return keys


def parse_formats(text: str) -> list[str]:
    formats = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise argparse.ArgumentTypeError(
            f"unknown format(s) {unknown or text!r}; expected a comma list of {list(FORMATS)}")
    return list(dict.fromkeys(formats))


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
    parser.add_argument("--formats", type=parse_formats, default=list(FORMATS),
                        help="comma list of artifacts: pt (TorchScript), pt2 (torch.export + "
                             "AOTInductor, compiles C++: tens of seconds per model) "
                             "(default: pt,pt2)")
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
        for model_dir, seconds in export_model(spec, args.output, args.formats):
            print(f"exported {model_dir.name}: input {list(spec.input_shape)} "
                  f"{dtype_name(spec.dtype)} on {spec.device}, {spec.mode} mode, "
                  f"{seconds:.1f} s -> {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

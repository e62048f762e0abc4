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
    <output>/<folder>/sample_input.pt      one input batch        } torch.save(tensor): data
    <output>/<folder>/reference_output.pt  the reference's output } only, no code
    <output>/<folder>/fusedops_manifest.json  SHA-256 and size of every file above (written last)

<model> is fusedops_<problem>_<op>, e.g. fusedops_98_matmul_avgpool_gelu_scale_max. The sample
input and reference output are computed once per model and written into each folder as its own
files (no links between folders: re-exporting one format never changes the other's files), so
that each folder checks on its own. Each folder is built complete in a hidden staging folder
and swapped into place under a lock (scripted/model_folder.py): a reader, a concurrent export
or an export that stops halfway never leaves a folder that mixes two exports.

The .pt2 holds a shared library that AOTInductor compiled for the export's device type (on the
CPU with -march=native: for this machine's instruction set, which fusedops.json records as
cpu_features); the C++ compile takes 10 to 25 s per model at the small sizes on a 2-core
machine. Its batch dimension is dynamic (torch.export.Dim, any batch >= 1), like the
TorchScript model's. With --mode train, model 39's package updates the running statistics it
holds on each call, as the TorchScript model does.

The sample tensors are torch.save(tensor) files: plain data that torch.load(path,
weights_only=True) reads in Python and torch::pickle_load (a restricted unpickler that runs no
code) in C++; fusedops_app also checks each tensor's extent against the bytes its file holds.

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
import contextlib
import copy
import json
import logging
import os
import stat
import subprocess
import sys
import time
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import fusedops
except ImportError:  # run from a checkout without PYTHONPATH=models
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
    import fusedops

from fusedops.problems import PROBLEMS, Problem

try:
    from scripted.model_folder import MANIFEST_FILE_NAME, MANIFEST_FORMAT, ModelFolderWriter
except ImportError:  # run as a script (python scripted/export.py): the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from scripted.model_folder import MANIFEST_FILE_NAME, MANIFEST_FORMAT, ModelFolderWriter

EXTRA_FILE_NAME = "fusedops.json"
# Bumped whenever the keys of the extra file change meaning; fusedops_app checks it.
# 2: rows_independent, and cpu_features for a CPU .pt2.
METADATA_FORMAT = 2
SAMPLE_FILES = ("sample_input.pt", "reference_output.pt", "reference_output_float64.pt")
# Problems whose rows are not independent in train mode: model 39's BatchNorm normalizes with
# the statistics of the whole batch, so a server must not batch requests together.
BATCH_STATISTICS_IN_TRAIN_MODE = {"39"}
# cpuinfo's capability keys that are not instructions a compiler generates.
NON_ISA_CAPABILITIES = {"clflush", "clflushopt", "clwb"}

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
    numerics: str = "accurate"  # ModelNew's numerics: "accurate" or "eager" (model_new.py)

    @property
    def model_name(self) -> str:
        return f"fusedops_{self.problem.key}_{self.problem.op}"

    def folder_name(self, artifact_format: str) -> str:
        """The Triton model name (and folder) of one artifact of this model."""
        return self.model_name + (AOTI_FOLDER_SUFFIX if artifact_format == "pt2" else "")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.problem.input_shape(self.batch_size, self.init_args))


def save_tensor(tensor: torch.Tensor, path: Path) -> None:
    """torch.save of the bare tensor, on the CPU (the app moves it where the model runs)."""
    torch.save(tensor.detach().cpu().contiguous(), path)


def load_tensor(path: Path) -> torch.Tensor:
    """What fusedops_app reads: a torch.save'd tensor, loaded without running code."""
    return torch.load(path, weights_only=True)


def cpu_features() -> list[str]:
    """The instruction set extensions of this CPU, by cpuinfo's names (the app reads the same
    ones with at::cpu::get_cpu_capabilities): AOTInductor compiles a CPU .pt2 with
    -march=native, so its code may use any of them."""
    return sorted(name for name, present in torch.cpu.get_capabilities().items()
                  if present is True and name not in NON_ISA_CAPABILITIES)


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
    model_new = spec.problem.model_new(*spec.init_args, numerics=spec.numerics)

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


def rows_independent(spec: ExportSpec) -> bool:
    return not (spec.mode == "train" and spec.problem.key in BATCH_STATISTICS_IN_TRAIN_MODE)


def instance_group(spec: ExportSpec, artifact_format: str) -> list[str]:
    """Where Triton runs the model's instances, with the reason as a comment."""
    if spec.device.type == "cuda":
        return ["# Exported for CUDA: one instance on each GPU of the server.",
                "instance_group [ { count: 1, kind: KIND_GPU } ]"]
    if artifact_format == "pt2":
        return ["# This .pt2 holds code AOTInductor compiled for the CPU: it runs only on CPU",
                "# instances. To serve it on GPUs, export it with --device cuda on a GPU machine.",
                "instance_group [ { count: 1, kind: KIND_CPU } ]"]
    return ["# Exported on the CPU, but a TorchScript model runs on any device: KIND_AUTO puts an",
            "# instance on each GPU of the server, or on the CPU where there is none.",
            "instance_group [ { count: 1, kind: KIND_AUTO } ]"]


def triton_config(spec: ExportSpec, output_shape: tuple[int, ...], artifact_format: str) -> str:
    """config.pbtxt for Triton's PyTorch backend: dims exclude the batch dimension.

    Both platforms take the same INPUT__0 / OUTPUT__0 names (the backend maps <name>__<index>
    to the forward's positional argument and output). For "torch_aoti" the backend loads
    <version>/model.pt2 and the package's model named "model", aoti_compile_and_package's
    default; Triton before 26.03 has no such platform and needs the backend named (app/README.md,
    "Triton versions"). fusedops_app check validates it with Triton's schema and against the
    model; tests/triton serves it with the real Triton server.
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

    if not rows_independent(spec):
        batching = ["# No dynamic_batching: in train mode BatchNorm normalizes with the statistics",
                    "# of the whole batch, so batching requests together would change each",
                    "# request's output. Each request is one batch."]
    elif artifact_format == "pt2":
        batching = ["# No dynamic_batching: Triton's PyTorch backend (r26.03 through main, 2026-11)",
                    "# answers each request of a batched .pt2 run with the whole batch's output",
                    "# (wrong shapes and values; a crash for large outputs). Each request runs",
                    "# alone. docs/TRITON_PT2_BATCHING.md; the .pt of this model batches."]
    else:
        batching = ["# Each output row depends on its input row alone: Triton may batch requests.",
                    "dynamic_batching { }"]
    return "\n".join([
        f'name: "{spec.folder_name(artifact_format)}"',
        f'platform: "{TRITON_PLATFORMS[artifact_format]}"',
        f"max_batch_size: {spec.batch_size}",
        "input [", tensor_entry("INPUT__0", spec.input_shape[1:]), "]",
        "output [", tensor_entry("OUTPUT__0", output_shape[1:]), "]",
        *instance_group(spec, artifact_format),
        *batching,
        "# Triton's default since 23.06, said here: the model runs under torch::InferenceMode.",
        'parameters: { key: "INFERENCE_MODE" value: { string_value: "true" } }',
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
        # How the exported ModelNew rounds intermediates (a float16/bfloat16 export): its
        # `numerics` attribute, which the TorchScript model keeps and the .pt2 fixes.
        "numerics": spec.numerics,
        # The batch dimension (0) is free; the other input dims and the dtype are not.
        "input": {"shape": list(spec.input_shape), "dtype": dtype_name(spec.dtype)},
        "output": {"shape": list(output.shape), "dtype": dtype_name(output.dtype)},
        "device": str(spec.device),
        "seed": spec.seed,
        "fusedops_version": torch.ops.fusedops.version(),
        "torch_version": torch.__version__,
        "rows_independent": rows_independent(spec),
        **({"cpu_features": cpu_features()}
           if artifact_format == "pt2" and spec.device.type == "cpu" else {}),
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


class _DropLogMessage(logging.Filter):
    """A logging filter that drops the records whose message starts with one prefix."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextlib.contextmanager
def aoti_noise_silenced():
    """Silences, around the AOTInductor compile only, two messages PyTorch 2.11 prints from its
    own internals that tell the user nothing and that no other call of ours avoids (issue 41):

    - FutureWarning "`isinstance(treespec, LeafSpec)` is deprecated": Inductor's debug wrapper
      (torch/_dynamo/repro/after_aot.py) deep-copies the FX graph, and copying the graph's
      pytree LeafSpec re-runs its deprecated constructor (the warning is attributed to copyreg).
      torch builds that LeafSpec itself under the same filter (torch/utils/_pytree.py); our
      code never names LeafSpec.
    - "No CUDA runtime is found, using CUDA_HOME=...": logged by torch.utils.cpp_extension when
      Inductor's C++ builder first imports it on a machine with a CUDA toolkit and no GPU. The
      export of a CPU model compiles host C++ only; the toolkit plays no part in it.

    Both filters are removed on exit; any other warning or log record passes."""
    cpp_extension_logger = logging.getLogger("torch.utils.cpp_extension")
    no_cuda_runtime = _DropLogMessage("No CUDA runtime is found")
    cpp_extension_logger.addFilter(no_cuda_runtime)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                category=FutureWarning, module="copyreg")
            yield
    finally:
        cpp_extension_logger.removeFilter(no_cuda_runtime)


def refuse_a_compiler_without_shared_libstdcxx() -> None:
    """AOTInductor links the .pt2's library with the C++ compiler torch picks ($CXX, else g++).
    A toolchain that has only a static libstdc++ (found as CXX on a GPU machine we test on)
    links a second copy of the C++ runtime into that library; loaded into torch's process, it
    dies in std::regex's locale code on its first call (a segmentation fault, no message).
    The compiler answers where its shared libstdc++ is: a bare name means it has none."""
    from torch._inductor import cpp_builder, exc

    try:
        compiler = cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        raise RuntimeError(f"AOTInductor needs a C++ compiler for the .pt2 and found none: "
                           f"expected $CXX or g++ on PATH, got CXX="
                           f"{os.environ.get('CXX', '(unset)')}") from None
    answer = subprocess.run([compiler, "-print-file-name=libstdc++.so"], capture_output=True,
                            text=True).stdout.strip()
    if "/" not in answer:
        raise RuntimeError(
            f"AOTInductor's C++ compiler {compiler} (from $CXX, else g++ on PATH) has no shared "
            f"libstdc++ (-print-file-name=libstdc++.so answers {answer!r}, expected a path): the "
            f".pt2 would carry a second C++ runtime and crash when loaded; set CXX to a compiler "
            f"that links the shared libstdc++ (such as /usr/bin/g++); nothing was written")


def package_metadata(path: Path) -> dict | None:
    """The metadata AOTInductor wrote into the package at path (the JSON object of its
    wrapper_metadata.json, as fusedops_app reads it), or None where that entry is missing, empty
    or not a JSON object."""
    with zipfile.ZipFile(path) as package:
        names = [name for name in package.namelist()
                 if "/data/aotinductor/" in f"/{name}" and name.endswith("wrapper_metadata.json")]
        if len(names) != 1:
            return None
        try:
            metadata = json.loads(package.read(names[0]))
        except ValueError:
            return None
    return metadata if isinstance(metadata, dict) else None


def save_aoti_package(model_new: torch.nn.Module, x: torch.Tensor, metadata: dict,
                      path: Path) -> None:
    """torch.export with a dynamic batch dimension, then AOTInductor compiles the graph into a
    shared library for x's device, packaged with the weights as model.pt2."""
    batch = torch.export.Dim("batch", min=1)
    exported = torch.export.export(model_new, (tracing_input(x),),
                                   dynamic_shapes={"x": {0: batch}})
    # Carried inside the package: C++ reads it from the archive's wrapper_metadata.json
    # (fusedops_app), Python with torch._inductor.aoti_load_package(path).get_metadata().
    expected = json.dumps(metadata, indent=2)

    def compile_package() -> dict | None:
        with aoti_noise_silenced():
            torch._inductor.aoti_compile_and_package(
                exported, package_path=str(path),
                inductor_configs={"aot_inductor.metadata": {EXTRA_FILE_NAME: expected}})
        return package_metadata(path)

    written = compile_package()
    if (written or {}).get(EXTRA_FILE_NAME) != expected:
        # AOTInductor (torch 2.11, codecache.py) writes the metadata file into its shared cache
        # folder with a plain open-and-write, under a name set by the graph: an export of the
        # same model compiling at the same moment (found under pytest -n 16) can truncate it
        # while this one packages it, leaving an empty entry that every loader refuses. Once
        # more in a private cache folder, which nothing else writes.
        from torch._inductor.utils import fresh_cache

        with fresh_cache():
            written = compile_package()
    if (written or {}).get(EXTRA_FILE_NAME) != expected:
        raise RuntimeError(
            f"AOTInductor packaged {path} without the model's metadata: its "
            f"wrapper_metadata.json holds {written!r}, expected a JSON object with "
            f"{EXTRA_FILE_NAME!r}; nothing was written")
    # Load it back (this dlopens the compiled library): a package that cannot load must fail
    # here, not in the C++ host.
    torch._inductor.aoti_load_package(str(path))


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
        # Built aside and swapped into place whole (scripted/model_folder.py).
        with ModelFolderWriter(repo, spec.folder_name(artifact_format)) as folder:
            model_dir = folder.path
            (model_dir / "1").mkdir()
            metadata = model_metadata(spec, reference_output, artifact_format)
            if artifact_format == "pt":
                save_torchscript(model_new, metadata, model_dir / "1" / "model.pt")
            else:
                save_aoti_package(model_new, x, metadata, model_dir / "1" / "model.pt2")

            # Each folder gets its own files: no hard link can make a write to one change the
            # other.
            for name, tensor in zip(SAMPLE_FILES,
                                    (x, reference_output, reference_output_float64)):
                save_tensor(tensor, model_dir / name)
            (model_dir / "config.pbtxt").write_text(
                triton_config(spec, config_output_shape, artifact_format))
            model_dir = folder.commit(
                ["config.pbtxt", f"1/model.{artifact_format}", *SAMPLE_FILES])
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
                                args.device, args.seed, args.mode,
                                args.numerics))
    return specs


def bounded_int(low: int, high: int):
    """An argparse type: an integer from low to high. Beyond them a value is a typo, and
    torch would not say so: torch.manual_seed(-1) seeds 2**64 - 1."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low} to {high}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer from {low} to {high}, "
                                             f"got {value}")
        return value
    return parse


def parse_device(text: str) -> torch.device:
    """cpu, cuda or cuda:N: the devices fusedops has kernels for (a meta or other device would
    export a model nothing can run)."""
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda") or (
            device.type == "cpu" and device.index not in (None, 0)):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return device


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and its message's first non-blank line."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0].strip() if lines else '(no message)'}"


PROG = "python -m scripted.export"
# fusedops.json's "seed" is an int64 (the app reads it so); torch seeds are 64-bit unsigned.
MAX_SEED = 2**63 - 1
# fusedops_app's --batch bound: a larger sample could not be run there either.
MAX_BATCH_SIZE = 1 << 24


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Export the fusedops drop-in models as TorchScript into a Triton model "
                    "repository, with a sample input and the reference output per model.")
    parser.add_argument("--output", "-o", type=Path, required=True,
                        help="model repository folder (created; models in it are replaced)")
    parser.add_argument("--models", type=parse_models, default=list(PROBLEMS),
                        help="comma list of problems (default: %(default)s)")
    parser.add_argument("--sizes", choices=("spec", "small"), default="spec",
                        help="spec: SPEC.md default sizes; small: CI sizes (default: spec)")
    parser.add_argument("--batch-size", type=bounded_int(1, MAX_BATCH_SIZE), default=None,
                        help="batch of the sample input and Triton's max_batch_size "
                             "(default: the size preset's)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
    parser.add_argument("--device", type=parse_device, default="cpu",
                        help="cpu, cuda or cuda:N (default: cpu)")
    parser.add_argument("--seed", type=bounded_int(0, MAX_SEED), default=0,
                        help=f"seed of the weights and the sample input, 0 to {MAX_SEED} "
                             "(default: 0)")
    parser.add_argument("--mode", choices=("eval", "train"), default="eval",
                        help="module mode of the export (default: eval, see module docstring)")
    parser.add_argument("--numerics", choices=("accurate", "eager"), default="accurate",
                        help="ModelNew's numerics: accurate (float32 intermediates) or eager "
                             "(intermediates rounded to the model's dtype as the reference "
                             "rounds them; float16/bfloat16 only differ) (default: accurate)")
    parser.add_argument("--formats", type=parse_formats, default=list(FORMATS),
                        help="comma list of artifacts: pt (TorchScript), pt2 (torch.export + "
                             "AOTInductor, compiles C++: tens of seconds per model) "
                             "(default: pt,pt2)")
    args = parser.parse_args(argv)
    if args.mode == "train" and "39" in args.models and (args.batch_size or 2) < 2:
        parser.error("--mode train needs --batch-size >= 2: BatchNorm cannot train on one sample")
    device = args.device
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {device}: no CUDA device is available")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        parser.error(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA "
                     f"device(s)")
    return args


def refuse_output_that_is_not_a_folder(output: Path) -> None:
    """--output names a repository folder, new or existing; mkdir's FileExistsError said only
    "File exists" for a file, a FIFO or /dev/null there."""
    try:
        mode = output.stat().st_mode
    except FileNotFoundError:
        if output.is_symlink():
            raise NotADirectoryError(f"expected a folder (new or existing) for the model "
                                     f"repository, got a symbolic link to nothing "
                                     f"({output.readlink()}); nothing was written") from None
        return
    if stat.S_ISDIR(mode):
        return
    kinds = {stat.S_ISREG: "a regular file", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR:
             "a character device", stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}
    kind = next((name for test, name in kinds.items() if test(mode)), f"mode {mode:o}")
    raise NotADirectoryError(f"expected a folder (new or existing) for the model repository, "
                             f"got {kind}; nothing was written")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"fusedops {torch.ops.fusedops.version()} ({fusedops.library_path}), "
          f"torch {torch.__version__}")
    doing = "checking AOTInductor's C++ compiler"
    # A failure is one line naming what failed and exit status 2, as for a bad argument; a
    # model folder being written when it happens stays as it was (scripted/model_folder.py).
    try:
        if "pt2" in args.formats:
            refuse_a_compiler_without_shared_libstdcxx()
        doing = f"--output {args.output}"
        refuse_output_that_is_not_a_folder(args.output)
        args.output.mkdir(parents=True, exist_ok=True)
        for spec in make_specs(args):
            doing = f"exporting {spec.model_name}"
            for model_dir, seconds in export_model(spec, args.output, args.formats):
                print(f"exported {model_dir.name}: input {list(spec.input_shape)} "
                      f"{dtype_name(spec.dtype)} on {spec.device}, {spec.mode} mode, "
                      f"{spec.numerics} numerics, "
                      f"{seconds:.1f} s -> {model_dir}")
    except Exception as error:  # noqa: BLE001  (every failure becomes the message)
        print(f"{PROG}: error: {doing}: {one_line(error)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

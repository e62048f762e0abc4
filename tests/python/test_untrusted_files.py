"""Issue 14: fusedops_app given damaged, hostile or hand-made files. Data never runs code, a
damaged model never crashes the app or computes silently, nothing the app reads is destroyed,
one bad model folder never stops `check`, and config.pbtxt is Triton's schema checked against
the model. Each test here failed on the app and export before that issue's fix.

Needs a build with the app: $FUSEDOPS_BUILD_DIR (scripts/test.sh sets it) or build/.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import stat
import struct
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest
import torch

import fusedops

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("FUSEDOPS_BUILD_DIR", REPO_ROOT / "build"))
APP = BUILD_DIR / "app" / "fusedops_app"
NAME_98 = "fusedops_98_matmul_avgpool_gelu_scale_max"
NAME_18 = "fusedops_18_matmul_sum_max_avgpool_logsumexp_logsumexp"
NAME_39 = "fusedops_39_gemm_scale_batchnorm"
MANIFEST = "fusedops_manifest.json"

pytestmark = pytest.mark.skipif(not APP.is_file(), reason=f"{APP} is not built")


def python_env() -> dict:
    env = dict(os.environ)
    env["FUSEDOPS_LIBRARY"] = fusedops.library_path
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT / "models"), str(REPO_ROOT)] +
        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def export(output: Path, *args: str) -> Path:
    subprocess.run([sys.executable, "-m", "scripted.export", "--sizes", "small", "--output",
                    str(output), *args], cwd=REPO_ROOT, env=python_env(), check=True,
                   capture_output=True, text=True)
    return output


def run_app(*args, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(APP), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def assert_refused(result: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit status 2 with the message, and no crash."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, f"exit {result.returncode}\n{output}"
    for needle in needles:
        assert needle in output, f"{needle!r} not in:\n{output}"
    for crash in ("terminate called", "Segmentation fault", "Exception raised from"):
        assert crash not in output, output


def resign_manifest(folder: Path) -> None:
    """Recompute the manifest after changing a file on purpose: the app then gets past the
    digest check to the defence under test (a hand-made or hostile file, not a damaged one)."""
    manifest = json.loads((folder / MANIFEST).read_text())
    for name, entry in manifest["files"].items():
        data = (folder / name).read_bytes()
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (folder / MANIFEST).write_text(json.dumps(manifest))


def rewrite_zip(source: Path, destination: Path, transform, extra=()) -> None:
    """A copy of a zip archive with each entry's bytes passed through transform(name, data)
    (None drops it), then the (ZipInfo, data) pairs of extra appended."""
    with zipfile.ZipFile(source) as old:
        entries = [(info, old.read(info)) for info in old.infolist()]
    temporary = destination.with_name(destination.name + ".new")
    with zipfile.ZipFile(temporary, "w") as new:
        for info, data in entries:
            data = transform(info.filename, data)
            if data is not None:
                new.writestr(info, data)
        for info, data in extra:
            new.writestr(info, data)
    temporary.replace(destination)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return export(tmp_path_factory.mktemp("repo"), "--models", "98,18", "--formats", "pt")


@pytest.fixture(scope="module")
def aoti_repo(tmp_path_factory) -> Path:
    """Model 98 in both formats (one AOTInductor compile)."""
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        pytest.skip(f"AOTInductor needs a C++ compiler; {compiler} is not on PATH")
    return export(tmp_path_factory.mktemp("aoti_repo"), "--models", "98", "--formats", "pt,pt2")


@pytest.fixture
def folder98(repo, tmp_path) -> Path:
    """A private copy of model 98's TorchScript folder, inside a repository of its own."""
    return Path(shutil.copytree(repo / NAME_98, tmp_path / "repo" / NAME_98))


@pytest.fixture
def aoti_folder(aoti_repo, tmp_path) -> Path:
    return Path(shutil.copytree(aoti_repo / (NAME_98 + "_aoti"),
                                tmp_path / "repo" / (NAME_98 + "_aoti")))


def package_of(folder: Path) -> Path:
    return folder / "1" / "model.pt2"


# --- 1. data is data --------------------------------------------------------------------------

PAYLOAD_SCRIPT = '''
import sys
from typing import Tuple

import torch


class Payload(torch.nn.Module):
    """Loading it runs __setstate__: it creates a file, and with "loop" never returns."""

    def __init__(self, marker: str, loop: bool):
        super().__init__()
        self.marker = marker
        self.loop = loop
        self.tensor = torch.zeros(32, 256)

    @torch.jit.export
    def __getstate__(self) -> Tuple[str, bool, torch.Tensor]:
        return (self.marker, self.loop, self.tensor)

    @torch.jit.export
    def __setstate__(self, state: Tuple[str, bool, torch.Tensor]) -> None:
        self.marker = state[0]
        self.loop = state[1]
        self.tensor = state[2]
        self.training = False
        written = torch.from_file(self.marker, shared=True, size=4)
        written.fill_(1.0)
        self.tensor[0, 0] = written[0]
        n = 1
        while self.loop and n > 0:
            n = n + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


torch.jit.save(torch.jit.script(Payload(sys.argv[2], sys.argv[3] == "loop")), sys.argv[1])
'''


@pytest.mark.parametrize("behaviour", ["writes_a_file", "loop"])
def test_sample_input_that_runs_code_is_refused_and_runs_nothing(folder98, tmp_path, behaviour):
    script = tmp_path / "make_payload.py"
    script.write_text(PAYLOAD_SCRIPT)
    marker = tmp_path / f"written_by_{behaviour}"
    sample = folder98 / "sample_input.pt"
    subprocess.run([sys.executable, str(script), str(sample), str(marker),
                    "loop" if behaviour == "loop" else "once"], check=True, capture_output=True)
    marker.unlink(missing_ok=True)  # scripting ran __setstate__ once in this process
    resign_manifest(folder98)  # a hostile file that the manifest vouches for
    for command in (["check", folder98], ["run", folder98 / "1" / "model.pt", "--input", sample]):
        try:
            result = run_app(*command, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"fusedops_app {command[0]} hung on a sample_input.pt that loops")
        assert result.returncode == 2, result.stdout + result.stderr
        assert "is a TorchScript archive (torch.jit.save), not a tensor" in (
            result.stdout + result.stderr)
        assert not marker.exists(), "loading the sample input ran its code"


def test_run_input_takes_a_torch_saved_tensor(folder98, tmp_path):
    x = tmp_path / "x.pt"
    torch.save(torch.rand(3, 256), x)
    result = run_app("run", folder98 / "1" / "model.pt", "--input", x)
    assert result.returncode == 0 and "output shape [3]" in result.stdout, result.stderr


# --- 3. tensor files shorter than their shape, and their size bound ---------------------------

def test_tensor_file_shorter_than_its_shape_is_refused(folder98, tmp_path):
    """The storage record cut to 16 bytes, the pickle still saying [4, 256]: libtorch's C++
    unpickler builds that tensor and the old app read past the buffer (valgrind) and exit 0."""
    full, short = tmp_path / "full.pt", tmp_path / "short.pt"
    torch.save(torch.rand(4, 256), full)
    rewrite_zip(full, short, lambda name, data: data[:16] if name.endswith("/data/0") else data)
    with pytest.raises(RuntimeError):  # Python's torch.load checks it too
        torch.load(short, weights_only=True)
    assert_refused(run_app("run", folder98 / "1" / "model.pt", "--input", short),
                   "needs 4096 bytes of storage, the file holds 16")


def test_tensor_file_claiming_a_huge_string_is_refused_before_allocating(folder98, tmp_path):
    """A 4-byte length field in the pickle says 4 GiB: libtorch's unpickler allocates (and
    zero-fills) that much before finding the file short (the fuzzer's finding: 4.5 GB for a
    1.6 KB file)."""
    full, bomb = tmp_path / "full.pt", tmp_path / "bomb.pt"
    torch.save(torch.rand(4, 256), full)
    rewrite_zip(full, bomb, lambda name, data: data.replace(
        b"X\x07\x00\x00\x00storage", b"X\x00\x00\xff\xffstorage")
        if name.endswith("data.pkl") else data)
    assert_refused(run_app("run", folder98 / "1" / "model.pt", "--input", bomb),
                   "holds a string of 4294901760 bytes (at most 4096 in a tensor's pickle)")


def deflated_copy(source: Path, destination: Path) -> None:
    with zipfile.ZipFile(source) as old, \
            zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info.filename, old.read(info))


def central_directory_entries(data: bytes, suffix: str) -> list[int]:
    """Offsets of the central directory entries whose name ends with suffix (the method is at
    +10, the unpacked size at +24, the name's length at +28, the name at +46)."""
    offsets, at = [], 0
    while (at := data.find(b"PK\x01\x02", at)) >= 0:
        length = struct.unpack_from("<H", data, at + 28)[0]
        if bytes(data[at + 46:at + 46 + length]).endswith(suffix.encode()):
            offsets.append(at)
        at += 4
    return offsets


def deflated_with_a_stated_size(source: Path, destination: Path, suffix: str, size: int) -> None:
    """source's records deflated, the one ending with suffix stating `size` unpacked bytes in
    its local header and in the central directory alike: a lie no consistency check sees."""
    deflated_copy(source, destination)
    with zipfile.ZipFile(destination) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    data = bytearray(destination.read_bytes())
    struct.pack_into("<I", data, info.header_offset + 22, size)
    (at,) = central_directory_entries(data, info.filename)
    struct.pack_into("<I", data, at + 24, size)
    destination.write_bytes(data)


def central_directory_states(source: Path, destination: Path, suffix: str, size: int) -> None:
    """source with the record ending with suffix said, in the central directory alone, to be
    deflated to `size` bytes (its local header still says stored): the fuzzer's input."""
    data = bytearray(source.read_bytes())
    (at,) = central_directory_entries(data, suffix)
    struct.pack_into("<H", data, at + 10, zipfile.ZIP_DEFLATED)
    struct.pack_into("<I", data, at + 24, size)
    destination.write_bytes(data)


# Runs the app and prints its peak resident memory (KiB) as the last line of stderr. A small
# process between pytest and the app: a child's ru_maxrss starts at its parent's high-water
# mark (Linux keeps it across exec, and subprocess forks with vfork), and pytest's own peak
# was 2.3 GB in CI, which wait4 on the app reported as the app's.
MEASURE_PEAK = ("import resource, subprocess, sys\n"
                "code = subprocess.run(sys.argv[1:]).returncode\n"
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
                "sys.exit(code if code >= 0 else 128 - code)\n")


def run_app_measured(*args) -> tuple[subprocess.CompletedProcess, int]:
    """run_app, with the app's peak resident memory in bytes."""
    result = subprocess.run([sys.executable, "-c", MEASURE_PEAK, str(APP), *map(str, args)],
                            capture_output=True, text=True, timeout=120)
    *lines, peak_kib = result.stderr.rstrip("\n").split("\n")
    result.stderr = "\n".join(lines)
    return result, int(peak_kib) * 1024


@pytest.mark.parametrize("record", ["/version", "/.data/serialization_id", "/data/0",
                                    "/data.pkl"])
def test_tensor_file_stating_a_huge_record_is_refused_before_allocating(folder98, tmp_path,
                                                                        record):
    """A 1.6 KB file whose central directory says its `version` record is deflated to 2 GiB:
    libtorch's archive reader allocates what a record states before reading it, and the old
    app took 2.5 GB of memory (6.8 GB through the serialization id) to refuse the file (the
    fuzzer's finding, CI on ffab145). Now tensor files are read with libzip: the directory must
    agree with the local headers, a stated size must be one the record's bytes can unpack to,
    and a record must hold what it states, counted before memory of that size is taken."""
    full, lying = tmp_path / "full.pt", tmp_path / "lying.pt"
    torch.save(torch.rand(1, 256), full)
    model = folder98 / "1" / "model.pt"

    central_directory_states(full, lying, record, (1 << 31) + 41)
    result, peak = run_app_measured("run", model, "--input", lying)
    assert_refused(result, f"cannot read a tensor from {lying}: not a readable zip archive")
    assert peak < 1 << 30, f"the app peaked at {peak / 2**20:.0f} MiB to refuse a 2 KB file"

    # The same claim in both headers: consistent, but more than deflate can unpack to.
    deflated_with_a_stated_size(full, lying, record, (1 << 31) + 41)
    assert lying.stat().st_size < 4096
    result, peak = run_app_measured("run", model, "--input", lying)
    assert_refused(result, f"entry full{record} says it unpacks to 2147483689 bytes from",
                   "deflated: the archive is damaged")
    assert peak < 1 << 30, f"the app peaked at {peak / 2**20:.0f} MiB to refuse a 2 KB file"

    if record != "/.data/serialization_id":  # a record the app reads: a claim deflate allows
        deflated_copy(full, lying)
        with zipfile.ZipFile(lying) as zf:
            info = zf.getinfo("full" + record)
        claim = info.file_size + 1  # one byte more than it holds
        deflated_with_a_stated_size(full, lying, record, claim)
        assert_refused(run_app("run", model, "--input", lying),
                       f"cannot read a tensor from {lying}: entry full{record} holds "
                       f"{info.file_size} bytes, its directory says {claim}")

    deflated = tmp_path / "deflated.pt"  # an honest deflated file is read
    deflated_copy(full, deflated)
    assert run_app("run", model, "--input", deflated).returncode == 0


def test_tensor_file_unpacking_past_the_limit_is_refused_before_reading(folder98, tmp_path):
    """4 MiB of zeros deflate to a few KB: the file is under a 1 MiB limit, its records are
    not, and the stated sizes are compared with the limit before any record is read."""
    zeros, deflated = tmp_path / "zeros.pt", tmp_path / "deflated.pt"
    torch.save(torch.zeros(4096, 256), zeros)
    deflated_copy(zeros, deflated)
    assert deflated.stat().st_size < 1 << 20
    assert_refused(run_app("--max-tensor-file-mib", 1, "run", folder98 / "1" / "model.pt",
                           "--input", deflated),
                   "its records unpack to more than the 1048576-byte limit for a tensor file "
                   "(entry 'zeros/data/0' alone says 4194304 bytes)")


def test_model_file_with_a_damaged_size_field_is_refused(folder98):
    """libtorch's reader, which loads TorchScript models, allocates each record's stated size:
    a model.pt whose directory said its `version` record was deflated to 2 GiB, loaded
    --allow-unverified (no manifest to catch the damage), took 2.5 GB and then ran, exit 0."""
    (folder98 / MANIFEST).unlink()
    model = folder98 / "1" / "model.pt"
    central_directory_states(model, model, "/version", (1 << 31) + 41)
    result, peak = run_app_measured("--allow-unverified", "run", model)
    assert_refused(result, f"cannot load {model} as a TorchScript model: not a readable zip "
                           "archive")
    assert peak < 1 << 30, f"the app peaked at {peak / 2**20:.0f} MiB"


def test_tensor_file_in_big_endian_byte_order_is_refused(folder98, tmp_path):
    """torch.save records the byte order its values are in; the old app read a file marked
    'big' as little-endian and ran the model on the swapped values (exit status 0)."""
    full, big = tmp_path / "full.pt", tmp_path / "big.pt"
    torch.save(torch.rand(1, 256), full)
    rewrite_zip(full, big, lambda name, data: b"big" if name.endswith("/byteorder") else data)
    assert_refused(run_app("run", folder98 / "1" / "model.pt", "--input", big),
                   "its values are stored in byte order 'big'")


def test_tensor_file_size_is_bounded(folder98, tmp_path):
    huge = tmp_path / "huge.pt"
    with open(huge, "wb") as file:  # sparse: 1.5 GiB on paper, nothing on disk
        file.truncate(3 << 29)
    start = time.monotonic()
    assert_refused(run_app("run", folder98 / "1" / "model.pt", "--input", huge),
                   f"{huge} is 1610612736 bytes, more than the 1073741824-byte limit for a "
                   "tensor file (raise it with --max-tensor-file-mib)")
    assert time.monotonic() - start < 30  # refused before reading
    two_mib = tmp_path / "two_mib.pt"
    torch.save(torch.rand(2048, 256), two_mib)
    model = folder98 / "1" / "model.pt"
    assert_refused(run_app("--max-tensor-file-mib", 1, "run", model, "--input", two_mib),
                   "more than the 1048576-byte limit")
    assert run_app("--max-tensor-file-mib", 3, "run", model, "--input", two_mib).returncode == 0


# --- 2. digests, .pt2 archives, temporary folders, the CPU's instructions ---------------------

def flip_byte_in_entry(archive: Path, suffix: str, offset: int) -> None:
    """Flips one byte inside the stored bytes of the entry ending with suffix (a weight)."""
    with zipfile.ZipFile(archive) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    with open(archive, "r+b") as file:
        file.seek(info.header_offset + 26)
        name_length, extra_length = (int.from_bytes(file.read(2), "little") for _ in range(2))
        at = info.header_offset + 30 + name_length + extra_length + offset
        file.seek(at)
        byte = file.read(1)[0]
        file.seek(at)
        file.write(bytes([byte ^ 0x40]))


@pytest.mark.parametrize("command", ["info", "run", "check", "bench"])
def test_model_with_a_flipped_weight_byte_is_refused(folder98, command):
    model = folder98 / "1" / "model.pt"
    flip_byte_in_entry(model, "/data/0", 100)  # the first weight tensor's storage
    target = folder98 if command == "check" else model
    extra = ["--iters", 1, "--batch", 1] if command == "bench" else []
    assert_refused(run_app(command, target, *extra),
                   "has SHA-256", "the file is damaged or was changed after export")


def test_model_without_a_manifest_needs_allow_unverified(folder98):
    (folder98 / MANIFEST).unlink()
    model = folder98 / "1" / "model.pt"
    assert_refused(run_app("info", model), f"has no {MANIFEST}", "--allow-unverified")
    assert_refused(run_app("check", folder98), f"has no {MANIFEST}")
    result = run_app("--allow-unverified", "info", model)
    assert result.returncode == 0 and "loading it unverified" in result.stderr


@pytest.mark.parametrize("manifest", [
    "{not json", '{"format": 1, "algorithm": "md5", "files": {}}',
    '{"format": 1, "algorithm": "sha256", "files": {"../../etc/passwd": '
    '{"sha256": "' + "0" * 64 + '", "bytes": 1}}}'])
def test_garbled_manifest_is_refused(folder98, manifest):
    (folder98 / MANIFEST).write_text(manifest)
    assert_refused(run_app("info", folder98 / "1" / "model.pt"), MANIFEST)


def test_pt2_entry_escaping_the_folder_is_refused_before_anything_is_unpacked(aoti_folder):
    """An entry named model/data/aotinductor/model/../../../../../<name> lands in /tmp when
    unpacked under /tmp/XXXXXX, as AOTInductor's own loader does."""
    escaped = Path("/tmp") / f"fusedops_escape_{uuid.uuid4().hex}"
    entry = zipfile.ZipInfo("model/data/aotinductor/model/../../../../../" + escaped.name)
    package = package_of(aoti_folder)
    rewrite_zip(package, package, lambda name, data: data, extra=[(entry, b"escaped")])
    resign_manifest(aoti_folder)
    try:
        assert_refused(run_app("info", package), "is not a relative path inside the archive")
        assert not escaped.exists()
    finally:
        escaped.unlink(missing_ok=True)


def test_pt2_symlink_entry_is_refused(aoti_folder):
    link = zipfile.ZipInfo("model/data/aotinductor/model/link")
    link.create_system = 3  # Unix
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    package = package_of(aoti_folder)
    rewrite_zip(package, package, lambda name, data: data, extra=[(link, b"/etc/passwd")])
    resign_manifest(aoti_folder)
    assert_refused(run_app("info", package), "is a symbolic link; nothing was unpacked")


def with_package_metadata(folder: Path, **changes: str) -> None:
    def transform(name: str, data: bytes) -> bytes:
        if name.endswith("_metadata.json"):
            metadata = json.loads(data)
            metadata.update(changes)
            return json.dumps(metadata).encode()
        return data
    rewrite_zip(package_of(folder), package_of(folder), transform)
    resign_manifest(folder)


# The extensions each AOTI_CPU_ISA word compiles with (torch/_inductor/cpu_vec_isa.py: VecAVX512
# "-mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma", VecAVX512VNNI adds -mavx512vnni, VecAMX
# -mamx-tile -mamx-bf16 -mamx-int8), in cpuinfo's names, in that order.
ISA_FEATURES = {"AVX512": ["avx512_f", "avx512_dq", "avx512_vl", "avx512_bw", "fma3"],
                "AVX512_VNNI": ["avx512_vnni", "avx512_vl"],
                "AMX_TILE": ["amx_tile", "amx_bf16", "amx_int8"]}


def test_pt2_for_instructions_this_cpu_lacks_is_refused(aoti_folder):
    """The refusal names exactly what this CPU lacks of what the package claims: AMX alone on an
    AVX-512 machine, AVX-512 too on one without it (an AMD EPYC without AVX-512 got the longer
    list, which this test once hard-coded as the shorter one)."""
    capabilities = torch.cpu.get_capabilities()
    if capabilities.get("amx_tile"):
        pytest.skip("this CPU has AMX")
    claimed = "AVX512 AVX512_VNNI AMX_TILE"
    lacking = []
    for word in claimed.split():
        lacking += [f for f in ISA_FEATURES[word] if not capabilities.get(f) and f not in lacking]
    with_package_metadata(aoti_folder, AOTI_CPU_ISA=claimed)
    assert_refused(run_app("run", package_of(aoti_folder)),
                   f"this CPU lacks [{', '.join(lacking)}]", "(SIGILL)")


def leftover_folders(since: float, marker: str) -> list[Path]:
    """Folders under /tmp made since `since` that hold a file named marker: what a loader
    unpacking there left behind. Inductor's own cache (/tmp/torchinductor_<user>) is not one:
    a test exporting the same model on another pytest-xdist worker compiles a library of the
    same hashed name into it."""
    found = []
    for entry in Path("/tmp").iterdir():
        if entry.name.startswith("torchinductor_"):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink() and entry.stat().st_mtime >= since:
                if any(p.name == marker for p in entry.rglob("*")):
                    found.append(entry)
        except OSError:
            pass
    return found


def test_pt2_leaves_no_temporary_folder(aoti_folder, tmp_path):
    """A package whose library does not load (its .so replaced by garbage): the old app left
    the unpacked package in /tmp/XXXXXX; so does a failing AOTIModelPackageLoader."""
    with zipfile.ZipFile(package_of(aoti_folder)) as zf:
        library = next(n for n in zf.namelist() if n.endswith(".so"))
    rewrite_zip(package_of(aoti_folder), package_of(aoti_folder),
                lambda name, data: b"\x7fELF not a library" if name == library else data)
    resign_manifest(aoti_folder)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(private_tmp))
    since = time.time() - 1
    result = run_app("info", package_of(aoti_folder), env=env)
    assert result.returncode == 2, result.stderr
    assert "cannot load" in result.stderr
    assert list(private_tmp.iterdir()) == []
    assert leftover_folders(since, Path(library).name) == []


def test_pt2_loaded_and_run_leaves_no_temporary_folder(aoti_repo, tmp_path):
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(private_tmp))
    result = run_app("check", aoti_repo / (NAME_98 + "_aoti"), env=env)
    assert result.returncode == 0 and result.stdout.startswith("PASS"), result.stderr
    assert list(private_tmp.iterdir()) == []


# --- 4. data loss -----------------------------------------------------------------------------

def test_run_output_never_overwrites_the_model_or_the_input(folder98, tmp_path):
    model = folder98 / "1" / "model.pt"
    sample = folder98 / "sample_input.pt"
    before = {p: p.read_bytes() for p in (model, sample)}
    hard_link = tmp_path / "another_name.pt"
    os.link(model, hard_link)
    for output in (model, sample, hard_link, folder98 / "1" / ".." / "sample_input.pt"):
        assert_refused(run_app("run", model, "--input", sample, "--output", output, "--force"),
                       "refusing to overwrite it, even with --force")
    assert {p: p.read_bytes() for p in (model, sample)} == before


def test_run_output_replaces_an_existing_file_only_with_force(folder98, tmp_path):
    model = folder98 / "1" / "model.pt"
    output = tmp_path / "out.pt"
    output.write_bytes(b"precious")
    assert_refused(run_app("run", model, "--output", output), "exists; pass --force")
    assert output.read_bytes() == b"precious"
    result = run_app("run", model, "--output", output, "--force")
    assert result.returncode == 0, result.stderr
    assert torch.load(output, weights_only=True).shape == (32,)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_export_folders_own_their_files_and_reexport_leaves_the_other_alone(aoti_repo, tmp_path):
    pt_folder, pt2_folder = aoti_repo / NAME_98, aoti_repo / (NAME_98 + "_aoti")
    for name in ("sample_input.pt", "reference_output.pt", "reference_output_float64.pt"):
        assert not (pt_folder / name).samefile(pt2_folder / name), name
        assert os.stat(pt_folder / name).st_nlink == 1
    repo = Path(shutil.copytree(aoti_repo, tmp_path / "repo"))
    before = {p: p.read_bytes() for p in (repo / (NAME_98 + "_aoti")).rglob("*") if p.is_file()}
    export(repo, "--models", "98", "--formats", "pt", "--seed", "7")
    after = {p: p.read_bytes() for p in (repo / (NAME_98 + "_aoti")).rglob("*") if p.is_file()}
    assert after == before
    result = run_app("check", repo)
    assert result.returncode == 0 and result.stdout.count("PASS") == 2, result.stdout


# --- 6. check robustness -----------------------------------------------------------------------

def test_check_goes_on_past_a_link_loop_and_a_version_above_int64(repo, tmp_path):
    copy = Path(shutil.copytree(repo, tmp_path / "repo"))
    (copy / "looping").symlink_to(copy / "looping")
    huge = Path(shutil.copytree(copy / NAME_18, copy / "fusedops_huge_version"))
    (huge / "1").rename(huge / "99999999999999999999999")
    result = run_app("check", copy)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(l.startswith("ERROR looping: cannot read") and "symbolic links" in l
               for l in lines), lines
    assert any(l.startswith("ERROR fusedops_huge_version: version folder") and
               "above 9223372036854775807" in l for l in lines), lines
    assert sum(l.startswith("PASS") for l in lines) == 2


def test_check_of_missing_or_corrupt_files_exits_2(folder98):
    (folder98 / "sample_input.pt").unlink()
    assert_refused(run_app("check", folder98), "sample_input.pt")


def test_check_refuses_links_out_of_the_repository(repo, tmp_path):
    outside = Path(shutil.copytree(repo / NAME_98, tmp_path / "elsewhere" / NAME_98))
    inside = tmp_path / "repo"
    inside.mkdir()
    (inside / NAME_98).symlink_to(outside)
    assert_refused(run_app("check", inside), "outside", "--allow-external-symlinks")
    result = run_app("check", inside, "--allow-external-symlinks")
    assert result.returncode == 0 and result.stdout.startswith("PASS"), result.stdout


@pytest.mark.parametrize("args, needle", [
    (["--threads", 100000, "info"], "--threads"),
    (["run", "--batch", 1 << 40], "--batch"),
    (["bench", "--iters", 10**12], "--iters"),
    (["bench", "--batch", "1,99999999999999999999"], "--batch"),
    (["--max-tensor-file-mib", 0, "info"], "--max-tensor-file-mib"),
])
def test_numeric_options_are_bounded(folder98, args, needle):
    command = [a for a in args] + [folder98 / "1" / "model.pt"]
    try:
        result = run_app(*command, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fusedops_app {' '.join(map(str, args))} hung")
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr, result.stderr
    assert "not in range" in result.stderr or "Could not convert" in result.stderr or (
        "failed" in result.stderr) or (
        "expected batch sizes from 1 to 16777216" in result.stderr), result.stderr


def test_tampered_metadata_dtype_is_refused(folder98):
    model = folder98 / "1" / "model.pt"

    def transform(name: str, data: bytes) -> bytes:
        if name.endswith("extra/fusedops.json"):
            metadata = json.loads(data)
            metadata["input"]["dtype"] = "int64"
            return json.dumps(metadata).encode()
        return data
    rewrite_zip(model, model, transform)
    resign_manifest(folder98)
    assert_refused(run_app("run", model),
                   "input dtype int64; scripted/export.py writes float32, float16 or bfloat16")


def test_folder_name_with_a_newline_cannot_print_a_pass_line(repo, tmp_path):
    copy = Path(shutil.copytree(repo, tmp_path / "repo"))
    (copy / NAME_18).rename(copy / f"{NAME_18}\nPASS fusedops_fake on cpu")
    result = run_app("check", copy)
    lines = result.stdout.splitlines()
    assert not any(l.startswith("PASS fusedops_fake") for l in lines), lines
    assert any("\\nPASS fusedops_fake" in l for l in lines), lines


def test_random_config_pbtxt_does_not_pass(folder98):
    (folder98 / "config.pbtxt").write_bytes(random.Random(14).randbytes(3000))
    resign_manifest(folder98)
    result = run_app("check", folder98)
    assert result.returncode == 2, result.stdout
    assert result.stdout.startswith(f"ERROR {NAME_98}:") and "config.pbtxt:" in result.stdout


@pytest.mark.parametrize("edit, needle", [
    (("dims: [ 256 ]", "dims: [ 128 ]"), "input[0].dims must be [256]"),
    (("TYPE_FP32", "TYPE_FP16"), "input[0].data_type must be TYPE_FP32, got TYPE_FP16"),
    (('platform: "pytorch_libtorch"', 'platform: "torch_aoti"'), "platform must be"),
    (("max_batch_size: 32", "max_batch_size: 0"), "max_batch_size must be >= 1"),
    (("max_batch_size: 32", "max_batch_size: 32\nnot_a_field: 1"), "config.pbtxt:4:"),
])
def test_config_pbtxt_is_checked_against_the_model(folder98, edit, needle):
    config = folder98 / "config.pbtxt"
    text = config.read_text()
    assert edit[0] in text
    config.write_text(text.replace(edit[0], edit[1], 1))
    resign_manifest(folder98)
    result = run_app("check", folder98)
    assert result.returncode == 2 and needle in result.stdout, result.stdout


# --- Triton configuration (issue 10) -----------------------------------------------------------

def test_exported_config_is_what_triton_serves(repo, aoti_repo):
    config = (repo / NAME_98 / "config.pbtxt").read_text()
    assert "instance_group [ { count: 1, kind: KIND_AUTO } ]" in config
    assert "dynamic_batching { }" in config
    assert 'parameters: { key: "INFERENCE_MODE" value: { string_value: "true" } }' in config
    pt2_config = (aoti_repo / (NAME_98 + "_aoti") / "config.pbtxt").read_text()
    assert "instance_group [ { count: 1, kind: KIND_CPU } ]" in pt2_config
    assert "export it with --device cuda" in pt2_config
    # Triton's PyTorch backend answers a batched .pt2 run wrongly (docs/TRITON_PT2_BATCHING.md).
    assert "dynamic_batching" not in pt2_config.replace("# No dynamic_batching", "")
    assert "TRITON_PT2_BATCHING.md" in pt2_config


def test_batched_pt2_config_is_refused(aoti_folder):
    result = run_app("check", aoti_folder)
    assert result.returncode == 0 and result.stdout.startswith("PASS"), result.stdout
    config = aoti_folder / "config.pbtxt"
    config.write_text(config.read_text() + "dynamic_batching { }\n")
    resign_manifest(aoti_folder)
    result = run_app("check", aoti_folder)
    assert result.returncode == 2 and "dynamic_batching must be absent for a .pt2" in result.stdout


def test_train_mode_39_is_not_batched_by_triton(tmp_path):
    repo = export(tmp_path / "train", "--models", "39", "--mode", "train", "--formats", "pt")
    folder = repo / NAME_39
    config = (folder / "config.pbtxt").read_text()
    assert "dynamic_batching" not in config.replace("# No dynamic_batching", "")
    assert "statistics" in config
    assert json.loads(zipfile.ZipFile(folder / "1" / "model.pt").read(
        next(n for n in zipfile.ZipFile(folder / "1" / "model.pt").namelist()
             if n.endswith("extra/fusedops.json"))))["rows_independent"] is False
    result = run_app("check", folder)
    assert result.returncode == 0 and result.stdout.startswith("PASS"), result.stdout
    (folder / "config.pbtxt").write_text(config + "dynamic_batching { }\n")
    resign_manifest(folder)
    result = run_app("check", folder)
    assert result.returncode == 2 and "dynamic_batching must be absent" in result.stdout


# --- issue 21: hostile users ---------------------------------------------------------------------
# Each test failed on the app and export before issue 21's fix.


def make_special_file(kind: str, path: Path, tmp_path: Path) -> Path | None:
    """Makes a non-regular file at path; returns the file a symbolic link points to."""
    if kind == "FIFO (named pipe)":
        os.mkfifo(path)
    elif kind == "symbolic link":
        target = tmp_path / "link_target.pt"
        target.write_bytes(b"precious")
        path.symlink_to(target)
        return target
    elif kind == "character device":
        # As root the old app replaced the system's /dev/null: a device of our own instead.
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return None


@pytest.mark.parametrize("kind", ["FIFO (named pipe)", "symbolic link", "character device"])
def test_run_output_force_replaces_nothing_but_a_regular_file(folder98, tmp_path, kind):
    if kind == "character device" and os.geteuid() != 0:
        output = Path("/dev/null")  # not ours to replace, nor, without root, the app's
    else:
        output = tmp_path / "output"
        target = make_special_file(kind, output, tmp_path)
    before = os.lstat(output)
    for force in (["--force"], []):  # --force first: the case that destroyed files
        result = run_app("run", folder98 / "1" / "model.pt", "--output", output, *force,
                         timeout=60)
        assert_refused(result, f"--output {output} is a {kind}",
                       "only a regular file is ever replaced")
    after = os.lstat(output)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (
        before.st_mode, before.st_ino, before.st_rdev)
    if kind == "symbolic link":
        assert target.read_bytes() == b"precious"


@pytest.mark.parametrize("which", ["config.pbtxt", MANIFEST, "--input"])
def test_fifo_where_a_file_is_expected_is_refused_at_once(folder98, tmp_path, which):
    """A file is opened without blocking and its type checked before reading: a FIFO used to
    hang check and run until killed."""
    model = folder98 / "1" / "model.pt"
    fifo = tmp_path / "input.pt" if which == "--input" else folder98 / which
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    commands = {"config.pbtxt": [["check", folder98]],
                MANIFEST: [["check", folder98], ["run", model]],
                "--input": [["run", model, "--input", fifo]]}[which]
    for command in commands:
        try:
            result = run_app(*command, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"fusedops_app {command[0]} hung on a FIFO as {which}")
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"{fifo} is a FIFO (named pipe)" in result.stdout + result.stderr


MEASURE_CHILD = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
                 "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def test_model_file_of_the_wrong_size_is_refused_before_it_is_read(folder98):
    """A 1.5 GiB sparse model.pt: read whole (1.9 GB of memory, 5 s; a 4 GiB one under a
    memory limit ended in std::bad_alloc, exit status 1) before its size was compared with
    the manifest's."""
    model = folder98 / "1" / "model.pt"
    listed = model.stat().st_size
    with open(model, "r+b") as file:
        file.truncate(3 << 29)
    result = subprocess.run([sys.executable, "-c", MEASURE_CHILD, str(APP), "info", str(model)],
                            capture_output=True, text=True, timeout=120)
    status, max_rss_kib = map(int, result.stdout.splitlines()[-1].split())
    assert status == 2, result.stdout + result.stderr
    assert f"{model} is 1610612736 bytes, {MANIFEST} says {listed}" in result.stderr
    assert max_rss_kib < 1 << 20, f"the app held {max_rss_kib} KiB: it read the file"


@pytest.mark.parametrize("pair", [("98", "18"), ("18", "98")], ids=["98-in-18", "18-in-98"])
@pytest.mark.parametrize("command", ["check", "run", "info", "bench", "stress"])
def test_model_of_another_folder_is_refused_before_running(repo, tmp_path, pair, command):
    """Another model's model.pt in a folder (the manifest re-signed over it): check said FAIL
    (a kernel bug, it read) or a config error, run, bench and stress ran it, info named the
    other operator."""
    names = {"98": NAME_98, "18": NAME_18}
    copy = Path(shutil.copytree(repo, tmp_path / "repo"))
    foreign, folder = copy / names[pair[0]], copy / names[pair[1]]
    shutil.copyfile(foreign / "1" / "model.pt", folder / "1" / "model.pt")
    resign_manifest(folder)
    target = folder if command == "check" else folder / "1" / "model.pt"
    extra = {"bench": ["--iters", 1, "--batch", 2],
             "stress": ["--calls", 4, "--instances", 2, "--unload-cycles", 0]}.get(command, [])
    result = run_app(command, target, *extra)
    op = {"98": "matmul_avgpool_gelu_scale_max",
          "18": "matmul_sum_max_avgpool_logsumexp_logsumexp"}[pair[0]]
    assert_refused(result, f"holds model {names[pair[0]]} (operator fusedops::{op}), but its "
                           f"model folder is {names[pair[1]]}")
    if command == "check":
        assert result.stdout.startswith(f"ERROR {names[pair[1]]}:"), result.stdout


@pytest.mark.parametrize("command", ["run", "info", "bench", "stress"])
def test_symlink_out_of_the_model_folder_is_refused_by_every_command(folder98, tmp_path,
                                                                     command):
    """check refused a model file that is a link out of its folder; the other commands
    followed it."""
    model = folder98 / "1" / "model.pt"
    outside = tmp_path / "elsewhere.pt"
    shutil.move(model, outside)
    model.symlink_to(outside)
    extra = {"bench": ["--iters", 1, "--batch", 2],
             "stress": ["--calls", 4, "--instances", 2, "--unload-cycles", 0]}.get(command, [])
    assert_refused(run_app(command, model, *extra), f"leads to {outside}, outside",
                   "--allow-external-symlinks")
    result = run_app(command, model, *extra, "--allow-external-symlinks")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("batches", ["1,,2", "1,2,", ",1"])
def test_bench_batch_list_with_an_empty_entry_is_refused(folder98, batches):
    result = run_app("bench", folder98 / "1" / "model.pt", "--batch", batches, "--iters", 1)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "expected batch sizes from 1 to 16777216 separated by commas" in result.stderr


@pytest.mark.parametrize("command", ["run", "bench", "stress"])
def test_app_seed_is_bounded(folder98, command):
    """--seed -1 was taken as 2^64 - 1."""
    result = run_app(command, folder98 / "1" / "model.pt", "--seed", -1)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--seed" in result.stderr and "not in range" in result.stderr


def test_output_that_contradicts_fusedops_json_fails(folder98):
    """run, bench and stress did not compare the output with fusedops.json's."""
    model = folder98 / "1" / "model.pt"

    def transform(name: str, data: bytes) -> bytes:
        if name.endswith("extra/fusedops.json"):
            metadata = json.loads(data)
            metadata["output"]["shape"] = [32, 2]
            return json.dumps(metadata).encode()
        return data
    rewrite_zip(model, model, transform)
    resign_manifest(folder98)
    for command, extra in (("run", ["--batch", 3]), ("bench", ["--batch", 3, "--iters", 1]),
                           ("stress", ["--batch", 3, "--calls", 4, "--instances", 2,
                                       "--unload-cycles", 0])):
        result = run_app(command, model, *extra)
        assert result.returncode == 1, result.stdout + result.stderr
        assert (f"{NAME_98} returned [3] float32 for an input of batch 3; its fusedops.json "
                "says [3, 2] float32") in result.stderr


def test_manifest_with_a_repeated_key_is_refused(folder98):
    """nlohmann keeps the last of two equal keys: a wrong digest followed by the right one was
    accepted."""
    manifest = json.loads((folder98 / MANIFEST).read_text())
    entry = manifest["files"]["1/model.pt"]
    wrong = json.dumps({"sha256": "0" * 64, "bytes": entry["bytes"]})
    text = json.dumps(manifest).replace('"1/model.pt": ', f'"1/model.pt": {wrong}, '
                                        '"1/model.pt": ', 1)
    (folder98 / MANIFEST).write_text(text)
    assert_refused(run_app("info", folder98 / "1" / "model.pt"),
                   'the key "1/model.pt" appears twice in one object')


def test_empty_tmpdir_means_the_default(aoti_repo):
    """TMPDIR="" is no TMPDIR (POSIX), so /tmp; the app said there was no temporary folder."""
    env = dict(os.environ, TMPDIR="")
    result = run_app("run", aoti_repo / (NAME_98 + "_aoti") / "1" / "model.pt2", env=env)
    assert result.returncode == 0, result.stderr


EXPORT_DRIVER = '''
import json, os, runpy, sys, time

import torch

mode, marker = sys.argv[1], sys.argv[2]
if mode == "pause-before-manifest":
    # Stops this run after it has hashed its files, until marker exists.
    real_dumps = json.dumps

    def dumps(obj, *args, **kwargs):
        if isinstance(obj, dict) and "algorithm" in obj:  # the manifest
            open(marker + ".paused", "w").close()
            while not os.path.exists(marker):
                time.sleep(0.05)
        return real_dumps(obj, *args, **kwargs)
    json.dumps = dumps
elif mode == "die-after-the-model-file":
    # As if killed after the model file, before the sample tensors and the manifest.
    torch.save = lambda *args, **kwargs: os._exit(9)
sys.argv = ["scripted.export", *sys.argv[3:]]
runpy.run_module("scripted.export", run_name="__main__", alter_sys=True)
'''


def export_driver(tmp_path: Path, mode: str, marker: Path, *args: str) -> subprocess.Popen:
    script = tmp_path / "export_driver.py"
    script.write_text(EXPORT_DRIVER)
    return subprocess.Popen([sys.executable, str(script), mode, str(marker), "--sizes", "small",
                             *args], cwd=REPO_ROOT, env=python_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_concurrent_exports_of_one_folder_leave_a_folder_the_app_accepts(tmp_path):
    """Two exports of model 98 at once (other seeds, so other bytes): the first is held after
    hashing its files while the second writes the folder; both exit 0, and the manifest each
    wrote must describe the folder that is left."""
    repo = tmp_path / "repo"
    marker = tmp_path / "resume"
    args = ["--models", "98", "--formats", "pt", "--output", str(repo)]
    first = export_driver(tmp_path, "pause-before-manifest", marker, *args, "--seed", "1")
    deadline = time.monotonic() + 300
    while not Path(str(marker) + ".paused").exists():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first export never reached its manifest"
        time.sleep(0.1)
    export(repo, "--models", "98", "--formats", "pt", "--seed", "2")
    marker.touch()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    result = run_app("check", repo)
    assert result.returncode == 0 and result.stdout.startswith(f"PASS {NAME_98}"), (
        result.stdout + result.stderr)


def test_killed_reexport_leaves_the_previous_folder_and_its_leftovers_go(tmp_path):
    repo = export(tmp_path / "repo", "--models", "98", "--formats", "pt")
    folder = repo / NAME_98
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    dying = export_driver(tmp_path, "die-after-the-model-file", tmp_path / "unused",
                          "--models", "98", "--formats", "pt", "--seed", "7",
                          "--output", str(repo))
    out, err = dying.communicate(timeout=300)
    assert dying.returncode == 9, out + err
    result = run_app("check", repo)
    assert result.returncode == 0 and result.stdout.count("PASS") == 1, (
        result.stdout + result.stderr)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    export(repo, "--models", "98", "--formats", "pt", "--seed", "7")
    assert [p for p in repo.rglob("*") if p.name.startswith(".tmp")] == []
    assert run_app("check", repo).returncode == 0


@pytest.mark.parametrize("args, needle", [
    (["--device", "meta"], "argument --device: expected cpu, cuda or cuda:N, got 'meta'"),
    (["--seed", "-1"], "argument --seed: expected an integer from 0 to 9223372036854775807, "
                       "got -1"),
    (["--output-is-a-file"], "expected a folder (new or existing) for the model repository, "
                             "got a regular file; nothing was written"),
    (["--output-is-a-fifo"], "got a FIFO; nothing was written"),
    (["--output-is-a-dangling-link"], "got a symbolic link to nothing (missing)"),
])
def test_export_errors_are_one_line_and_exit_2(tmp_path, args, needle):
    """mkdir's "FileExistsError: File exists" was all a file, a FIFO or a dangling link as
    --output got."""
    output = tmp_path / "out"
    if args == ["--output-is-a-file"]:
        output.write_text("a file")
    elif args == ["--output-is-a-fifo"]:
        os.mkfifo(output)
    elif args == ["--output-is-a-dangling-link"]:
        output.symlink_to("missing")
    if args[0].startswith("--output-is-"):
        args = []
    result = subprocess.run([sys.executable, "-m", "scripted.export", "--sizes", "small",
                             "--models", "98", "--formats", "pt", "--output", str(output),
                             *args], cwd=REPO_ROOT, env=python_env(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert needle in result.stderr.strip().splitlines()[-1], result.stderr
    assert not output.is_dir(), "a refused export left a folder"
    if output.is_file():
        assert output.read_text() == "a file"

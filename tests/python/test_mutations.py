"""Random byte damage to an exported model.pt and model.pt2 (issue 14): every `fusedops_app
check` of the damaged folder ends in exit status 2 with a message, or in a PASS that the
manifest's digest vouches for; never a signal, never a FAIL (a wrong number computed from a
damaged file), never a temporary folder left behind.

    FUSEDOPS_MUTATIONS=200 FUSEDOPS_MUTATION_SEED=1234 python -m pytest tests/python/test_mutations.py -s

runs 200 damaged copies of each file (default 30, with a new seed each run, printed).
"""
from __future__ import annotations

import collections
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fusedops

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("FUSEDOPS_BUILD_DIR", REPO_ROOT / "build"))
APP = BUILD_DIR / "app" / "fusedops_app"
NAME_98 = "fusedops_98_matmul_avgpool_gelu_scale_max"
MUTATIONS = int(os.environ.get("FUSEDOPS_MUTATIONS", "30"))
SEED = int(os.environ.get("FUSEDOPS_MUTATION_SEED", str(time.time_ns() % 1_000_000)))

pytestmark = pytest.mark.skipif(not APP.is_file(), reason=f"{APP} is not built")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("AOTInductor needs a C++ compiler to export the .pt2")
    output = tmp_path_factory.mktemp("mutations")
    env = dict(os.environ, FUSEDOPS_LIBRARY=fusedops.library_path,
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "models"), str(REPO_ROOT)]))
    result = subprocess.run([sys.executable, "-m", "scripted.export", "--sizes", "small",
                             "--models", "98", "--formats", "pt,pt2", "--output", str(output)],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"export failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return output


def damage(data: bytes, rng: random.Random) -> bytes:
    """1 to 8 flipped bytes, or the file cut short, or bytes appended."""
    kind = rng.choices(["flip", "truncate", "append"], weights=[8, 1, 1])[0]
    if kind == "truncate":
        return data[:rng.randrange(len(data))]
    if kind == "append":
        return data + rng.randbytes(rng.randint(1, 64))
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        damaged[rng.randrange(len(damaged))] ^= rng.randint(1, 255)
    return bytes(damaged)


@pytest.mark.parametrize("folder_name, model_name", [
    (NAME_98, "model.pt"), (NAME_98 + "_aoti", "model.pt2")])
def test_damaged_model_is_refused_or_verified(repo, tmp_path, folder_name, model_name):
    seed = SEED + (1 if model_name == "model.pt2" else 0)
    print(f"\n{model_name}: {MUTATIONS} mutations, FUSEDOPS_MUTATION_SEED={SEED}")
    rng = random.Random(seed)
    folder = Path(shutil.copytree(repo / folder_name, tmp_path / "repo" / folder_name))
    model = folder / "1" / model_name
    original = model.read_bytes()
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(private_tmp))
    outcomes: collections.Counter = collections.Counter()
    for mutation in range(MUTATIONS):
        damaged = damage(original, rng)
        model.write_bytes(damaged)
        result = subprocess.run([str(APP), "check", folder], capture_output=True, text=True,
                                timeout=120, env=env)
        context = (f"mutation {mutation} (seed {seed}) of {model_name}: exit "
                   f"{result.returncode}\n{result.stdout}{result.stderr}")
        assert result.returncode >= 0, "killed by a signal: " + context
        assert "FAIL" not in result.stdout, "a wrong number from a damaged file: " + context
        if result.returncode == 0:
            assert damaged == original and result.stdout.startswith("PASS"), context
            outcomes["digest-verified PASS"] += 1
        else:
            assert result.returncode == 2, context
            assert result.stdout.startswith(f"ERROR {folder_name}: "), context
            assert "damaged or was changed after export" in result.stdout, context
            outcomes["exit 2, damaged file refused"] += 1
        assert list(private_tmp.iterdir()) == [], "a temporary folder was left: " + context
    model.write_bytes(original)
    print(f"{model_name}: {dict(outcomes)}")
    assert sum(outcomes.values()) == MUTATIONS

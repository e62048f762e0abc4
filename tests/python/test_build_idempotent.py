"""scripts/build.sh twice with the same settings: the second call rebuilds nothing (issue 41).
scripts/run.sh and scripts/test.sh each call it, so `test.sh` after `run.sh` is that second call;
it had recompiled the app's generated Triton schema source (rewritten at every configure) and
relinked the app and the tests that link it.

Runs on the build tree under test ($FUSEDOPS_BUILD_DIR, which scripts/test.sh sets, else build/),
with whatever it was configured with (CPU-only or CUDA: CMake's cache keeps the settings; CI's
is the build scripts/test.sh just made, so the first build below has nothing to do)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("FUSEDOPS_BUILD_DIR", REPO_ROOT / "build"))
# ninja's progress lines "[3/72] Building CXX object ..."; "Re-checking globbed directories" runs
# at every build (CMake's CONFIGURE_DEPENDS globs) and changes nothing when no file was added.
STEP = re.compile(r"^\[\d+/\d+\] (?!Re-checking globbed directories)(.*)$", re.M)


def build(command) -> str:
    env = dict(os.environ, FUSEDOPS_SKIP_APT="1")  # packages are there: the tree was built
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=3600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.skipif(not (BUILD_DIR / "build.ninja").is_file(),
                    reason=f"{BUILD_DIR} is not a Ninja build tree (scripts/build.sh makes one)")
def test_a_second_build_rebuilds_nothing():
    # Up to date first (a no-op after scripts/test.sh's build; after a source edit, that edit).
    build(["cmake", "--build", str(BUILD_DIR)])
    # What run.sh and test.sh do: configure again, then build.
    steps = STEP.findall(build(["bash", str(REPO_ROOT / "scripts" / "build.sh"), str(BUILD_DIR)]))
    assert steps == [], "the second build.sh did work:\n" + "\n".join(steps)

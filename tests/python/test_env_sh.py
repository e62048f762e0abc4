"""scripts/env.sh is sourced by users' interactive shells (app/README.md): sourcing it must
leave the shell's options alone (it used to run `set -euo pipefail` there, so the next failing
command closed the user's terminal), while the scripts that source it stay strict."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_SH = REPO_ROOT / "scripts" / "env.sh"


def bash(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(REPO_ROOT)})


def test_sourcing_changes_no_shell_option():
    result = bash(f'before="$(set +o; shopt -p)"; source "{ENV_SH}"; '
                  'after="$(set +o; shopt -p)"; '
                  '[[ "$before" == "$after" ]] || diff <(echo "$before") <(echo "$after")')
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_failing_command_after_sourcing_does_not_end_the_shell():
    result = bash(f'source "{ENV_SH}"; false; echo "$UNSET_VARIABLE"; echo still here')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("still here")


def test_sourcing_defines_the_functions_and_root():
    result = bash(f'source "{ENV_SH}"; type -t fusedops_activate_python fusedops_setup; '
                  'echo "$FUSEDOPS_ROOT"')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["function", "function", str(REPO_ROOT)]


def test_the_scripts_that_source_it_are_strict_themselves():
    for script in ("build.sh", "test.sh", "run.sh"):
        lines = (REPO_ROOT / "scripts" / script).read_text().splitlines()
        strict = lines.index("set -euo pipefail")
        sourced = next(i for i, line in enumerate(lines) if "env.sh" in line and "source" in line)
        assert strict < sourced, script

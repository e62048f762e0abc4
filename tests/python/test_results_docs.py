"""One source for the published numbers (issue 41): docs/results.json, written by bench/results.py
from a GPU run, and the tables that bench/render_results.py writes from it into README.md and
docs/PERFORMANCE.md. The rendering and collecting logic is tested on small synthetic FIXTURES
below (made-up values chosen to exercise formatting, not measurements); the committed documents
are checked against the committed docs/results.json. No torch needed."""
from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO_ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = load("render_results")
collector = load("results")


def kb(problem, precision, cached, runtime, ref, numerics="eager", correct=True):
    return {"problem": problem, "precision": precision, "numerics": numerics,
            "cache_folds": cached, "correctness": correct, "runtime_ms": runtime,
            "ref_runtime_ms": ref, "x_vs_eager": round(ref / runtime, 3) if runtime else None}


# FIXTURE: synthetic values, not measurements.
FIXTURE_BENCH = {"device": "cuda", "gpu": "Fixture GPU", "torch": "2.11.0+fixture",
                 "fusedops": "0.0.0", "command": "bench/bench.py --fixture",
                 "rows": [  # as bench.py writes them
                          {"model": "18", "batch": 1024, "dtype": "float32", "modelnew_ms": 0.0234},
                          {"model": "39", "batch": 1024, "dtype": "float32", "modelnew_ms": 9.0},
                          {"model": "39", "batch": 16384, "dtype": "float32", "modelnew_ms": 2.5},
                          {"model": "18", "batch": 1024, "dtype": "float16", "modelnew_ms": 0.03}]}
FIXTURE_KB = [kb("18", "fp32", True, 0.02, 2.5, numerics="accurate"),
              kb("18", "fp32", False, 0.1, 2.5, numerics="accurate"),
              kb("18", "fp16", True, 0.2, 0.25, numerics="accurate"),  # "eager" preferred below
              kb("18", "fp16", True, 0.18, 0.25),
              kb("18", "bf16", True, 0.21, 0.5, correct=False),
              kb("39", "fp32", True, 3.0, 12.0, numerics="accurate")]
FIXTURE = {"gpu": "Fixture GPU", "commit": "0123456789abcdef", "torch": "2.11.0+fixture",
           "commands": ["bash scripts/gpu_check.sh --fixture"],
           "bench": {"command": FIXTURE_BENCH["command"], "rows": FIXTURE_BENCH["rows"]},
           "kernelbench": FIXTURE_KB}


def test_readme_table_from_fixture():
    text = render.render_readme(FIXTURE)
    lines = text.splitlines()
    assert "one Fixture GPU" in lines[0] and "commit 0123456" in lines[0]
    assert "`bash scripts/gpu_check.sh --fixture`" in lines[0]
    # 3 significant digits for times and ratios below 10x, none after the point above; the order
    # 18, 98, 39, 62 with rows absent from the run left out; model 39 named at its size.
    assert lines[2:] == [
        "| model | fusedops | eager PyTorch | speedup |", "|---|---|---|---|",
        "| 18 | 0.02 ms | 2.5 ms | 125x (the GEMM folds into `x . colsum(W)`, a cached weight fold) |",
        "| 39 (16384 x 4096) | 3 ms | 12 ms | 4x |"]


def test_kernelbench_table_from_fixture():
    lines = render.render_kernelbench(FIXTURE).splitlines()
    assert lines[2].startswith("| model | dtype | harness, cached | harness, fresh fold |")
    assert lines[4:] == [
        # fp32: the fresh row beside the cached one; bench.py's batch-1024 no_grad time.
        "| 18 | float32 | 0.02 | 0.1 | 0.0234 | 2.5 | 125x | yes |",
        # half: the "eager" numerics row, a row missing from the run as "-", a failed check NO.
        "| 18 | float16 / bfloat16 | 0.18 / 0.21 | - / - | 0.03 / - | 0.25 / 0.5 | 1.39x / 2.38x | yes / NO |",
        # model 39's no_grad time is bench.py's 16384-row row, KernelBench's size.
        "| 39 (16384 x 4096) | float32 | 3 | - | 2.5 | 12 | 4x | yes |"]


def test_compile_table_only_from_a_precisions_run():
    assert "has no precisions table" in render.render_compile(FIXTURE)
    with_precisions = dict(FIXTURE, precisions=[
        {"model": "18", "mode": "float32", "fusedops_ms": 0.0191, "compile_vs_fusedops": 140.4},
        {"model": "18", "mode": "float16", "fusedops_ms": 0.03, "compile_vs_fusedops": 0.97}])
    lines = render.render_compile(with_precisions).splitlines()
    assert lines[-1] == "| 18 | 140x (0.0191 ms) | - | 0.97x | - | - | - |"
    # A --no-compile run (the floor table's run) has no compile ratios: no table of dashes.
    without_compile = dict(FIXTURE, precisions=[
        {"model": "18", "mode": "float32", "fusedops_ms": 0.0191, "compile_vs_fusedops": None}])
    assert "no torch.compile column" in render.render_compile(without_compile)


def test_floor_table_only_from_a_run_with_floors():
    assert "has no floor column" in render.render_floor(FIXTURE)
    # FIXTURE: synthetic values, not measurements. 18 folds its weight (no floor row); 39 at the
    # SPEC's size and at KernelBench's (39L); a half mode with its eager-numerics ratio.
    row = {"fusedops_ms": 1.0, "floor_ms": 0.8, "fusedops_over_floor": 1.25}
    with_floors = dict(FIXTURE, precisions=[
        dict(row, model="18", mode="float32"),
        dict(row, model="39", mode="float32"),
        dict(row, model="39L", mode="float16", fusedops_over_floor=1.05,
             fusedops_eager_over_floor=1.125)])
    lines = render.render_floor(with_floors).splitlines()
    assert lines[2] == "| model | " + " | ".join(render.MODES) + " |"
    assert lines[4:] == ["| 39 | 1.25x | - | - | - | - | - |",
                         "| 39 (16384 x 4096) | - | - | 1.05x / 1.12x | - | - | - |"]


def test_training_table_only_from_a_run_with_training_rows():
    assert "has no training table" in render.render_training(FIXTURE)
    # FIXTURE: synthetic values, not measurements. Model 18 in two modes, no compile column.
    row = {"model": "18", "batch": 1024, "fusedops_peak_mib": 0.004, "eager_peak_mib": 32.0}
    with_training = dict(FIXTURE, training=[
        dict(row, mode="float32", fusedops_ms=1.5, eager_ms=6.0, x_eager=4.0),
        dict(row, mode="bfloat16", fusedops_ms=1.4, eager_ms=1.4, x_eager=1.0,
             fusedops_peak_mib=98.0, eager_peak_mib=80.0)])
    lines = render.render_training(with_training).splitlines()
    assert lines[2] == "| model | " + " | ".join(render.TRAINING_MODES) + " |"
    assert lines[4] == "| 18 | 4x (1.5 ms) | - | - | - | 1x (1.4 ms) |"
    assert lines[-1] == "| 18 | 0 / 32 | - | - | - | 98 / 80 |"
    # With torch.compile timed, its ratio follows the slash.
    compiled = dict(FIXTURE, training=[dict(row, mode="float32", fusedops_ms=1.5, eager_ms=6.0,
                                            x_eager=4.0, compile_ms=4.5, x_compile=3.0)])
    assert render.render_training(compiled).splitlines()[4] == (
        "| 18 | 4x / 3x (1.5 ms) | - | - | - | - |")
    # With the step's floor timed (bench/training.py's StepFloor), its ms follow fusedops'.
    floored = dict(FIXTURE, training=[dict(row, mode="float32", fusedops_ms=1.5, eager_ms=6.0,
                                           x_eager=4.0, floor_ms=1.25)])
    lines = render.render_training(floored).splitlines()
    assert lines[4] == "| 18 | 4x (1.5 ms; floor 1.25) | - | - | - | - |"
    assert "StepFloor" in lines[0]


@pytest.mark.parametrize("key", ["gpu", "commit", "commands", "bench", "kernelbench"])
def test_results_without_gpu_commit_or_command_are_refused(key):
    broken = copy.deepcopy(FIXTURE)
    del broken[key]
    with pytest.raises(ValueError, match=key):
        render.validate(broken)
    broken = dict(FIXTURE, commands=[" "])
    with pytest.raises(ValueError, match="commands"):
        render.validate(broken)


def documents(root: Path, readme_body: str, compile_body: str, kb_body: str):
    (root / "docs").mkdir()
    (root / "README.md").write_text(
        f"# title\n\n<!-- results:readme:begin -->\n{readme_body}\n<!-- results:readme:end -->\n\nafter\n")
    (root / "docs" / "PERFORMANCE.md").write_text(
        f"<!-- results:compile:begin -->\n{compile_body}\n<!-- results:compile:end -->\nmiddle\n"
        f"<!-- results:floor:begin -->\n{render.render_floor(FIXTURE)}\n<!-- results:floor:end -->\n"
        f"<!-- results:training:begin -->\n{render.render_training(FIXTURE)}\n"
        "<!-- results:training:end -->\n"
        f"<!-- results:kernelbench:begin -->\n{kb_body}\n<!-- results:kernelbench:end -->\n")


def test_check_fails_on_a_stale_block_and_passes_once_rendered(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(FIXTURE))
    documents(tmp_path, render.render_readme(FIXTURE), "| a hand-copied table |",
              render.render_kernelbench(FIXTURE))
    args = ["--results", str(results), "--root", str(tmp_path)]
    assert render.main(args + ["--check"]) == 1
    assert "docs/PERFORMANCE.md (compile)" in capsys.readouterr().err
    assert render.main(args) == 0
    assert render.main(args + ["--check"]) == 0
    performance = (tmp_path / "docs" / "PERFORMANCE.md").read_text()
    assert "hand-copied" not in performance and "\nmiddle\n" in performance
    assert (tmp_path / "README.md").read_text().endswith("<!-- results:readme:end -->\n\nafter\n")


def test_a_missing_or_repeated_block_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="one results:readme block, found 0"):
        render.render_document("no markers", ["readme"], FIXTURE)
    block = "<!-- results:readme:begin -->\nx\n<!-- results:readme:end -->\n"
    with pytest.raises(ValueError, match="found 2"):
        render.render_document(block + block, ["readme"], FIXTURE)


def test_the_documents_hold_each_results_block_once():
    for document, names in render.DOCUMENTS.items():
        text = (REPO_ROOT / document).read_text()
        for name in names:
            assert len(render.blocks_of(text, name)) == 1, (document, name)


def test_the_documents_agree_with_docs_results_json():
    if not render.RESULTS.exists():
        pytest.skip("docs/results.json is not committed yet: the GPU run that writes it "
                    "(bench/results.py, scripts/gpu_check.sh's results step) has not been made")
    results = json.loads(render.RESULTS.read_text())
    render.validate(results)
    for document, names in render.DOCUMENTS.items():
        text = (REPO_ROOT / document).read_text()
        assert render.render_document(text, names, results) == text, (
            f"{document}'s results blocks differ from docs/results.json: run "
            "python bench/render_results.py")


def test_collector_records_gpu_commit_and_commands():
    result = collector.collect(FIXTURE_BENCH, FIXTURE_KB, None, ["bash scripts/gpu_check.sh"],
                               "abc123")
    render.validate(result)
    assert (result["gpu"], result["commit"], result["commands"]) == (
        "Fixture GPU", "abc123", ["bash scripts/gpu_check.sh"])
    assert result["bench"]["command"] == "bench/bench.py --fixture"
    assert "precisions" not in result and "training" not in result
    with pytest.raises(ValueError, match="--training holds no rows"):
        collector.collect(FIXTURE_BENCH, FIXTURE_KB, None, ["x"], "abc", training=[])
    with pytest.raises(ValueError, match="not on a GPU"):
        collector.collect(dict(FIXTURE_BENCH, device="cpu"), FIXTURE_KB, None, ["x"], "abc")
    with pytest.raises(ValueError, match="--command"):
        collector.collect(FIXTURE_BENCH, FIXTURE_KB, None, [], "abc")


def test_collector_command_line_writes_a_file_the_renderer_accepts(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps(FIXTURE_BENCH))
    (tmp_path / "kb.json").write_text(json.dumps(FIXTURE_KB))
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "results.py"),
                          "--bench", str(tmp_path / "bench.json"), "--kernelbench",
                          str(tmp_path / "kb.json"), "--command", "bash scripts/gpu_check.sh",
                          "--commit", "feedbeef", "--out", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    written = json.loads(out.read_text())
    render.validate(written)
    assert written["commit"] == "feedbeef" and written["kernelbench"] == FIXTURE_KB

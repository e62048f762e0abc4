"""bench/compare.py, the speed A/B of two builds (scripts/gpu_check.sh's compare step): a slower
B is flagged only outside both the limit and the run-to-run spread of either build."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_compare", REPO_ROOT / "bench" / "compare.py")
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def run_file(tmp_path, name, ms_by_batch):
    """A bench.py JSON file (only the fields compare.py reads) with ModelNew's time per batch.
    FIXTURE: synthetic values, not measurements."""
    rows = [{"model": "62", "dtype": "float16", "batch": batch, "init_args": [8192, 8192, 512],
             "modelnew_ms": ms} for batch, ms in ms_by_batch.items()]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"rows": rows}))
    return str(path)


def test_a_change_inside_the_noise_is_not_flagged_and_outside_it_is(tmp_path, capsys):
    # batch 1: A's two runs spread 20%, B is 10% slower: noise. batch 1024: runs agree to 1%,
    # B is 10% slower: a change.
    a = [run_file(tmp_path, "a1", {1: 0.030, 1024: 0.200}),
         run_file(tmp_path, "a2", {1: 0.036, 1024: 0.202})]
    b_noise = [run_file(tmp_path, "b1", {1: 0.036, 1024: 0.201}),
               run_file(tmp_path, "b2", {1: 0.037, 1024: 0.203})]
    assert compare.main(["--a", *a, "--b", *b_noise]) == 0
    b_slower = [run_file(tmp_path, "c1", {1: 0.033, 1024: 0.221}),
                run_file(tmp_path, "c2", {1: 0.033, 1024: 0.222})]
    assert compare.main(["--a", *a, "--b", *b_slower]) == 1
    flagged = [line for line in capsys.readouterr().out.splitlines() if "<- slower" in line]
    assert len(flagged) == 1 and " 1024 " in flagged[0], flagged


def test_the_limit_holds_where_both_builds_are_quiet(tmp_path):
    a = [run_file(tmp_path, "a", {1024: 0.200})]  # one run each: no spread
    assert compare.main(["--a", *a, "--b", run_file(tmp_path, "b", {1024: 0.205})]) == 0
    assert compare.main(["--a", *a, "--b", run_file(tmp_path, "c", {1024: 0.207})]) == 1
    assert compare.main(["--a", *a, "--b", run_file(tmp_path, "d", {1024: 0.207}),
                         "--limit", "0.05"]) == 0

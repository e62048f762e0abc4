r"""Two builds of fusedops against each other: ModelNew's time in bench.py's JSON files from runs
of each build on one GPU (alternated: A, B, A, B, ...; one process per run, since a process
loads one libfusedops), the median per configuration, and B / A.

    python bench/compare.py --a base1.json base2.json --b new1.json new2.json [--limit 0.03]

Exits 1 when a configuration of B is slower than A by more than --limit and by more than the
spread of either build's own runs ((max - min) / median): a difference inside one build's
run-to-run noise is no change (a batch-1 row, bound by host jitter, spreads 8-64% on the GPU
machine), a difference outside it is a rerun-worthy change, not a verdict.
"""
import argparse
import json
import statistics
import sys


def times(paths):
    """{(model, dtype, batch, init_args): [ModelNew's ms in each run]}."""
    out = {}
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["rows"]:
                size = tuple(map(str, row["init_args"]))
                # ModelNew's time, and with TF32 allowed where bench.py timed it (float32).
                for field, dtype in (("modelnew_ms", row["dtype"]),
                                     ("modelnew_tf32_ms", row["dtype"] + "+tf32")):
                    value = row.get(field)
                    if value is not None and value == value:  # NaN: that variant failed
                        out.setdefault((row["model"], dtype, row["batch"], size), []).append(value)
    return out


def spread(values):
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--a", nargs="+", required=True, help="bench.py JSON files of build A")
    p.add_argument("--b", nargs="+", required=True, help="bench.py JSON files of build B")
    p.add_argument("--limit", type=float, default=0.03,
                   help="B slower than A by more than this fraction (and than either build's "
                   "spread) is flagged (default 0.03)")
    args = p.parse_args(argv)
    a, b = times(args.a), times(args.b)
    flagged = 0
    print(f"{'model':>5} {'dtype':>13} {'batch':>6} {'A ms':>9} {'B ms':>9} {'B/A':>6} "
          f"{'spread A':>8} {'spread B':>8}  size")
    for key in sorted(set(a) & set(b), key=lambda k: (k[0], k[1], k[2], k[3])):
        ma, mb = statistics.median(a[key]), statistics.median(b[key])
        ratio = mb / ma
        mark = ""
        if ratio > 1 + max(args.limit, spread(a[key]), spread(b[key])):
            flagged += 1
            mark = "  <- slower"
        print(f"{key[0]:>5} {key[1]:>13} {key[2]:>6} {ma:9.4f} {mb:9.4f} {ratio:6.3f} "
              f"{spread(a[key]):8.1%} {spread(b[key]):8.1%}  {'x'.join(key[3][:2])}{mark}")
    missing = sorted(set(a) ^ set(b))
    if missing:
        print(f"compare: configurations in one build only: {missing}")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Summarise an ncu SASS source export (tools/profile_kernels.sh writes <case>_sass.csv).

Prints the kernel's warp-stall samples by reason, by instruction class, and the hottest
instructions with their index in the listing, so that a change's effect on one phase of a
kernel can be read without the Nsight GUI.

  python3 tools/sass_summary.py profile-out/bwd_fp16_d64_n4096_c0_sass.csv [--top 40] [--ranges]
"""
import argparse
import collections
import csv
import re


def load(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
    rows = list(csv.DictReader(lines[start:]))
    return lines[0], rows


def num(x):
    try:
        return float(x.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--ranges", action="store_true",
                    help="samples per run of 40 consecutive instructions (to find phases)")
    a = ap.parse_args()
    title, rows = load(a.csv)
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    total = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rows) or 1.0
    executed = sum(num(r["Instructions Executed"]) for r in rows)
    print(title[:160])
    print(f"instructions in listing {len(rows)}, samples {total:.0f}, warp instructions executed {executed:.3g}")
    by_reason = collections.Counter()
    for r in rows:
        for k in reasons:
            by_reason[k] += num(r[k])
    print("\nstall reasons (share of all samples):")
    for k, v in by_reason.most_common(12):
        print(f"  {k:28s} {100 * v / total:5.1f}%")
    by_op = collections.Counter()
    ex_op = collections.Counter()
    for r in rows:
        op = re.split(r"[ .]", r["Source"].strip().lstrip("@!P0123456789UPT ").strip())[0]
        by_op[op] += num(r["Warp Stall Sampling (All Samples)"])
        ex_op[op] += num(r["Instructions Executed"])
    print("\nby opcode: share of samples / share of executed instructions")
    for k, v in by_op.most_common(16):
        print(f"  {k:10s} {100 * v / total:5.1f}%  {100 * ex_op[k] / max(executed, 1):5.1f}%")
    if a.ranges:
        print("\nsamples per 40-instruction run (index: share, executed):")
        for i in range(0, len(rows), 40):
            s = sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rows[i:i + 40])
            e = sum(num(r["Instructions Executed"]) for r in rows[i:i + 40])
            if s / total > 0.004:
                print(f"  {i:5d}: {100 * s / total:5.1f}%  {e:.3g}")
    print(f"\nhottest {a.top} instructions (index, share, top reasons, source):")
    hot = sorted(range(len(rows)), key=lambda i: -num(rows[i]["Warp Stall Sampling (All Samples)"]))
    for i in hot[:a.top]:
        r = rows[i]
        s = num(r["Warp Stall Sampling (All Samples)"])
        top = sorted(((num(r[k]), k[6:]) for k in reasons), reverse=True)[:2]
        why = ", ".join(f"{k} {100 * v / total:.1f}" for v, k in top if v > 0)
        print(f"  {i:5d} {100 * s / total:5.2f}%  {why:34s} {r['Source'].strip()[:70]}")


if __name__ == "__main__":
    main()

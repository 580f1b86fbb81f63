"""The GPUs' SM clock and power during each ring_bench.py variant, from tools/ring_gpu_check.sh's
clocks.csv (nvidia-smi samples every 250 ms: timestamp, index, clocks.sm, power.draw, temperature)
and the variants' wall-clock spans in ring_bench_*.json (rank 0's host clock; the other rank runs
the same variant at the same time within a barrier):

    python3 tools/ring_clocks.py clocks.csv ring_bench_524288.json [...]

Prints per length and variant: mean SM MHz and power (W) of each GPU over that variant's runs.
Whether the overlapped ring is clocked lower than the compute alone (a power limit) shows here.
"""
import csv
import datetime
import json
import sys
from collections import defaultdict


def read_samples(path):
    out = []  # (epoch seconds, gpu, MHz, W)
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) < 4:
                continue
            try:
                t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
                mhz = float(row[2].strip().split()[0])
                watts = float(row[3].strip().split()[0])
            except (ValueError, IndexError):
                continue
            out.append((t, int(row[1]), mhz, watts))
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    samples = read_samples(argv[0])
    if not samples:
        print("ring_clocks: no samples in", argv[0])
        return 1
    # nvidia-smi prints local time; the host clock of the spans is epoch seconds. The machines
    # run in UTC; an offset would show as variants without samples.
    for path in argv[1:]:
        try:
            rows = json.load(open(path))
        except (OSError, ValueError):
            continue
        for row in rows:
            names = [k[:-len("_spans_rank0")] for k in row if k.endswith("_spans_rank0")]
            if not names:
                continue
            print(f"N={row['N']}: variant: per GPU mean SM MHz / W over its runs (samples)")
            for name in names:
                acc = defaultdict(list)
                for a, b in row[name + "_spans_rank0"]:
                    for t, gpu, mhz, watts in samples:
                        if a <= t <= b:
                            acc[gpu].append((mhz, watts))
                cells = []
                for gpu in sorted(acc):
                    v = acc[gpu]
                    cells.append(f"GPU{gpu} {sum(m for m, _ in v) / len(v):.0f} MHz "
                                 f"{sum(w for _, w in v) / len(v):.0f} W ({len(v)})")
                print(f"  {name:12s} " + ("; ".join(cells) if cells else "no samples"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

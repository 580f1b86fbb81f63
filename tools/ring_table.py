"""The tables of tools/ring_gpu_check.sh's summary, from ring_bench.py's JSON rows:

    python3 tools/ring_table.py ring_bench_131072.json ring_bench_524288.json \
        ring_large_1048576.json

Scaling and overlap (seconds; the slowest rank's mean over the reps, fwd+bwd):
  t1        one GPU, the whole sequence          ring     the ring (tW)
  eff       t1 / (W * ring)                      serial   the ring without overlap
                                                          (FLASHPP_RING_OVERLAP=0)
  compute   the ring without transfers (FLASHPP_RING_TRANSFERS=skip): its lower bound
  comm      the ring's transfers alone (FLASHPP_RING_COMPUTE=skip)
  exposed   ring - compute; hidden = 1 - exposed / comm (clipped to 0..100%)
  ser-cmp   serial - compute (about comm when the transfers run alone in the serial ring)
  ring_p0, compute_p0, eff_p0: with FLASHPP_SM90_FWD_PERSISTENT=0
  prof      one profiled ring run: the share of the NCCL kernels' busy time with a compute
            kernel running too / NCCL busy time / time with no compute kernel running
  retries   the caching allocator's alloc retries (device-synchronising frees) during the
            reps of ring / compute
Capped groups (ring_bench.py --ctas): the ring and its transfers alone over a group made by
flashpp.distributed.ring_group(max_ctas=C), with exposed, hidden and eff as above (compute is the
default group's: it makes no transfer).
The overlap is shown when ring is close to compute (exposed small against comm) while serial is
close to compute + comm.
"""
import json
import sys


def fmt(x, spec=".3f", pct=False):
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if pct else format(x, spec)


def main(paths):
    rows = []
    for p in paths:
        try:
            with open(p) as f:
                rows += json.load(f)
        except (OSError, ValueError):
            pass
    scaling = sorted((r for r in rows if "ring" in r or "tW" in r), key=lambda r: r["N"])
    large = sorted((r for r in rows if "time_s" in r), key=lambda r: r["N"])
    if scaling:
        cols = ["N", "t1", "ring", "eff", "serial", "compute", "comm", "exposed", "hidden",
                "ser-cmp", "ring_p0", "eff_p0", "compute_p0", "prof hid/nccl/idle", "retries"]
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for r in scaling:
            g = r.get
            ser_cmp = (g("serial") - g("compute")
                       if g("serial") is not None and g("compute") is not None else None)
            prof = g("profile")
            prof_s = (f"{fmt(prof['hidden'], pct=True)}/{prof['nccl_busy']:.3f}/"
                      f"{prof['compute_idle']:.3f}" if prof else "n/a")
            retries = "/".join(str(int(g(x + "_alloc", {}).get("num_alloc_retries", 0)))
                               if g(x + "_alloc") else "-" for x in ("ring", "compute"))
            cells = [str(r["N"]), fmt(g("t1")), fmt(g("ring", g("tW"))), fmt(g("efficiency"), pct=True),
                     fmt(g("serial")), fmt(g("compute")), fmt(g("comm")), fmt(g("exposed")),
                     fmt(g("hidden"), pct=True), fmt(ser_cmp), fmt(g("ring_p0")),
                     fmt(g("efficiency_p0"), pct=True), fmt(g("compute_p0")), prof_s, retries]
            print("| " + " | ".join(cells) + " |")
    capped = [(r, c) for r in scaling for c in sorted(
        int(k[len("ring_c"):]) for k in r if k.startswith("ring_c") and k[len("ring_c"):].isdigit())]
    if capped:
        print("| N | max_ctas | ring | eff | comm | exposed | hidden |")
        print("|---|---|---|---|---|---|---|")
        for r, c in capped:
            g = r.get
            print(f"| {r['N']} | {c} | {fmt(g(f'ring_c{c}'))} | {fmt(g(f'efficiency_c{c}'), pct=True)} | "
                  f"{fmt(g(f'comm_c{c}'))} | {fmt(g(f'exposed_c{c}'))} | {fmt(g(f'hidden_c{c}'), pct=True)} |")
    if large:
        print("| N (ring only) | time | peak per GPU | head chunks | max_ctas | finite |")
        print("|---|---|---|---|---|---|")
        for r in large:
            print(f"| {r['N']} | {r['time_s']:.2f} s (1 run) | {r['peak_gib']:.1f} of "
                  f"{r['gpu_gib']:.0f} GiB | {r['head_chunks']} | {r.get('max_ctas') or 'NCCL'} | {r['finite']} |")
    if not scaling and not large:
        print("(no results)")


if __name__ == "__main__":
    main(sys.argv[1:])

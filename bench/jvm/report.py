"""Turns bench/jvm/run.sh's result lines into the table of docs/PERFORMANCE.md
and the ratios against the targets; optionally writes every number as JSON.

  python report.py RESULTS [--json FILE]
"""

import json
import re
import sys

# Apache Ozone's own published figures (HDDS-16783), not measured here:
# its mini cluster does not resolve from Maven Central.
OZONE_PUBLISHED_GRPC = 22600.0

path = sys.argv[1]
out_json = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
line_re = re.compile(r"^(median|result) (.*)$")
medians, rounds = {}, []
for line in open(path):
    m = line_re.match(line.strip())
    if not m:
        continue
    kv = dict(p.split("=", 1) for p in m.group(2).split())
    kv["value"] = float(kv["value"])
    if m.group(1) == "median":
        medians[(kv["system"], kv["mode"], kv["workload"])] = kv["value"]
    else:
        rounds.append(kv)


# Workloads measured in rounds without a median line (HBase): the median of
# their rounds.
by_workload = {}
for r in rounds:
    by_workload.setdefault((r["system"], r["mode"], r["workload"]), []).append(r["value"])
for k, vs in by_workload.items():
    if k not in medians:
        medians[k] = sorted(vs)[len(vs) // 2]


def round_ratios(mode, workload):
    """This project / HDFS, round by round, sorted."""
    by_round = {}
    for r in rounds:
        if r["mode"] == mode and r["workload"] == workload:
            by_round.setdefault(r["round"], {})[r["system"]] = r["value"]
    return sorted(v["ozone-rs"] / v["hdfs"] for v in by_round.values() if len(v) == 2)


def get(system, mode, workload):
    return medians.get((system, mode, workload))


def fmt(v, digits=0):
    return "" if v is None else f"{v:,.{digits}f}"


rows = []
for system, mode in dict.fromkeys((s, m) for s, m, _ in medians):
    if mode in ("raw-pread", "hbase", "wal"):
        continue
    rnd = get(system, mode, "random-64k-16t")
    raw = get(system, "raw-pread", "random-64k-16t")
    seq = get(system, mode, "sequential-1m")
    rows.append((system, mode, rnd, rnd / raw if rnd and raw else None, seq))

print("| system | mode | 64 KiB random preads, 16 threads (ops/s) | of raw Java pread in the same JVM | sequential 1 GiB (MiB/s) |")
print("|---|---|---:|---:|---:|")
for system, mode, rnd, of_raw, seq in rows:
    print(f"| {system} | {mode} | {fmt(rnd)} | {fmt(of_raw, 2)} | {fmt(seq)} |")
for system in ("ozone-rs", "hdfs"):
    raw = get(system, "raw-pread", "random-64k-16t")
    if raw:
        print(f"| {system} JVM | raw Java pread of a local file | {fmt(raw)} | 1.00 | |")
print()
hbase = [("hbase-load-8-regions", "load (rows/s)"), ("hbase-random-gets-16t", "random gets, 16 threads (gets/s)")]
hbase_ratios = {w: round_ratios("hbase", w) for w, _ in hbase}
if any(get(s, "hbase", w) for s in ("ozone-rs", "hdfs") for w, _ in hbase):
    print("| system | " + " | ".join(f"HBase 2.6.4 {t}, median of rounds" for _, t in hbase) + " |")
    print("|---|" + "---:|" * len(hbase))
    for s in ("ozone-rs", "hdfs"):
        print(f"| {s} | " + " | ".join(fmt(get(s, "hbase", w)) for w, _ in hbase) + " |")
    print()

wal = [r for r in rounds if r["mode"] == "wal" and r["unit"] == "ops/s"]
wal_ratios = []
if wal:
    workload = wal[0]["workload"]
    print(f"| system | {workload}: appends/s (median) | p99 of append + hflush, ms (median) |")
    print("|---|---:|---:|")
    for s in ("ozone-rs", "hdfs"):
        print(f"| {s} | {fmt(get(s, 'wal', workload))} | {fmt(get(s, 'wal', workload + '-p99'), 2)} |")
    wal_ratios = round_ratios("wal", workload)
    print()

ours_off = get("ozone-rs", "short-circuit-verify-off", "random-64k-16t")
ours_on = get("ozone-rs", "short-circuit-verify-on", "random-64k-16t")
hdfs_local = max(
    v
    for v in (
        get("hdfs", "local-reader-verify-off", "random-64k-16t"),
        get("hdfs", "local-reader-verify-on", "random-64k-16t"),
        0.0,
    )
    if v is not None
)
ratios = {}
if ours_off and hdfs_local:
    ratios["short-circuit verify off / HDFS local reader (best of on, off)"] = ours_off / hdfs_local
if ours_off and ours_on:
    ratios["short-circuit verify on / verify off"] = ours_on / ours_off
if ours_off:
    ratios["short-circuit verify off / Apache Ozone gRPC reads (published, HDDS-16783)"] = (
        ours_off / OZONE_PUBLISHED_GRPC
    )
for w, t in hbase:
    rs = hbase_ratios[w]
    if rs:
        ratios[f"HBase {t.split(' (')[0]}: ozone-rs / HDFS (median of rounds)"] = rs[len(rs) // 2]
if wal_ratios:
    ratios["WAL appends + hflush: ozone-rs / HDFS (median of rounds)"] = wal_ratios[len(wal_ratios) // 2]
for k, v in ratios.items():
    print(f"- {k}: {v:.2f}")
for name, rs in [*((f"HBase {t.split(' (')[0]}", hbase_ratios[w]) for w, t in hbase), ("WAL", wal_ratios)]:
    if rs:
        print(f"  ({name} rounds: {', '.join(f'{v:.2f}' for v in rs)}; spread {rs[-1] - rs[0]:.2f})")
if out_json:
    with open(out_json, "w") as f:
        json.dump(
            {
                "medians": [
                    {"system": s, "mode": m, "workload": w, "value": v}
                    for (s, m, w), v in medians.items()
                ],
                "rounds": rounds,
                "ratios": ratios,
                "ozone_published_grpc_ops": OZONE_PUBLISHED_GRPC,
            },
            f,
            indent=1,
        )

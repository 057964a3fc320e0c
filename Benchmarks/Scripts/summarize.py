#!/usr/bin/env python3
"""Tables from engine_compare.sh's JSON Lines: per workload and label, the range over the runs of
messages per second, context switches, CPU and reads per message over the measured window (start-up
left out), and the ratio of the CPU per message to the floor's (the bare NIO reader of the same
server in the same run: `floor-*` workloads), computed run by run.

    Benchmarks/Scripts/summarize.py OUT.jsonl
"""
import collections, json, sys


def floor_of(workload):
    """The floor workload reading the same server as `workload`."""
    if workload.startswith("floor-"):
        return None
    suffix = ""
    for s in ("-paced", "-packed", "-fast", "-python"):
        if workload.endswith(s):
            suffix = s
    base = workload[: len(workload) - len(suffix)] if suffix else workload
    protocol = ("signalr-on" if base.startswith("signalr-on") else "signalr" if base.startswith("signalr")
                else "socketio" if base.startswith("socketio") else "sse" if base.startswith("sse") else None)
    if protocol is None:
        return None
    if protocol == "sse" and suffix == "":
        return "floor-sse"
    return f"floor-{protocol}{suffix}"


def span(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else fmt.format(lo) + "-" + fmt.format(hi)


def main(path):
    records = [json.loads(line) for line in open(path) if line.strip()]
    floors = collections.defaultdict(dict)  # floor workload -> run -> cpu per message
    for r in records:
        if r["workload"].startswith("floor-") and r.get("window_cpu_us_per_message"):
            floors[r["workload"]].setdefault(r["run"], []).append(r["window_cpu_us_per_message"])
    groups = collections.OrderedDict()
    for r in records:
        groups.setdefault((r["workload"], r["label"]), []).append(r)
    print("| workload | label | messages/s | switches per message | CPU per message | reads per message | CPU / floor's |")
    print("|---|---|---|---|---|---|---|")
    for (workload, label), rs in groups.items():
        ratios = []
        floor = floor_of(workload)
        for r in rs:
            same_run = floors.get(floor, {}).get(r["run"]) if floor else None
            if same_run and r.get("window_cpu_us_per_message"):
                ratios.append(r["window_cpu_us_per_message"] / (sum(same_run) / len(same_run)))
        print("| {} | {} | {} | {} | {} µs | {} | {} |".format(
            workload, label, span([r.get("rate") for r in rs], "{:,}"),
            span([r.get("window_switches_per_message") for r in rs], "{:.2f}"),
            span([r.get("window_cpu_us_per_message") for r in rs], "{:.1f}"),
            span([r.get("window_reads_per_message") for r in rs], "{:.2f}"),
            span(ratios, "{:.1f}x") if ratios else "-"))


if __name__ == "__main__":
    main(sys.argv[1])

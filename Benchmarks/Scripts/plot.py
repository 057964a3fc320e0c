#!/usr/bin/env python3
"""Draws figures from engine_compare.sh's JSON Lines.

    Benchmarks/Scripts/plot.sh RESULTS.jsonl OUTDIR    (makes a venv with matplotlib, then runs this)

One PNG per measure: messages per second, context switches per message and CPU microseconds per
message for the throughput workloads, KiB per idle connection for the idle ones. Each bar is the
median of the runs of one binary (label); the whiskers span the slowest and fastest run. A workload a binary did not complete has no bar.
"""
import json, statistics, sys, os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
outdir = sys.argv[2]
os.makedirs(outdir, exist_ok=True)
labels = list(dict.fromkeys(r["label"] for r in records))

def figure(measure, title, unit, filename, workloads, log=False):
    workloads = [w for w in workloads if any(r["workload"] == w and r.get(measure) is not None for r in records)]
    if not workloads:
        return
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(workloads) * len(labels)), 3.6))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        medians, low, high = [], [], []
        for w in workloads:
            values = [r[measure] for r in records if r["workload"] == w and r["label"] == label and r.get(measure) is not None]
            m = statistics.median(values) if values else 0
            medians.append(m); low.append(m - min(values) if values else 0); high.append(max(values) - m if values else 0)
        xs = [x + i * width for x in range(len(workloads))]
        ax.bar(xs, medians, width, yerr=[low, high], capsize=3, label=label)
    ax.set_xticks([x + width * (len(labels) - 1) / 2 for x in range(len(workloads))])
    ax.set_xticklabels(workloads)
    ax.set_ylabel(unit + (" (log scale)" if log else ""))
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    if len(labels) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, filename), dpi=110)
    plt.close(fig)
    print("wrote", os.path.join(outdir, filename))

throughput = ["sse", "signalr-stream", "signalr-on", "socketio-on", "socketio-emit", "signalr-invoke"]
idle = ["sse-idle", "socketio-idle", "signalr-idle", "spreadbot-idle"]
figure("rate", "Messages per second (higher is better)", "messages/s", "throughput.png", throughput, log=True)
figure("switches_per_message", "Context switches per message (lower is better)", "switches/message", "switches.png", throughput, log=True)
figure("cpu_us_per_message", "Client CPU per message (lower is better)", "µs/message", "cpu.png", throughput, log=True)
figure("kib_per_connection", "Memory per idle connection (lower is better)", "KiB/connection", "memory.png", idle)

#!/usr/bin/env python3
"""The paper's Figures 7 and 8 (Abadi et al., OSDI 2016, section 6.3) in mode SIMULATED (issue 17).

    bench/sim_figures.py [--troupe build/troupe] [--out DIR] [--quick]

Figure 7: images/s of asynchronous and synchronous training with 25, 50, 100 and 200
workers and 16 PS tasks. Figure 8: synchronous training aggregating 50 workers' gradients
per step with 0 to 5 backup workers: the median step time and the normalized speedup
t(0)/t(b) x 50/(50+b). Both shape-only (doc/simulation.md), with one stated model of the
paper's Inception-v3 cluster (MODEL below): troupe's MLP with 6 hidden layers of 2150
units has Inception-v3's size (24.8 M parameters, 99 MB); each worker's step computes for
about 2 s (the rate set so, the paper's K40 GPUs at batch 32); 16 PS tasks of 8 cores;
links and network interfaces at 40 Gb/s with 50 us latency; each device's speed varies by
an exponential factor of mean 10%, drawn again every second (noise, noise_ms), which is
what backup workers are for.

Each point is the steady state: the difference between a run of W + S global steps and
one of W (the same seed replays the first W steps alike), so set-up and the first steps
are left out. images/s = S x batch x (workers aggregated per step, SYNC; 1, ASYNC) / time.
Figure 8's step time is the mean over the S steps (per-step times are not in the summary;
the paper shows medians). Writes sim_figures.json, sim_figures.md and, with matplotlib,
figure7_sim.png and figure8_sim.png into --out; bench/run.sh runs it and report.md shows it.
"""
import json
import os
import sys
import tempfile

from scenario_runs import arguments, steady_state
BATCH = 32
MODEL = {
    "hidden_units": [2150] * 6,
    "gflops_per_core": 0.3125,  # x 8 cores: a worker step of ~2 s at batch 32
    "cores": 8,
    "gbps": 40,
    "latency_us": 50,
    "noise": 0.1,
    "noise_ms": 1000,
    "ps_tasks": 16,
}
# The paper's values as transcribed by a secondary analysis (../shared/notes): Figure 7 at
# 200 workers, Figure 8's best backups.
PAPER_FIGURE7 = {"async_200": 2850, "sync_200": 2300}
PAPER_FIGURE8 = {"best_median_backups": 4, "best_median_s": 1.93, "best_speedup_backups": 3, "best_speedup": 1.095}


def scenario(workers, replication, steps, backups=0):
    m = MODEL
    backup = f" backup_workers: {backups}" if replication == "SYNC" else ""
    return f"""
name: "figure_{replication}_{workers}_{backups}"
cluster {{ mode: SIMULATED job {{ name: "ps" tasks: {m['ps_tasks']} }} job {{ name: "worker" tasks: {workers + backups} }} }}
model {{ name: "mlp" hidden_units: {m['hidden_units']} }}
dataset {{ name: "fashion-mnist" shuffle: true reader_threads: 1 }}
training {{ optimizer {{ name: "sgd" learning_rate: 0.001 }} steps: {steps} batch_size: {BATCH} seed: 1 replication: {replication}{backup} }}
simulation {{
  seed: 3
  network {{ latency_us: {m['latency_us']} bandwidth_gbps: {m['gbps']} nic_gbps: {m['gbps']} }}
  compute {{ gflops: {m['gflops_per_core']} memory_gbps: 50 kernel_overhead_us: 5 cores_per_device: {m['cores']}
             intra_op_threads: {m['cores']} noise: {m['noise']} noise_ms: {m['noise_ms']} }}
  execute_kernels: false
}}
report {{ progress: OFF }}
"""


def steady(troupe, tmp, workers, replication, warm, measured, backups=0):
    """Seconds and global steps of `measured` steps after `warm` ones, and the wall time."""
    return steady_state(troupe, tmp, lambda steps: scenario(workers, replication, steps, backups), warm, measured,
                        f"{replication}-{workers}-{backups}", "sim_figures")


def main():
    a = arguments(__doc__, "fewer steps, Figure 7 up to 100 workers").parse_args()
    worker_counts = [25, 50, 100] if a.quick else [25, 50, 100, 200]
    sync_steps = (2, 4) if a.quick else (3, 8)
    fig7, fig8 = [], []
    with tempfile.TemporaryDirectory(prefix="troupe-figures-") as tmp:
        for workers in worker_counts:
            # ASYNC: global steps are single workers' updates; as many per worker as SYNC.
            seconds, steps, wall = steady(a.troupe, tmp, workers, "ASYNC", sync_steps[0] * workers, sync_steps[1] * workers)
            row = {"workers": workers, "async_images_per_s": steps * BATCH / seconds, "async_wall_s": wall}
            seconds, steps, wall = steady(a.troupe, tmp, workers, "SYNC", *sync_steps)
            row.update({"sync_images_per_s": steps * workers * BATCH / seconds, "sync_step_s": seconds / steps,
                        "sync_wall_s": wall})
            fig7.append(row)
            print(f"figure 7, {workers} workers: async {row['async_images_per_s']:.0f} images/s, "
                  f"sync {row['sync_images_per_s']:.0f}", file=sys.stderr)
        for backups in range(6):
            warm, measured = (2, 6) if a.quick else (3, 15)
            seconds, steps, wall = steady(a.troupe, tmp, 50, "SYNC", warm, measured, backups)
            fig8.append({"backups": backups, "step_s": seconds / steps, "wall_s": wall})
            print(f"figure 8, {backups} backups: {seconds / steps:.3f} s per step", file=sys.stderr)
    t0 = fig8[0]["step_s"]
    for r in fig8:
        r["normalized_speedup"] = t0 / r["step_s"] * 50 / (50 + r["backups"])
    result = {"model": MODEL, "batch": BATCH, "figure7": fig7, "figure8": fig8,
              "paper_figure7": PAPER_FIGURE7, "paper_figure8": PAPER_FIGURE8}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sim_figures.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["Figure 7 (16 PS tasks, batch 32 per worker):", "",
             "| workers | async images/s | sync images/s | sync / async | sync step s | wall s (4 runs) |",
             "|---|---|---|---|---|---|"]
    for r in fig7:
        lines.append(f"| {r['workers']} | {r['async_images_per_s']:.0f} | {r['sync_images_per_s']:.0f} | "
                     f"{r['sync_images_per_s'] / r['async_images_per_s']:.2f} | {r['sync_step_s']:.2f} | "
                     f"{r['async_wall_s'] + r['sync_wall_s']:.0f} |")
    lines += ["", f"The paper at 200 workers: async ~{PAPER_FIGURE7['async_200']}, sync ~{PAPER_FIGURE7['sync_200']} "
              "images/s (transcribed by a secondary analysis).", "",
              "Figure 8 (SYNC, 50 workers aggregated per step):", "",
              "| backups | step s (mean) | normalized speedup |", "|---|---|---|"]
    for r in fig8:
        lines.append(f"| {r['backups']} | {r['step_s']:.3f} | {r['normalized_speedup']:.3f} |")
    best_step = min(fig8, key=lambda r: r["step_s"])
    best_speedup = max(fig8, key=lambda r: r["normalized_speedup"])
    lines += ["", f"Shortest step with {best_step['backups']} backups ({best_step['step_s']:.2f} s); best normalized "
              f"speedup {best_speedup['normalized_speedup']:.3f} with {best_speedup['backups']}. The paper: "
              f"{PAPER_FIGURE8['best_median_backups']} backups for the shortest median step "
              f"({PAPER_FIGURE8['best_median_s']} s), {PAPER_FIGURE8['best_speedup']:.3f} with "
              f"{PAPER_FIGURE8['best_speedup_backups']}."]
    with open(os.path.join(a.out, "sim_figures.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sim_figures: no matplotlib: no plots", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    w = [r["workers"] for r in fig7]
    ax.plot(w, [r["async_images_per_s"] for r in fig7], "o-", label="troupe simulated, async")
    ax.plot(w, [r["sync_images_per_s"] for r in fig7], "s-", label="troupe simulated, sync")
    ax.plot([200], [PAPER_FIGURE7["async_200"]], "o", mfc="none", ms=10, label="paper, async")
    ax.plot([200], [PAPER_FIGURE7["sync_200"]], "s", mfc="none", ms=10, label="paper, sync")
    ax.set_xlabel("workers")
    ax.set_ylabel("images/s")
    ax.set_title("Figure 7 in simulation (Inception-v3-sized model)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "figure7_sim.png"), dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    b = [r["backups"] for r in fig8]
    ax.plot(b, [r["normalized_speedup"] for r in fig8], "o-", label="troupe simulated")
    ax.plot([PAPER_FIGURE8["best_speedup_backups"]], [PAPER_FIGURE8["best_speedup"]], "*", ms=12, label="paper's best")
    ax.set_xlabel("backup workers")
    ax.set_ylabel("normalized speedup")
    ax.set_title("Figure 8 in simulation (50 workers aggregated)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "figure8_sim.png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()

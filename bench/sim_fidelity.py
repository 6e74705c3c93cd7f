#!/usr/bin/env python3
"""How close mode SIMULATED's step times are to the measured ones (issue 17, doc/simulation.md).

    bench/sim_fidelity.py [--troupe build/troupe] [--out DIR] [--workers 1,2,4,8]
                          [--models mlp,lenet] [--modes IN_PROCESS,REAL] [--rounds 3] [--quick]

For each model and round: `troupe calibrate` measures its kernels (2 workers and one PS
task; in the steady state, each kernel also alone with one worker, and the CPU per step
of the same training untraced, which the table's kernels and runtime add up to) and, the
scenario being in mode REAL, what transfers between two server processes cost on this
machine (the table's loopback). Then for each number of workers the same training runs
for real and in simulation with that round's table (the machine's speed drifts by several
percent within minutes: a table from one slow moment would shift every row), with
machine_cores and intra_op_threads set to this machine's cores (the tasks of both real
modes share them), and the mode's network: none for IN_PROCESS (tensors are shared:
latency 0, the largest bandwidth), the measured loopback for REAL (latency, each
transfer's turn, bandwidth, the CPU of its copies and of each message, that one as
calibrate measured it in situ from the scenario trained both ways, the control plane's
CPU per task and step; the latency as the scenario's links took in situ and the
senders' waits before their first writes, both as waits for a busy core, and the
crowding of processes from the scenario with three times its workers); IN_PROCESS also
has the crowding of tasks in one process that calibrate measured the same way
(task_cpu_us). A row compares
the medians over the rounds. Nothing is fitted to the runs
compared. The step time is the steady state's: a run of warm + measured steps, its
summary's steady_seconds over steady_steps (from a quarter of the steps to the end:
start-up, connections and first-step preparations left out; with 9 processes on 2 cores
these vary by a second between runs, so two runs differenced do not cancel them).
Writes sim_fidelity.json and
sim_fidelity.md (the table) into --out; bench/run.sh runs it and report.md shows it.
Needs only troupe and the dataset (no PyPI package).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from scenario_runs import arguments, run

MODELS = {
    # model section, optimizer, measured steps, batch
    "mlp": ('model { name: "mlp" hidden_units: [512, 512] }', 'optimizer { name: "momentum" learning_rate: 0.01 momentum: 0.9 }', 1200, 64),
    "lenet": ('model { name: "lenet" }', 'optimizer { name: "adam" learning_rate: 0.001 }', 1000, 64),
}
WARM_STEPS = 200  # added to the measured ones: the steady state starts at a quarter of all


def network(mode, table):
    """The simulation's network section for `mode`: IN_PROCESS shares tensors; REAL is the
    loopback `troupe calibrate` measured (the table's)."""
    if mode == "IN_PROCESS":
        return "network { latency_us: 0 bandwidth_gbps: 10000 }"
    with open(table) as f:
        lb = json.load(f)["loopback"]
    fields = {k: lb.get(k, 0) for k in ("latency_us", "transfer_us", "bandwidth_gbps", "copy_gbps",
                                        "message_cpu_us", "step_cpu_us", "process_cpu_us", "busy_wait_us",
                                        "send_busy_wait_us")}
    if fields["busy_wait_us"] > 0:  # the in-situ latency's excess as waiting for a busy core
        fields["latency_us"] = lb.get("latency_quiet_us", fields["latency_us"])
    return ("network {{ latency_us: {latency_us:.1f} transfer_us: {transfer_us:.2f} bandwidth_gbps: {bandwidth_gbps:.2f} "
            "copy_gbps: {copy_gbps:.3f} message_cpu_us: {message_cpu_us:.2f} step_cpu_us: {step_cpu_us:.1f} "
            "process_cpu_us: {process_cpu_us:.2f} busy_wait_us: {busy_wait_us:.1f} "
            "send_busy_wait_us: {send_busy_wait_us:.1f} }}").format(**fields)


def crowding(mode, table):
    """The compute section's crowding of tasks in one process for `mode`: IN_PROCESS has the
    table's task_cpu_us (REAL's process_cpu_us, measured with more processes, holds it)."""
    if mode != "IN_PROCESS":
        return ""
    with open(table) as f:
        return "task_cpu_us: {:.2f}".format(json.load(f).get("task_cpu_us", 0))


def scenario(model, workers, mode, steps, simulation=""):
    model_text, optimizer, _, batch = MODELS[model]
    return f"""
name: "fidelity_{model}_{workers}"
cluster {{ mode: {mode} job {{ name: "ps" tasks: 1 }} job {{ name: "worker" tasks: {workers} }} }}
{model_text}
dataset {{ name: "fashion-mnist" shuffle: true reader_threads: 1 }}
training {{ {optimizer} steps: {steps} batch_size: {batch} seed: 20160101 replication: ASYNC eval_every: 0 }}
report {{ progress: OFF }}
{simulation}
"""


def calibrate(troupe, model, steps, mode, tmp, table):
    """`troupe calibrate` of the model's scenario with 2 workers and one PS task in `mode`
    (REAL: the loopback and the in-situ costs too) into `table`; prints what it measured."""
    path = os.path.join(tmp, model + "-calibrate.pbtxt")
    with open(path, "w") as f:
        f.write(scenario(model, 2, mode, steps))
    done = subprocess.run([troupe, "calibrate", path, "--steps", str(steps), "--out", table],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"sim_fidelity: troupe calibrate failed:\n{done.stdout}\n{done.stderr}")
    for line in done.stdout.splitlines():  # what it measured
        if line.startswith("calibrate: ") and any(c.isdigit() for c in line):
            print(f"{model} {line}", file=sys.stderr)


def step_ms(troupe, text_for, steps, tmp, name):
    """Training milliseconds per global step in the steady state of one run of `steps`
    steps (its summary's steady_seconds over steady_steps)."""
    summary, _, _ = run(troupe, text_for(steps), tmp, name, "sim_fidelity")
    if int(summary.get("steady_steps", 0)) <= 0:
        sys.exit(f"sim_fidelity: {name}: no steady state in the summary: {summary}")
    return 1000.0 * summary["steady_seconds"] / int(summary["steady_steps"])


def main():
    ap = arguments(__doc__, "one round, a third of the steps")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--models", default="mlp,lenet")
    ap.add_argument("--modes", default="IN_PROCESS,REAL")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    rounds = 1 if a.quick else a.rounds
    rows = []
    networks = {}  # the REAL network each model's simulation had
    with tempfile.TemporaryDirectory(prefix="troupe-fidelity-") as tmp:
        for model in a.models.split(","):
            steps = MODELS[model][2] // (3 if a.quick else 1)
            warm = WARM_STEPS // (3 if a.quick else 1)
            configurations = [(int(w), mode) for w in a.workers.split(",") for mode in a.modes.split(",")]
            measured = {c: [] for c in configurations}
            simulated = {c: [] for c in configurations}
            # Each round calibrates again, then measures and simulates every configuration
            # with that round's table: the machine's speed drifts by several percent within
            # minutes, and a table measured in one slow moment would shift every row.
            for r in range(rounds):
                table = os.path.join(tmp, f"{model}-calib-{r}.json")
                calibrate(a.troupe, model, steps, "REAL" if "REAL" in a.modes.split(",") else "IN_PROCESS", tmp, table)
                if "REAL" in a.modes.split(","):
                    networks.setdefault(model, []).append(network("REAL", table))
                for workers, mode in configurations:
                    sim = (f'simulation {{ seed: 1 {network(mode, table)} compute {{ table: "{table}" '
                           f'machine_cores: {cores} intra_op_threads: {cores} {crowding(mode, table)} }} }}')
                    simulated[(workers, mode)].append(
                        step_ms(a.troupe, lambda n: scenario(model, workers, "SIMULATED", n, sim), warm + steps, tmp,
                                f"{model}-{workers}-{mode}-sim-{r}"))
                    measured[(workers, mode)].append(
                        step_ms(a.troupe, lambda n: scenario(model, workers, mode, n), warm + steps, tmp,
                                f"{model}-{workers}-{mode}-{r}"))
                    print(f"{model} x{workers} {mode} round {r + 1}: measured {measured[(workers, mode)][-1]:.3f} "
                          f"ms/step, simulated {simulated[(workers, mode)][-1]:.3f}", file=sys.stderr)
            for workers, mode in configurations:
                m = statistics.median(measured[(workers, mode)])
                s = statistics.median(simulated[(workers, mode)])
                error = 100.0 * (s - m) / m
                rows.append({"model": model, "workers": workers, "mode": mode, "warm_steps": warm, "steps": steps,
                             "measured_ms_per_step": m, "simulated_ms_per_step": s, "error_percent": error,
                             "measured_rounds": measured[(workers, mode)],
                             "simulated_rounds": simulated[(workers, mode)]})
                print(f"{model} x{workers} {mode}: measured {m:.3f} ms/step, simulated {s:.3f} ({error:+.1f}%)",
                      file=sys.stderr)
    result = {"cores": cores, "rounds": rounds, "rows": rows, "networks": networks}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sim_fidelity.json"), "w") as f:
        json.dump(result, f, indent=1)
    # How far the measured figure moved between rounds: the machine's own drift, beside
    # which a row's error says little (a row whose measurements moved by a third).
    def spread(r):
        m = r["measured_rounds"]
        return 100.0 * (max(m) - min(m)) / min(m) if m and min(m) > 0 else 0.0

    lines = ["| model | workers | compared with | measured ms/step | simulated ms/step | error | measured rounds |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        rounds_text = " / ".join(f"{m:.2f}" for m in r["measured_rounds"])
        lines.append(f"| {r['model']} | {r['workers']} | {r['mode']} | {r['measured_ms_per_step']:.3f} | "
                     f"{r['simulated_ms_per_step']:.3f} | {r['error_percent']:+.1f}% | {rounds_text} ({spread(r):.0f}%) |")
    errors = [abs(r["error_percent"]) for r in rows]
    if errors:
        lines.append("")
        lines.append(f"Mean absolute error {statistics.mean(errors):.1f}%, largest {max(errors):.1f}% "
                     f"(medians of {rounds} round(s), each calibrated again; {cores} cores).")
        drifting = [r for r in rows if spread(r) > 10]
        if rounds > 1 and drifting:
            lines.append(f"{len(drifting)} of {len(rows)} rows' measured figures moved by more than 10% between "
                         f"rounds (the last column: each round's, and max - min over min): this machine's drift, "
                         f"which their errors include.")
    for model, texts in networks.items():
        lines.append("")
        lines.append(f"REAL's network for {model}, as `troupe calibrate` measured it in each round:")
        lines.extend(f"`{text}`" for text in texts)
    with open(os.path.join(a.out, "sim_fidelity.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

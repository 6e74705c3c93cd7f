#!/usr/bin/env python3
"""How close mode SIMULATED's step times are to the measured ones (issue 17, doc/simulation.md).

    bench/sim_fidelity.py [--troupe build/troupe] [--out DIR] [--workers 1,2,4,8]
                          [--models mlp,lenet] [--modes IN_PROCESS,REAL] [--rounds 3] [--quick]

For each model: `troupe calibrate` measures its kernels and the runtime's cost per
kernel once (IN_PROCESS, 2 workers, one PS task); then for each number of workers the
same training runs for real (each mode, the median of --rounds runs) and in simulation,
with that one table, machine_cores and intra_op_threads set to this machine's cores (the
tasks of both real modes share them), and the mode's network: none for IN_PROCESS
(tensors are shared: latency 0, the largest bandwidth), loopback for REAL (latency 100 us;
each transfer's bytes copied by the machine's cores, sending and receiving, at 3 GB/s, and
100 us of a core at each end per transfer: the pair that fitted best, once, over the MLP
and LeNet with 2 and 8 workers, used for every REAL row; the wire itself not a limit).
The step time is the
training time (the summary's training_seconds) over the global steps. Writes
sim_fidelity.json and sim_fidelity.md (the table) into --out; bench/run.sh runs it and
report.md shows it. Needs only troupe and the dataset (no PyPI package).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from scenario_runs import arguments, run

MODELS = {
    # model section, optimizer, steps, batch
    "mlp": ('model { name: "mlp" hidden_units: [512, 512] }', 'optimizer { name: "momentum" learning_rate: 0.01 momentum: 0.9 }', 600, 64),
    "lenet": ('model { name: "lenet" }', 'optimizer { name: "adam" learning_rate: 0.001 }', 500, 64),
}

# The network each real mode has, as the simulation models it.
NETWORKS = {
    "IN_PROCESS": "network { latency_us: 0 bandwidth_gbps: 10000 }",
    "REAL": "network { latency_us: 100 bandwidth_gbps: 1000 copy_gbps: 3 message_cpu_us: 100 }",
}


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


def step_ms(troupe, text, tmp, name):
    """Training milliseconds per global step of a run, and its summary."""
    s, _, _ = run(troupe, text, tmp, name, "sim_fidelity")
    return 1000.0 * s["training_seconds"] / int(s["global_step"]), s


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
    with tempfile.TemporaryDirectory(prefix="troupe-fidelity-") as tmp:
        for model in a.models.split(","):
            steps = MODELS[model][2] // (3 if a.quick else 1)
            table = os.path.join(tmp, model + "-calib.json")
            text = scenario(model, 2, "IN_PROCESS", steps)
            path = os.path.join(tmp, model + "-calibrate.pbtxt")
            with open(path, "w") as f:
                f.write(text)
            done = subprocess.run([a.troupe, "calibrate", path, "--steps", str(steps), "--out", table],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"sim_fidelity: troupe calibrate failed:\n{done.stdout}\n{done.stderr}")
            for workers in [int(w) for w in a.workers.split(",")]:
                for mode in a.modes.split(","):
                    sim = (f'simulation {{ seed: 1 {NETWORKS[mode]} compute {{ table: "{table}" machine_cores: {cores} '
                           f'intra_op_threads: {cores} }} }}')
                    simulated, s = step_ms(a.troupe, scenario(model, workers, "SIMULATED", steps, sim), tmp,
                                       f"{model}-{workers}-{mode}-sim")
                    measured = statistics.median(
                        step_ms(a.troupe, scenario(model, workers, mode, steps), tmp, f"{model}-{workers}-{mode}-{r}")[0]
                        for r in range(rounds))
                    error = 100.0 * (simulated - measured) / measured
                    rows.append({"model": model, "workers": workers, "mode": mode, "steps": steps,
                                 "measured_ms_per_step": measured, "simulated_ms_per_step": simulated,
                                 "error_percent": error, "simulated_wall_seconds": s["wall_seconds"],
                                 "simulated_virtual_seconds": s["virtual_seconds"]})
                    print(f"{model} x{workers} {mode}: measured {measured:.3f} ms/step, simulated {simulated:.3f} "
                          f"({error:+.1f}%)", file=sys.stderr)
    result = {"cores": cores, "rounds": rounds, "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sim_fidelity.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["| model | workers | compared with | measured ms/step | simulated ms/step | error |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['workers']} | {r['mode']} | {r['measured_ms_per_step']:.3f} | "
                     f"{r['simulated_ms_per_step']:.3f} | {r['error_percent']:+.1f}% |")
    errors = [abs(r["error_percent"]) for r in rows]
    if errors:
        lines.append("")
        lines.append(f"Mean absolute error {statistics.mean(errors):.1f}%, largest {max(errors):.1f}% "
                     f"({rounds} round(s) of each measured run, median; {cores} cores).")
    with open(os.path.join(a.out, "sim_fidelity.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How fast mode SIMULATED runs a large cluster (issue 17, doc/simulation.md "Shape-only").

    bench/sim_scale.py [--troupe build/troupe] [--out DIR] [--quick]

Runs scenarios/sim_scale.pbtxt (200 workers, 16 PS tasks, a 30 M-parameter MLP,
asynchronous, shape-only) as it is and with 10x the steps, and for comparison the default
MLP (784-512-512-10) on the same cluster with its kernels run (execute_kernels: true)
and without. For each: the global steps reached, the wall time of the whole run (set-up
included), the virtual time of its training and of the whole run, their ratio (virtual
seconds per wall second) and the process's peak memory. Issue 17's target: the first row
in <= 60 s of wall time on a 2-core machine. Writes sim_scale.json and sim_scale.md (the
table) into --out; bench/run.sh runs it and report.md shows it. Needs only troupe and the
dataset (no PyPI package).
"""
import json
import os
import re
import sys
import tempfile

from scenario_runs import ROOT, arguments, run
SMALL_MLP = 'model { name: "mlp" hidden_units: [512, 512] }'


def variant(text, steps=None, model=None, execute_kernels=None):
    if steps is not None:
        text = re.sub(r"steps: \d+\n", f"steps: {steps}\n", text, count=1)
    if model is not None:
        text = re.sub(r"model \{[^}]*\}", model, text, count=1)
    if execute_kernels is not None:
        text = text.replace("execute_kernels: false", f"execute_kernels: {'true' if execute_kernels else 'false'}")
    return text.replace("progress: PLAIN", "progress: OFF")


def measure(troupe, text, tmp, name):
    s, wall, rss = run(troupe, text, tmp, name, "sim_scale")
    return {"name": name, "global_step": int(s["global_step"]), "wall_seconds": wall,
            "training_virtual_seconds": s["training_seconds"], "virtual_seconds": s["virtual_seconds"],
            "virtual_per_wall": s["virtual_seconds"] / wall, "peak_rss_mb": rss,
            "shape_only": s.get("shape_only", False)}


def main():
    a = arguments(__doc__, "the target row and the comparison, not the 10x one").parse_args()
    with open(os.path.join(ROOT, "scenarios", "sim_scale.pbtxt")) as f:
        base = f.read()
    configs = [("sim_scale (30 M parameters, shape-only), 1000 steps", variant(base))]
    if not a.quick:
        configs.append(("sim_scale, 10000 steps", variant(base, steps=10000)))
    configs += [
        ("MLP 512-512, kernels run, 1000 steps", variant(base, model=SMALL_MLP, execute_kernels=True)),
        ("MLP 512-512, shape-only, 1000 steps", variant(base, model=SMALL_MLP)),
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="troupe-scale-") as tmp:
        for i, (label, text) in enumerate(configs):
            r = measure(a.troupe, text, tmp, f"scale{i}")
            r["label"] = label
            rows.append(r)
            print(f"{label}: {r['global_step']} steps, {r['wall_seconds']:.2f} s wall, "
                  f"{r['virtual_seconds']:.3f} s virtual", file=sys.stderr)
    result = {"cores": os.cpu_count(), "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sim_scale.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["| 200 workers, 16 PS, ASYNC | global steps | wall s (whole run) | virtual s (training) | "
             "virtual s (whole run) | virtual / wall | peak memory |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['global_step']} | {r['wall_seconds']:.2f} | "
                     f"{r['training_virtual_seconds']:.3f} | {r['virtual_seconds']:.3f} | "
                     f"{r['virtual_per_wall']:.3f} | {r['peak_rss_mb']:.0f} MB |")
    target = rows[0]
    lines += ["", f"Target (issue 17): the first row in <= 60 s wall: {target['wall_seconds']:.1f} s "
              f"({'met' if target['wall_seconds'] <= 60 else 'NOT met'}; {os.cpu_count()} cores)."]
    with open(os.path.join(a.out, "sim_scale.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

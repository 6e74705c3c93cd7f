"""What the simulation benchmarks (sim_fidelity.py, sim_scale.py, sim_figures.py) share:
their command line's common part, one `troupe run` of a scenario text, and a steady
state measured by differencing two runs."""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def arguments(doc, quick_help):
    """A parser with --troupe, --out and --quick; the caller adds its own."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--troupe", default=os.path.join(ROOT, "build", "troupe"))
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    return ap


def run(troupe, text, tmp, name, program):
    """Writes `text` as tmp/name.pbtxt and runs it: (its summary, wall seconds, peak RSS in
    MB). A failed run ends the program with its output."""
    path = os.path.join(tmp, name + ".pbtxt")
    summary = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        f.write(text)
    start = time.monotonic()
    child = subprocess.Popen([troupe, "run", path, "--summary", summary], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    if status != 0:
        sys.exit(f"{program}: troupe run {path} failed:\n{output[-6000:]}")
    with open(summary) as f:
        return json.load(f), wall, usage.ru_maxrss / 1024.0


def steady_state(troupe, tmp, text_for, warm, measured, name, program):
    """Training seconds and global steps of `measured` steps after `warm` ones: a run of
    warm + measured steps less a run of warm (the start-up, first-step preparations and
    warm-ups of both cancel out), and the two runs' wall seconds. `text_for(steps)` is
    the scenario text that trains that many steps."""
    first, wall0, _ = run(troupe, text_for(warm), tmp, name + "-warm", program)
    both, wall1, _ = run(troupe, text_for(warm + measured), tmp, name + "-all", program)
    return (both["training_seconds"] - first["training_seconds"],
            int(both["global_step"]) - int(first["global_step"]), wall0 + wall1)

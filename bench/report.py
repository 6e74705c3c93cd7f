#!/usr/bin/python3
"""Builds report.md and PNG plots from one run of bench/run.sh.

  python3 bench/report.py --results bench/results/<date>

Reads what run.sh left in the results folder (every file is optional; a missing one
leaves its section out and says so):

  machine.json                 machine description, settings, mode and rounds
  <name>.troupe.r<k>.json      Google Benchmark JSON of a troupe program, round k
  <name>.peer.r<k>.json        a PyTorch peer's JSON (bench/peers/peer_common.py), round k
  fma_peak.r<k>.json           bench_fma_peak
  figure6.json                 bench_figure6
  figure6_real.json            bench_figure6 --real (every task a process)
  tf_figure6.json              tf_distributed_peer.py --figure6 (TensorFlow's gRPC runtime)
  figure8.json                 bench_figure8

Every figure is the median over the rounds of that run; nothing here is a stored result.
Ratios are troupe's throughput over the peer's (above 1: troupe is faster), each side at
its better thread count. Writes report.md, ratios.png, figure6.png and figure8.png (the plots need
matplotlib: Debian's python3-matplotlib).
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

# The TensorFlow paper's figures (Abadi et al., OSDI 2016), for comparison only.
PAPER_NULL_OPS_PER_S = 2_000_000
# Figure 8 (section 6.3; 50 workers, Inception-v3), as transcribed by a secondary analysis.
PAPER_FIGURE8 = {"best_median_backups": 4, "best_median_s": 1.93, "best_speedup_backups": 3, "best_speedup": 1.095}
PAPER_FIGURE6 = "null step median 1.8 ms with 1 worker, 8.8 ms with 100; sparse (32 rows of a 1 GB or 16 GB embedding) 5-20 ms"

# Peers beside PyTorch 1.13 (bench/peers/, from PyPI in git-ignored virtual environments):
# <stem>.tf.r<k>.json (tf_peer.py, TensorFlow in graph mode) and <stem>.torch2.r<k>.json
# (the PyTorch peers run with the newest PyTorch).
OTHER_PEERS = {"tf": "TensorFlow", "torch2": "PyTorch 2"}
PEER_NAMES = {**OTHER_PEERS, "peer": "PyTorch 1.13"}

MODELS = [
    # (report name, troupe program, benchmark prefix, peer file stem, unit)
    ("MLP 784-512-512-10, batch 64", "mlp", "mlp_step", "mlp", "examples/s"),
    ("LeNet, batch 64", "lenet", "lenet_step", "lenet", "images/s"),
    ("AlexNet, batch 16, 224x224x3", "alexnet", "alexnet_step", "alexnet", "images/s"),
    ("LSTM LM, full softmax", "lstm", "lstm_step/full", "lstm_full", "words/s"),
    ("LSTM LM, sampled softmax (512)", "lstm", "lstm_step/sampled", "lstm_sampled", "words/s"),
]


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"report: cannot read {path}: {e}", file=sys.stderr)
        return None


def rounds_of(results, pattern):
    """The parsed files matching <results>/<pattern> (one per round), in round order."""
    files = sorted(glob.glob(os.path.join(results, pattern)),
                   key=lambda p: int(re.search(r"\.r(\d+)\.json$", p).group(1)) if re.search(r"\.r(\d+)\.json$", p) else 0)
    return [d for d in (load_json(p) for p in files) if d is not None]


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def to_ms(bench):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[bench.get("time_unit", "ns")]
    return bench["real_time"] * scale


class gbench_runs:
    """Google Benchmark results of one program over rounds: name -> list of entries."""

    def __init__(self, docs):
        self.by_name = {}
        self.errors = {}
        self.context = docs[0].get("context", {}) if docs else {}
        for doc in docs:
            for b in doc.get("benchmarks", []):
                if b.get("run_type", "iteration") != "iteration":
                    continue
                if b.get("error_occurred"):
                    self.errors[b["name"]] = b.get("error_message", "error")
                    continue
                self.by_name.setdefault(b["name"], []).append(b)

    def names(self):
        return list(self.by_name)

    def ms(self, name):
        return median([to_ms(b) for b in self.by_name.get(name, [])])

    def counter(self, name, key):
        return median([b.get(key) for b in self.by_name.get(name, [])])


def fmt(value, digits=3):
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def ratio_text(r):
    return "n/a" if r is None else f"{r:.2f}x"


def section_machine(m):
    lines = ["## Machine and settings", ""]
    if not m:
        return lines + ["(machine.json missing)", ""]
    rows = [
        ("date", m.get("date")), ("git commit", m.get("commit")), ("mode", m.get("mode")),
        ("rounds (troupe and peer alternating)", m.get("rounds")),
        ("CPU", m.get("cpu_model")), ("cores (nproc)", m.get("nproc")),
        ("memory", m.get("memory")), ("vector extensions", m.get("vector_flags")),
        ("instruction sets used", m.get("isa_cap") or "all the processor has"),
        ("OPENBLAS_CORETYPE", m.get("openblas_coretype") or "(unset)"),
        ("OPENBLAS_L2_SIZE", m.get("openblas_l2_size") or "(unset)"),
        ("compiler", m.get("compiler")), ("build type", m.get("build_type")),
        ("PyTorch (peers)", m.get("torch") or "not installed"),
        ("peer allocator", m.get("peer_preload") or "glibc malloc"),
        ("load average before / after", f"{m.get('load_before', '?')} / {m.get('load_after', '?')}"),
    ]
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "Troupe and its peers run under the same OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, "
              "as set in the environment (changed by the benchmarks only under --avx2, for all "
              "alike). The machine may be "
              "shared with other work: the load average above says how busy it was, and ratios "
              "measured in one run are steadier than absolute figures.", ""]
    if m.get("lscpu"):
        lines += ["<details><summary>lscpu and free</summary>", "", "```", m["lscpu"].rstrip(),
                  "", m.get("free", "").rstrip(), "```", "", "</details>", ""]
    return lines


def section_ceilings(results):
    lines = ["## Machine ceilings: FMA peak and GEMM", ""]
    fma = rounds_of(results, "fma_peak.r*.json")
    peak = {}
    if fma:
        for t in sorted({r["threads"] for d in fma for r in d["results"]}):
            peak[t] = median([r["gflops"] for d in fma for r in d["results"] if r["threads"] == t])
        bits = fma[0].get("vector_bits")
        lines += [f"fp32 FMA peak (bench_fma_peak, {bits}-bit vectors): " +
                  ", ".join(f"{fmt(g)} GFLOP/s on {t} thread(s)" for t, g in peak.items()) + ".", ""]
    else:
        lines += ["(bench_fma_peak did not run)", ""]
    mm = gbench_runs(rounds_of(results, "matmul.troupe.r*.json"))
    if mm.names():
        lines += ["| GEMM N x N float32 | threads | GFLOP/s | % of FMA peak |", "|---|---|---|---|"]
        for name in mm.names():
            m = re.match(r"(\w+)/N:(\d+)/threads:(\d+)", name)
            if not m:
                continue
            what, n, t = m.group(1), m.group(2), int(m.group(3))
            g = mm.counter(name, "GFLOP/s")
            label = "OpenBLAS cblas_sgemm" if what == "cblas_sgemm" else "troupe MatMul kernel"
            pct = f"{100 * g / peak[t]:.0f}%" if g and peak.get(t) else "n/a"
            lines.append(f"| {label}, N = {n} | {t} | {fmt(g)} | {pct} |")
        lines.append("")
    else:
        lines += ["(bench_matmul did not run)", ""]
    return lines


def model_rows(results):
    """One dict per model: troupe and peer figures at each thread count and at their best."""
    rows = []
    programs = {}
    for title, program, prefix, peer_stem, unit in MODELS:
        if program not in programs:
            programs[program] = gbench_runs(rounds_of(results, f"{program}.troupe.r*.json"))
        runs = programs[program]
        troupe = {}
        error = None
        for name in runs.names() + list(runs.errors):
            if not name.startswith(prefix + "/"):
                continue
            m = re.search(r"threads:(\d+)", name)
            if not m:
                continue
            if name in runs.errors:
                error = runs.errors[name]
                continue
            t = int(m.group(1))
            troupe[t] = {"ms": runs.ms(name), "items_per_s": runs.counter(name, "items_per_second")}
        peer_docs = rounds_of(results, f"{peer_stem}.peer.r*.json")
        peer, best_p = peer_figures(peer_docs)
        best_t = min(troupe, key=lambda t: troupe[t]["ms"]) if troupe else None
        ratio = None
        if best_t is not None and best_p is not None:
            ratio = troupe[best_t]["items_per_s"] / peer[best_p]["items_per_s"]
        others = {}
        for kind in OTHER_PEERS:
            figures, best = peer_figures(rounds_of(results, f"{peer_stem}.{kind}.r*.json"))
            if best is not None:
                others[kind] = {"threads": best, **figures[best],
                                "ratio": (troupe[best_t]["items_per_s"] / figures[best]["items_per_s"]
                                          if best_t is not None else None)}
        # Every peer's best: PyTorch 1.13 ("peer") and the OTHER_PEERS; the fastest of them.
        peers = dict(others)
        if best_p is not None:
            peers["peer"] = {"threads": best_p, **peer[best_p], "ratio": ratio}
        fastest = max(peers, key=lambda k: peers[k]["items_per_s"]) if peers else None
        rows.append({"title": title, "unit": unit, "troupe": troupe, "peer": peer,
                     "best_troupe": best_t, "best_peer": best_p, "ratio": ratio, "error": error,
                     "peer_tcmalloc": all(d.get("tcmalloc") for d in peer_docs) if peer_docs else None,
                     "others": others, "peers": peers, "fastest": fastest,
                     "ratio_fastest": peers[fastest]["ratio"] if fastest else None})
    return rows


def peer_figures(docs):
    """A peer's median ms per step and throughput at each thread count over rounds, and
    its best thread count (None when it did not run)."""
    figures = {}
    for t in sorted({str(r["threads"]) for d in docs for r in d["results"]}):
        per = [r for d in docs for r in d["results"] if str(r["threads"]) == t]
        figures[t] = {"ms": median([r["ms_per_step"] for r in per]),
                      "items_per_s": median([r["items_per_s"] for r in per])}
    best = min(figures, key=lambda t: figures[t]["ms"]) if figures else None
    return {int(t) if t.isdigit() else t: v for t, v in figures.items()}, (int(best) if best and best.isdigit() else best)


def section_models(rows, results):
    versions = {"peer": "1.13"}
    for kind in OTHER_PEERS:
        for d in rounds_of(results, f"*.{kind}.r*.json"):
            versions[kind] = d.get("tensorflow") or d.get("torch")
    systems = [k for k in ("tf", "torch2", "peer") if any(k in r["peers"] for r in rows)]
    lines = ["## Training steps: troupe against TensorFlow, PyTorch 2 and PyTorch 1.13", "",
             "Each system at its best: troupe and the PyTorch peers at 1 and 2 threads; TensorFlow "
             f"{versions.get('tf', '')} in graph mode (`tf.compat.v1.Session`, oneDNN on as it ships) with intra-op "
             f"and inter-op threads at 1 and 2 (`intra/inter`); PyTorch {versions.get('torch2', '2')} also compiled "
             "(`torch.compile`) and, for the convnets, channels-last, the fastest kept and named (`2+compile`). "
             "ms per step (threads); the last columns: troupe's throughput over the fastest peer's (above 1: troupe "
             "is faster) and which peer that is.", "",
             "| model | troupe | " + " | ".join(PEER_NAMES[k] for k in systems) + " | troupe/fastest peer | fastest |",
             "|---|---|" + "---|" * len(systems) + "---|---|"]
    for r in rows:
        t = r["best_troupe"]
        cells = [f"{fmt(r['troupe'][t]['ms'])} ({t})" if t is not None else ("error" if r["error"] else "not run")]
        for k in systems:
            o = r["peers"].get(k)
            cells.append(f"{fmt(o['ms'])} ({o['threads']})" if o else "not run")
        cells += [ratio_text(r["ratio_fastest"]), PEER_NAMES.get(r["fastest"], "") if r["fastest"] else ""]
        lines.append(f"| {r['title']} | " + " | ".join(cells) + " |")
    lines += ["", "Every thread count measured (ms per step):", "",
              "| model | troupe 1 thr | troupe 2 thr | peer 1 thr | peer 2 thr |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [fmt(r[side].get(t, {}).get("ms")) for side in ("troupe", "peer") for t in (1, 2)]
        lines.append(f"| {r['title']} | " + " | ".join(cells) + " |")
    lines.append("")
    errors = [r for r in rows if r["error"]]
    for r in errors:
        lines.append(f"- troupe {r['title']}: {r['error']}")
    if any(r["peer_tcmalloc"] is False for r in rows):
        lines.append("- Some peer runs did NOT have tcmalloc preloaded: their figures are not the peer at its best.")
    if errors or any(r["peer_tcmalloc"] is False for r in rows):
        lines.append("")
    return lines


def section_conv(results):
    troupe = gbench_runs(rounds_of(results, "conv.troupe.r*.json"))
    peer_docs = rounds_of(results, "conv.peer.r*.json")
    if not troupe.names() and not peer_docs:
        return []
    lines = ["## Convolution layers (1 thread)", "",
             "troupe on NHWC images (TensorFlow's default) and on NCHW (PyTorch's layout, which the peer uses); "
             "troupe/peer above 1 means troupe is faster.", "",
             "| layer | op | troupe NHWC ms | troupe NCHW ms | im2col+sgemm floor ms | peer ms | NHWC troupe/peer "
             "| NCHW troupe/peer |", "|---|---|---|---|---|---|---|---|"]
    ops = {"Conv2D": "conv2d", "Conv2DBackpropInput": "backprop_input",
           "Conv2DBackpropFilter": "backprop_filter"}
    peer = {}
    for d in peer_docs:
        for r in d.get("results", []):
            peer.setdefault((r["layer"], r["op"]), []).append(r["ms"])
    layers = []
    for name in troupe.names():
        m = re.match(r"troupe_(\w+)/(\w+)/", name)
        if m and m.group(2) not in layers:
            layers.append(m.group(2))
    for layer in layers:
        floor = next((troupe.ms(n) for n in troupe.names() if n.startswith(f"sgemm_im2col_product/{layer}/")), None)
        for op, peer_op in ops.items():
            name = next((n for n in troupe.names() if n.startswith(f"troupe_{op}/{layer}/")), None)
            nchw_name = next((n for n in troupe.names() if n.startswith(f"troupe_NCHW_{op}/{layer}/")), None)
            t = troupe.ms(name) if name else None
            t_nchw = troupe.ms(nchw_name) if nchw_name else None
            p = median(peer.get((layer, peer_op), []))
            ratio = p / t if t and p else None
            ratio_nchw = p / t_nchw if t_nchw and p else None
            lines.append(f"| {layer} | {op} | {fmt(t)} | {fmt(t_nchw)} | {fmt(floor)} | {fmt(p)} | "
                         f"{ratio_text(ratio)} | {ratio_text(ratio_nchw)} |")
    lines.append("")
    return lines


def section_tf_runtime(results):
    """TensorFlow's executor and distributed runtime beside troupe's."""
    lines = ["## TensorFlow's executor and distributed runtime beside troupe's", ""]
    null_docs = rounds_of(results, "null_ops.tf.r*.json")
    if null_docs:
        ex = gbench_runs(rounds_of(results, "executor.troupe.r*.json"))
        troupe_ops = {}
        for name in ex.names():
            for kind in ("chain", "fan"):
                if name.startswith(f"run_session/{kind}"):
                    troupe_ops[kind] = ex.counter(name, "items_per_second")
            if name.startswith("null_step"):
                troupe_ops["step"] = ex.ms(name) * 1e3
        lines += ["| executor, through the session | troupe | TensorFlow |", "|---|---|---|"]
        for kind in ("chain", "fan"):
            tf_best = median([d[f"best_{kind}"]["null_ops_per_s"] for d in null_docs])
            lines.append(f"| {kind} of {null_docs[0]['nodes']:,} NoOps | {fmt(troupe_ops.get(kind))} null ops/s | "
                         f"{fmt(tf_best)} null ops/s |")
        tf_step = median([d["best_step"]["ms_per_run"] * 1e3 for d in null_docs])
        lines += [f"| null step (one NoOp), latency | {fmt(troupe_ops.get('step'))} us | {fmt(tf_step)} us |", "",
                  f"TensorFlow's NoOps measured with Grappler off (it would prune them); the paper's executor: "
                  f"about {PAPER_NULL_OPS_PER_S:,} null ops/s.", ""]
    dist = load_json(os.path.join(results, "tf_distributed.json")) if os.path.exists(
        os.path.join(results, "tf_distributed.json")) else None
    remote = load_json(os.path.join(results, "remote_step.json")) if os.path.exists(
        os.path.join(results, "remote_step.json")) else None
    if dist:
        lines += ["| between two processes on loopback | troupe (REAL) | TensorFlow (gRPC) |", "|---|---|---|"]
        rs = remote or {}
        lines.append(f"| remote step p50 (a scalar read on a PS process) | {fmt(rs.get('remote_p50_us'))} us | "
                     f"{fmt(dist['remote_step_us']['p50'])} us |")
        lines.append(f"| remote step p99 | {fmt(rs.get('remote_p99_us'))} us | "
                     f"{fmt(dist['remote_step_us']['p99'])} us |")
        for t in dist["transfer"]:
            lines.append(f"| {t['megabytes']} MB PS -> worker | | {fmt(t['mb_per_s'])} MB/s |")
        lines += ["", "troupe's tensor links between processes: `bench_transport` (section \"Tensor links\" of "
                  "doc/benchmarks.md).", ""]
    return lines if len(lines) > 2 else []


def section_runtime(results):
    lines = ["## Runtime micro-benchmarks", ""]
    ex = gbench_runs(rounds_of(results, "executor.troupe.r*.json"))
    if ex.names():
        lines += ["| executor | figure |", "|---|---|"]
        for name in ex.names():
            if name.startswith("null_step"):
                lines.append(f"| null step through the session (latency) | {fmt(ex.ms(name) * 1e3)} us |")
            else:
                ips = ex.counter(name, "items_per_second")
                lines.append(f"| {name.split('/real_time')[0]} | {fmt(ips)} null ops/s |")
        lines += ["", f"The paper's executor: about {PAPER_NULL_OPS_PER_S:,} null ops/s.", ""]
    sr = gbench_runs(rounds_of(results, "sendrecv.troupe.r*.json"))
    if sr.names() or sr.errors:
        lines += ["| Send/Recv between two tasks' devices | step | per transfer | transfers/s |", "|---|---|---|---|"]
        for name in sr.names():
            per = sr.counter(name, "transfer_time")
            label = name.replace("send_recv/", "").replace("/real_time", "")
            lines.append(f"| {label} | {fmt(sr.ms(name) * 1e3)} us | {fmt(per * 1e6 if per else None)} us | "
                         f"{fmt(sr.counter(name, 'transfers/s'))} |")
        lines += [f"| {n}: error | {e} | | |" for n, e in sr.errors.items()]
        lines += ["", "Target: at most 2 us per transfer with many transfers per step.", ""]
    var = gbench_runs(rounds_of(results, "variable.troupe.r*.json"))
    if var.names() or var.errors:
        lines += ["| variable read-update-read | step | cycles/s |", "|---|---|---|"]
        for name in var.names():
            label = name.replace("read_update_read/", "").replace("/real_time", "")
            lines.append(f"| {label} | {fmt(var.ms(name) * 1e3)} us | {fmt(var.counter(name, 'cycles/s'))} |")
        lines += [f"| {n}: error | {e} | |" for n, e in var.errors.items()]
        lines.append("")
    q = gbench_runs(rounds_of(results, "queue.troupe.r*.json"))
    if q.names() or q.errors:
        lines += ["| FIFOQueueV2 enqueue + dequeue | step | elements/s |", "|---|---|---|"]
        for name in q.names():
            label = name.replace("enqueue_dequeue/", "").replace("/real_time", "")
            lines.append(f"| {label} | {fmt(q.ms(name) * 1e3)} us | {fmt(q.counter(name, 'elements/s'))} |")
        lines += [f"| {n}: skipped | {e} | |" for n, e in q.errors.items()]
        lines.append("")
    return lines


def section_figure6(results):
    fig = load_json(os.path.join(results, "figure6.json")) if os.path.exists(os.path.join(results, "figure6.json")) else None
    lines = ["## The paper's Figure 6: workers sharing 16 PS tasks, in one process", ""]
    if not fig:
        return lines + ["(bench_figure6 did not run)", ""], None
    mb = fig.get("embedding_mb")
    lines += [f"{fig['ps']} PS tasks; each worker is a client session on its own task and thread, all "
              f"stepping concurrently for {fig['seconds']} s per point. null: read a scalar variable on "
              f"every PS task; sparse: fetch {fig['rows_per_step']} random rows of a {mb} MB embedding "
              f"({fig['embedding_rows']:,} x {fig['embedding_columns']} float32) sharded over the PS tasks. "
              f"All tasks share {fig.get('compute_threads')} compute thread(s). Set-up (sessions, "
              f"embedding initialization) took {fig.get('setup_s', 0):.1f} s.", "",
              "| model | workers | batches/s | p10 ms | median ms | p90 ms | steps |", "|---|---|---|---|---|---|---|"]
    for p in fig["points"]:
        err = f" error: {p['error']}" if p.get("error") else ""
        lines.append(f"| {p['model']} | {p['workers']} | {fmt(p['batches_per_s'])} | {fmt(p['p10_ms'])} | "
                     f"{fmt(p['p50_ms'])} | {fmt(p['p90_ms'])} | {p['steps']}{err} |")
    lines += ["", f"The paper (a real cluster over the network): {PAPER_FIGURE6}.", ""]
    return lines, fig


def section_figure6_processes(results):
    """Figure 6 with every task a process of its own: troupe's REAL mode beside TensorFlow's
    gRPC runtime (figure6_real.json, tf_figure6.json)."""
    def load(name):
        path = os.path.join(results, name)
        return load_json(path) if os.path.exists(path) else None
    real, tf = load("figure6_real.json"), load("tf_figure6.json")
    lines = ["## The paper's Figure 6 across processes: troupe (REAL) and TensorFlow (gRPC)", ""]
    if not real and not tf:
        return lines + ["(bench_figure6 --real and tf_distributed_peer.py --figure6 did not run)", ""]
    some = real or tf
    lines += [f"Every task a process of its own on this machine ({some['ps']} PS tasks, one per worker), the "
              f"benchmark the client of them all: troupe's `troupe server`s (`bench_figure6 --real`) and "
              f"TensorFlow's `tf.distribute.Server`s (`tf_distributed_peer.py --figure6`: one session per "
              f"worker task, each on its own thread, between-graph replication), each for {some['seconds']} s per "
              f"point; sparse: {some['rows_per_step']} rows of a {some['embedding_mb']} MB embedding.", "",
              "| model | workers | troupe batches/s | troupe median ms | TensorFlow batches/s | TensorFlow median ms | troupe/TF |",
              "|---|---|---|---|---|---|---|"]
    by_key = {}
    for source, data in (("troupe", real), ("tf", tf)):
        for p in (data or {}).get("points", []):
            by_key.setdefault((p["model"], p["workers"]), {})[source] = p
    for (model, workers), both in by_key.items():
        t, f = both.get("troupe"), both.get("tf")
        ratio = (t["batches_per_s"] / f["batches_per_s"]) if t and f and f["batches_per_s"] > 0 else None
        lines.append(f"| {model} | {workers} | {fmt(t['batches_per_s']) if t else ''} | {fmt(t['p50_ms']) if t else ''} | "
                     f"{fmt(f['batches_per_s']) if f else ''} | {fmt(f['p50_ms']) if f else ''} | "
                     f"{fmt(ratio) + 'x' if ratio else ''} |")
    lines += ["", f"The paper (a real cluster over the network): {PAPER_FIGURE6}.", ""]
    return lines


def section_figure8(results):
    path = os.path.join(results, "figure8.json")
    fig = load_json(path) if os.path.exists(path) else None
    lines = ["## The paper's Figure 8: synchronous replication with backup workers, in one process", ""]
    if not fig:
        return lines + ["(bench_figure8 did not run)", ""], None
    n = fig["aggregate"]
    lines += [f"Each step averages the gradients of {n} workers out of {n} + b (1 PS task; every worker a "
              f"client session on its own task and thread; a small dense model). A worker's compute time at "
              f"a step is {fig['base_ms']:g} ms x (1 + {fig['tail']:g} (X - 1)), X ~ Pareto(shape "
              f"{fig['alpha']:g}, scale 1), seeded per worker and step: most steps near {fig['base_ms']:g} ms, "
              f"a heavy tail of slow ones. The tail's weight was chosen so that the analytic curve of this "
              f"model (the {n}-th fastest of {n} + b draws) has the paper's shape; the measured times add "
              f"troupe's own cost of {n} + b workers and the updates on this machine's cores. "
              f"{fig['steps']} steps per point after {fig['warmup']} of warm-up; step time is the time between "
              f"consecutive updates.", "",
              "| backups b | workers | median step ms | p10 ms | p90 ms | normalized speedup t(0)/t(b) x N/(N+b) | gradients left out |",
              "|---|---|---|---|---|---|---|"]
    for p in fig["points"]:
        err = f" error: {p['error']}" if p.get("error") else ""
        lines.append(f"| {p['backups']} | {p['workers']} | {fmt(p['p50_ms'])} | {fmt(p['p10_ms'])} | "
                     f"{fmt(p['p90_ms'])} | {p['normalized_speedup']:.3f} | {p['left_out']}{err} |")
    f8 = PAPER_FIGURE8
    lines += ["", f"The paper (50 workers, Inception-v3 on a real cluster): {f8['best_median_backups']} backups give "
              f"the shortest median step ({f8['best_median_s']} s); {f8['best_speedup_backups']} backups the best "
              f"normalized speedup ({(f8['best_speedup'] - 1) * 100:.1f}%); a 5th backup hurts.", ""]
    return lines, fig


def plot_figure8(fig8, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = [p for p in fig8["points"] if not p.get("error")]
    if not pts:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    b = [p["backups"] for p in pts]
    med = [p["p50_ms"] for p in pts]
    err = [[m - p["p10_ms"] for m, p in zip(med, pts)], [p["p90_ms"] - m for m, p in zip(med, pts)]]
    left.errorbar(b, med, yerr=err, fmt="o-", capsize=3, label="troupe (median, p10-p90)")
    left.set_xlabel("backup workers b")
    left.set_ylabel("step time, ms")
    left.set_title(f"Step time, {fig8['aggregate']} workers aggregated")
    right.plot(b, [p["normalized_speedup"] for p in pts], "o-", label="troupe")
    f8 = PAPER_FIGURE8
    right.plot([f8["best_speedup_backups"]], [f8["best_speedup"]], "r*", markersize=12,
               label=f"paper's best: b={f8['best_speedup_backups']}, {f8['best_speedup']:.3f}")
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set_xlabel("backup workers b")
    right.set_ylabel("t(0)/t(b) x N/(N+b)")
    right.set_title("Normalized speedup (paper's Fig. 8c form)")
    for ax in (left, right):
        ax.set_xticks(b)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = os.path.join(out, "figure8.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ratios(rows, results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = [(f"{r['title']} (vs {PEER_NAMES[r['fastest']]})", r["ratio_fastest"]) for r in rows
            if r["ratio_fastest"] is not None]
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(data) + 1.5))
    names = [d[0] for d in data][::-1]
    values = [d[1] for d in data][::-1]
    bars = ax.barh(names, values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
    ax.axvline(1.0, color="black", linewidth=1)
    for bar, v in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:.2f}x", va="center")
    ax.set_xlabel("troupe throughput / the fastest peer's (above 1: troupe faster)")
    ax.set_title("Training steps, each system at its best")
    ax.set_xlim(0, max(values + [1.0]) * 1.25)
    fig.tight_layout()
    path = os.path.join(out, "ratios.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_figure6(fig6, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for model, style in (("null", "o-"), ("sparse", "s-")):
        pts = [p for p in fig6["points"] if p["model"] == model and not p.get("error")]
        if not pts:
            continue
        w = [p["workers"] for p in pts]
        label = "null (scalar read on each PS)" if model == "null" else f"sparse ({fig6['embedding_mb']} MB embedding)"
        left.plot(w, [p["batches_per_s"] for p in pts], style, label=label)
        med = [p["p50_ms"] for p in pts]
        err = [[m - p["p10_ms"] for m, p in zip(med, pts)], [p["p90_ms"] - m for m, p in zip(med, pts)]]
        right.errorbar(w, med, yerr=err, fmt=style, capsize=3, label=label)
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    workers = sorted({p["workers"] for p in fig6["points"]})
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(workers)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("workers")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    left.set_ylim(bottom=0)
    left.set_ylabel("batches/s (all workers)")
    left.set_title(f"Throughput, {fig6['ps']} PS tasks (paper's Fig. 6 form)")
    right.set_ylabel("step time, ms (median, p10-p90)")
    right.set_title("Step time")
    fig.tight_layout()
    path = os.path.join(out, "figure6.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def section_from_markdown(results, title, intro, name, script):
    """A section whose table a script wrote into the results folder as NAME.md."""
    lines = ["## " + title, "", intro, ""]
    path = os.path.join(results, name + ".md")
    if not os.path.exists(path):
        return lines + [f"({script} did not run)", ""]
    with open(path) as f:
        return lines + f.read().rstrip().split("\n") + [""]


def section_sim_fidelity(results):
    """bench/sim_fidelity.py's table: simulated against measured step times (issue 17)."""
    return section_from_markdown(
        results, "Simulation fidelity",
        "Steady-state step times of mode SIMULATED (a `troupe calibrate` table per model and round, from 2 "
        "workers, with REAL's loopback measured, nothing fitted) against the same training measured in "
        "IN_PROCESS and REAL mode, medians over the rounds (issue 17: within 10%, goal 5%).",
        "sim_fidelity", "bench/sim_fidelity.py")


def section_sim_scale(results):
    """bench/sim_scale.py's table: a 200-worker cluster in virtual time (issue 17)."""
    return section_from_markdown(
        results, "Simulation at scale",
        "200 workers and 16 PS tasks training asynchronously in mode SIMULATED: wall time of the whole "
        "run against the virtual time simulated (issue 17: 1000 steps shape-only in <= 60 s).",
        "sim_scale", "bench/sim_scale.py")


def section_sim_figures(results):
    """bench/sim_figures.py's tables: the paper's Figures 7 and 8 in simulation (issue 17)."""
    lines = section_from_markdown(
        results, "Figures 7 and 8 in simulation",
        "The paper's Inception-v3 cluster as a stated model in mode SIMULATED, shape-only (bench/sim_figures.py "
        "says the parameters); plots in figure7_sim.png and figure8_sim.png.",
        "sim_figures", "bench/sim_figures.py")
    for png in ("figure7_sim.png", "figure8_sim.png"):
        if os.path.exists(os.path.join(results, png)):
            lines += [f"![{png}]({png})", ""]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", required=True, help="the results folder of one run")
    parser.add_argument("--quiet", action="store_true", help="do not print the report")
    args = parser.parse_args()
    results = args.results
    machine = load_json(os.path.join(results, "machine.json")) if os.path.exists(os.path.join(results, "machine.json")) else None

    rows = model_rows(results)
    lines = ["# troupe benchmark report", ""]
    if machine:
        lines += [f"`bench/run.sh{' --quick' if machine.get('mode') == 'quick' else ''}` on "
                  f"{machine.get('date')}, commit {machine.get('commit')}.", ""]
    lines += section_machine(machine)
    lines += section_models(rows, results)
    lines += section_tf_runtime(results)
    lines += section_conv(results)
    lines += section_ceilings(results)
    lines += section_runtime(results)
    fig6_lines, fig6 = section_figure6(results)
    lines += fig6_lines
    lines += section_figure6_processes(results)
    fig8_lines, fig8 = section_figure8(results)
    lines += fig8_lines
    lines += section_sim_fidelity(results)
    lines += section_sim_scale(results)
    lines += section_sim_figures(results)

    plots = []
    try:
        import matplotlib  # noqa: F401
        have_plots = True
    except ImportError:
        have_plots = False
    if have_plots:
        p = plot_ratios(rows, results, results)
        if p:
            plots.append(("Troupe/peer throughput ratios", "ratios.png"))
        if fig6:
            plot_figure6(fig6, results)
            plots.append(("Figure 6: batches/s and step time against workers", "figure6.png"))
        if fig8 and plot_figure8(fig8, results):
            plots.append(("Figure 8: step time and normalized speedup against backup workers", "figure8.png"))
    lines += ["## Plots", ""]
    if plots:
        lines += [f"![{title}]({name})" + "\n" for title, name in plots]
    else:
        lines += ["(no plots: matplotlib is not installed; apt-get install python3-matplotlib)", ""]

    text = "\n".join(lines).rstrip() + "\n"
    with open(os.path.join(results, "report.md"), "w") as f:
        f.write(text)
    if not args.quiet:
        print(text)


if __name__ == "__main__":
    main()

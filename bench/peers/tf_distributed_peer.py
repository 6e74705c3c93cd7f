#!/usr/bin/env python3
"""TensorFlow's own distributed runtime on loopback, beside troupe's REAL mode: the same
measurements as build/bench/bench_remote_step and bench_transport, through gRPC.

  bench/.venv/bin/python bench/peers/tf_distributed_peer.py [--steps 2000] [--megabytes 256]

Starts two tf.distribute.Server tasks in separate processes (job ps, task 0; job worker,
task 0) on free loopback ports, then, as a client process hosting no task:

  remote step   Session("grpc://<ps>").run of a scalar variable's read on /job:ps/task:0
                (bench_remote_step's step: one round trip to a task of another process);
                p50, p99 and mean in microseconds over --steps steps
  transfer      a 1, 16 or 64 MB float32 variable on the PS summed on the worker (the bytes
                cross ps -> worker over gRPC, the client gets a scalar); MB/s, median of 5

With --figure6 it measures the paper's Figure 6 instead, as build/bench/bench_figure6
--real does for troupe: --ps PS tasks (16) and max(--workers) worker tasks, each a
tf.distribute.Server process of its own; for each worker count W, W client sessions (one
per worker task, each on a thread of this process, in between-graph replication: each
session's graph puts its ops on its worker task and reads the variables on the PS tasks)
step concurrently for --seconds after --warmup:

  null     each step reads a scalar variable on every PS task and adds the values on the
           worker;
  sparse   each step gathers 32 random rows (ids drawn here) of an --embedding_mb MB
           embedding (float32, 64 columns) partitioned over the PS tasks
           (fixed_size_partitioner, embedding_lookup with partition_strategy "div").

and prints bench_figure6's JSON (mode "TF_GRPC").

  bench/.venv/bin/python bench/peers/tf_distributed_peer.py --figure6 --workers 1,2,4,8 --embedding_mb 64

Stops the servers at the end. Prints one JSON object. Needs tensorflow-cpu in a git-ignored
virtual environment (doc/benchmarks.md); never used by set-up, tests or CI.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

SERVER = """
import os, sys, json
import tensorflow as tf
cluster = tf.train.ClusterSpec(json.loads(sys.argv[1]))
server = tf.distribute.Server(cluster, job_name=sys.argv[2], task_index=int(sys.argv[3]) if len(sys.argv) > 3 else 0,
                              config=tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                                              inter_op_parallelism_threads=1))
print("ready", flush=True)
server.join()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_servers(cluster):
    """One tf.distribute.Server process per task of `cluster`, ready when this returns."""
    servers = []
    for job, addresses in cluster.items():
        for index in range(len(addresses)):
            servers.append(subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(cluster), job, str(index)],
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    for server in servers:
        if server.stdout.readline().strip() != "ready":
            stop_servers(servers)
            sys.exit("tf_distributed_peer.py: a server did not start")
    return servers


def stop_servers(servers):
    for server in servers:
        server.kill()
        server.wait()


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))] if sorted_values else 0.0


def figure6(args):
    """The paper's Figure 6 through TensorFlow's distributed runtime (see the docstring)."""
    import numpy as np
    import tensorflow as tf
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    workers = [int(w) for w in args.workers.split(",")]
    cluster = {"ps": [f"127.0.0.1:{free_port()}" for _ in range(args.ps)],
               "worker": [f"127.0.0.1:{free_port()}" for _ in range(max(workers))]}
    rows = args.embedding_mb * (1 << 20) // (64 * 4)
    start_setup = time.perf_counter()
    servers = start_servers(cluster)
    try:
        # One graph and session per worker task; the variables (same names on the same PS
        # tasks) are shared by all of them through the PS servers' resource managers.
        sessions = []
        for w in range(max(workers)):
            graph = tf.Graph()
            with graph.as_default():
                scalars = []
                for p in range(args.ps):
                    with tf.device(f"/job:ps/task:{p}"):
                        scalars.append(v1.get_variable(f"null{p}", [], initializer=v1.ones_initializer(),
                                                       use_resource=True))
                with v1.device(v1.train.replica_device_setter(ps_tasks=args.ps, worker_device=f"/job:worker/task:{w}")):
                    embedding = v1.get_variable("embedding", [rows, 64], initializer=v1.random_uniform_initializer(),
                                                partitioner=v1.fixed_size_partitioner(args.ps), use_resource=True)
                with tf.device(f"/job:worker/task:{w}"):
                    null_step = tf.add_n([v.read_value() for v in scalars])
                    ids = v1.placeholder(tf.int64, [32])
                    sparse_step = tf.reduce_sum(v1.nn.embedding_lookup(embedding, ids, partition_strategy="div"))
                init = v1.global_variables_initializer()
            sess = v1.Session("grpc://" + cluster["worker"][w], graph=graph)
            if w == 0:
                sess.run(init)
            sessions.append((sess, null_step, sparse_step, ids))
        setup_s = time.perf_counter() - start_setup
        points = []
        for model in args.models.split(","):
            for count in workers:
                times = [[] for _ in range(count)]
                errors = []
                go = threading.Barrier(count + 1)
                stop_at = [0.0]

                def loop(w):
                    sess, null_step, sparse_step, ids = sessions[w]
                    rng = np.random.default_rng(1000 + w)
                    try:
                        go.wait()
                        warm_until = time.perf_counter() + args.warmup
                        while True:
                            start = time.perf_counter()
                            if model == "null":
                                sess.run(null_step)
                            else:
                                sess.run(sparse_step, {ids: rng.integers(0, rows, 32)})
                            now = time.perf_counter()
                            if now >= stop_at[0]:
                                break
                            if now > warm_until:
                                times[w].append((now - start) * 1e3)
                    except Exception as e:  # a failed step ends the point with its error
                        errors.append(str(e).splitlines()[0])

                threads = [threading.Thread(target=loop, args=(w,)) for w in range(count)]
                for t in threads:
                    t.start()
                stop_at[0] = time.perf_counter() + args.warmup + args.seconds
                go.wait()
                for t in threads:
                    t.join()
                all_times = sorted(x for ts in times for x in ts)
                point = {"model": model, "workers": count, "steps": len(all_times),
                         "batches_per_s": len(all_times) / args.seconds, "p10_ms": percentile(all_times, 0.1),
                         "p50_ms": percentile(all_times, 0.5), "p90_ms": percentile(all_times, 0.9),
                         "error": errors[0] if errors else ""}
                points.append(point)
                print(f"{model:6s} W={count:<3d} steps {point['steps']:<7d} {point['batches_per_s']:9.1f} batches/s  "
                      f"p50 {point['p50_ms']:7.3f} ms", file=sys.stderr)
        for sess, *_ in sessions:
            sess.close()
        print(json.dumps({"mode": "TF_GRPC", "tensorflow": tf.__version__, "ps": args.ps, "seconds": args.seconds,
                          "embedding_mb": args.embedding_mb, "embedding_rows": rows, "embedding_columns": 64,
                          "rows_per_step": 32, "setup_s": setup_s, "points": points}))
        return 1 if any(p["error"] for p in points) else 0
    finally:
        stop_servers(servers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--figure6", action="store_true", help="the paper's Figure 6 instead (see above)")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--ps", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--embedding_mb", type=int, default=64)
    parser.add_argument("--models", default="null,sparse")
    args = parser.parse_args()
    if args.figure6:
        sys.exit(figure6(args))
    if args.smoke:
        args.steps, args.rounds = 50, 2
    import tensorflow as tf
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    cluster = {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    servers = start_servers(cluster)
    try:
        out = {"tensorflow": tf.__version__, "cluster": cluster}
        # Remote step: one scalar read on the PS.
        graph = tf.Graph()
        with graph.as_default(), tf.device("/job:ps/task:0"):
            v = v1.get_variable("scalar", [], initializer=v1.zeros_initializer(), use_resource=True)
            read = v.read_value()
            init = v1.global_variables_initializer()
        with v1.Session("grpc://" + cluster["ps"][0], graph=graph) as sess:
            sess.run(init)
            for _ in range(100):
                sess.run(read)
            times = []
            for _ in range(args.steps):
                start = time.perf_counter()
                sess.run(read)
                times.append((time.perf_counter() - start) * 1e6)
        times.sort()
        out["remote_step_us"] = {"p50": times[len(times) // 2], "p99": times[int(len(times) * 0.99)],
                                 "mean": statistics.fmean(times), "steps": args.steps}
        print(f"remote step p50 {out['remote_step_us']['p50']:.1f} us", file=sys.stderr)
        # Transfers ps -> worker.
        out["transfer"] = []
        for megabytes in ((1, 4) if args.smoke else (1, 16, 64)):
            graph = tf.Graph()
            n = megabytes * (1 << 20) // 4
            with graph.as_default():
                with tf.device("/job:ps/task:0"):
                    big = v1.get_variable(f"big{megabytes}", [n], initializer=v1.ones_initializer(), use_resource=True)
                    value = big.read_value()
                with tf.device("/job:worker/task:0"):
                    total = tf.reduce_sum(value)
                init = v1.global_variables_initializer()
            with v1.Session("grpc://" + cluster["worker"][0], graph=graph) as sess:
                sess.run(init)
                sess.run(total)
                rounds = []
                for _ in range(args.rounds):
                    start = time.perf_counter()
                    repeats = max(1, 256 // megabytes) if not args.smoke else 1
                    for _ in range(repeats):
                        sess.run(total)
                    rounds.append(megabytes * repeats / (time.perf_counter() - start))
            out["transfer"].append({"megabytes": megabytes, "mb_per_s": statistics.median(rounds),
                                    "rounds_mb_per_s": [round(r, 1) for r in rounds]})
            print(f"transfer {megabytes} MB: {statistics.median(rounds):.0f} MB/s", file=sys.stderr)
        print(json.dumps(out))
    finally:
        stop_servers(servers)


if __name__ == "__main__":
    main()

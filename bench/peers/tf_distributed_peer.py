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
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

SERVER = """
import os, sys, json
import tensorflow as tf
cluster = tf.train.ClusterSpec(json.loads(sys.argv[1]))
server = tf.distribute.Server(cluster, job_name=sys.argv[2], task_index=0,
                              config=tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                                              inter_op_parallelism_threads=1))
print("ready", flush=True)
server.join()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.rounds = 50, 2
    import tensorflow as tf
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    cluster = {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    servers = [subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(cluster), job], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True) for job in ("ps", "worker")]
    try:
        for server in servers:
            if server.stdout.readline().strip() != "ready":
                sys.exit("tf_distributed_peer.py: a server did not start")
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
        for server in servers:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()

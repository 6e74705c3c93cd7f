#!/usr/bin/env python3
"""TensorFlow peer: the paper's system, in graph mode (tf.compat.v1.Session), on the models
of troupe's benchmarks with the PyTorch peers' shapes, and TensorFlow's executor cost.

  bench/.venv/bin/python bench/peers/tf_peer.py --model mlp|lenet|alexnet|lstm_full|lstm_sampled|null_ops

Models (one training step per iteration, plain SGD, batches made once and fed):
  mlp           784-512-512-10 (ReLU), batch 64, lr 0.01
  lenet         LeNet-5 on 28x28x1 NHWC, batch 64, lr 0.01
  alexnet       AlexNet on 224x224x3 NHWC, batch 16, lr 0.01 (bench/peers/alexnet_peer.py's shapes)
  lstm_full     LSTM language model: vocabulary 10,000, embedding and hidden 512, unrolled 20
                steps, batch 32, full softmax, lr 0.1; the embedding's gradient is sparse
  lstm_sampled  the same with tf.nn.sampled_softmax_loss (512 samples); both LSTMs are timed
                with BasicLSTMCell's graph unrolled and with one BlockLSTM op
                (LSTMBlockFusedCell's kernel), the faster kept (marked "+fused")
  null_ops      Session.run of 10,000 NoOps chained by control edges, fanned out from one
                root, and of one NoOp (the null step): TensorFlow's executor cost per op
                (Grappler off, which would prune the NoOps)

TensorFlow as it ships (oneDNN on); intra-op and inter-op threads tried at 1 and 2, the
best kept (the peer at its best). Prints one JSON object in peer_common.py's format, with
"tensorflow" for the version and "threads" as "intra/inter". Needs tensorflow-cpu in a
git-ignored virtual environment (doc/benchmarks.md); never used by set-up, tests or CI.
"""
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import peer_common  # noqa: E402

v1 = tf.compat.v1


def dense(x, n_in, n_out, activation=None):
    w = v1.get_variable(f"w{n_in}x{n_out}_{len(v1.global_variables())}", [n_in, n_out],
                        initializer=v1.glorot_uniform_initializer())
    b = v1.get_variable(f"b{n_out}_{len(v1.global_variables())}", [n_out], initializer=v1.zeros_initializer())
    y = tf.matmul(x, w) + b
    return activation(y) if activation else y


def conv(x, k, c_in, c_out, stride, padding):
    w = v1.get_variable(f"k{k}x{c_in}x{c_out}_{len(v1.global_variables())}", [k, k, c_in, c_out],
                        initializer=v1.glorot_uniform_initializer())
    b = v1.get_variable(f"kb{c_out}_{len(v1.global_variables())}", [c_out], initializer=v1.zeros_initializer())
    return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, stride, padding), b))


def classifier(logits_fn, x_shape, classes, batch, lr, smoke):
    """Placeholders, loss and SGD step for an image or vector classifier; 4 batches to feed."""
    x = v1.placeholder(tf.float32, [batch] + x_shape, name="x")
    y = v1.placeholder(tf.int32, [batch], name="y")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits_fn(x)))
    train = v1.train.GradientDescentOptimizer(lr).minimize(loss)
    rng = np.random.default_rng(0)
    feeds = [{x: rng.random([batch] + x_shape, dtype=np.float32), y: rng.integers(0, classes, batch, dtype=np.int32)}
             for _ in range(4)]
    return train, feeds


def build_mlp(smoke):
    batch, hidden = (4, 16) if smoke else (64, 512)

    def logits(x):
        h = dense(x, 784, hidden, tf.nn.relu)
        h = dense(h, hidden, hidden, tf.nn.relu)
        return dense(h, hidden, 10)
    return classifier(logits, [784], 10, batch, 0.01, smoke) + ("examples", batch)


def build_lenet(smoke):
    batch = 2 if smoke else 64

    def logits(x):
        h = tf.nn.max_pool2d(conv(x, 5, 1, 6, 1, "SAME"), 2, 2, "VALID")
        h = tf.nn.max_pool2d(conv(h, 5, 6, 16, 1, "VALID"), 2, 2, "VALID")
        h = tf.reshape(h, [-1, 5 * 5 * 16])
        h = dense(dense(h, 400, 120, tf.nn.relu), 120, 84, tf.nn.relu)
        return dense(h, 84, 10)
    return classifier(logits, [28, 28, 1], 10, batch, 0.01, smoke) + ("images", batch)


def build_alexnet(smoke):
    batch, image, fc, classes = (1, 100, 64, 10) if smoke else (16, 224, 4096, 1000)
    side = ((image - 11) // 4 + 1 - 3) // 2 + 1
    side = (side - 3) // 2 + 1
    side = (side - 3) // 2 + 1

    def logits(x):
        h = tf.nn.max_pool2d(conv(x, 11, 3, 64, 4, "VALID"), 3, 2, "VALID")
        h = tf.nn.max_pool2d(conv(h, 5, 64, 192, 1, "SAME"), 3, 2, "VALID")
        h = conv(h, 3, 192, 384, 1, "SAME")
        h = conv(h, 3, 384, 256, 1, "SAME")
        h = tf.nn.max_pool2d(conv(h, 3, 256, 256, 1, "SAME"), 3, 2, "VALID")
        h = tf.reshape(h, [-1, 256 * side * side])
        h = dense(dense(h, 256 * side * side, fc, tf.nn.relu), fc, fc, tf.nn.relu)
        return dense(h, fc, classes)
    return classifier(logits, [image, image, 3], classes, batch, 0.01, smoke) + ("images", batch)


def build_lstm(smoke, sampled, fused):
    """fused: the layer is one BlockLSTM (TensorFlow's LSTMBlockFusedCell kernel, the same
    weights and gates); otherwise BasicLSTMCell's graph unrolled."""
    vocab, hidden, batch, unroll, samples = (50, 8, 2, 3, 8) if smoke else (10000, 512, 32, 20, 512)
    ids = v1.placeholder(tf.int32, [unroll, batch], name="ids")
    labels = v1.placeholder(tf.int64, [unroll * batch], name="labels")
    embedding = v1.get_variable("embedding", [vocab, hidden], initializer=v1.random_uniform_initializer(-0.05, 0.05))
    kernel = v1.get_variable("lstm_kernel", [2 * hidden, 4 * hidden], initializer=v1.glorot_uniform_initializer())
    bias = v1.get_variable("lstm_bias", [4 * hidden], initializer=v1.zeros_initializer())
    embedded = tf.nn.embedding_lookup(embedding, ids)  # [unroll, batch, hidden]
    if fused:
        zeros = tf.zeros([batch, hidden])
        no_peephole = tf.zeros([hidden])
        outs = tf.raw_ops.BlockLSTM(seq_len_max=tf.constant(unroll, tf.int64), x=embedded, cs_prev=zeros,
                                    h_prev=zeros, w=kernel, wci=no_peephole, wcf=no_peephole, wco=no_peephole,
                                    b=bias, forget_bias=1.0, cell_clip=-1.0, use_peephole=False)
        h = tf.reshape(outs[6], [unroll * batch, hidden])
    else:
        h = tf.zeros([batch, hidden])
        c = tf.zeros([batch, hidden])
        outputs = []
        for x in tf.unstack(embedded, axis=0):
            i, j, f, o = tf.split(tf.matmul(tf.concat([x, h], 1), kernel) + bias, 4, axis=1)
            c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
            h = tf.tanh(c) * tf.sigmoid(o)
            outputs.append(h)
        h = tf.concat(outputs, 0)
    weights = v1.get_variable("softmax_w", [vocab, hidden], initializer=v1.random_uniform_initializer(-0.02, 0.02))
    softmax_b = v1.get_variable("softmax_b", [vocab], initializer=v1.zeros_initializer())
    if sampled:
        loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(weights, softmax_b, tf.reshape(labels, [-1, 1]), h,
                                                         samples, vocab))
    else:
        logits = tf.matmul(h, weights, transpose_b=True) + softmax_b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    rng = np.random.default_rng(0)
    feeds = [{ids: rng.integers(0, vocab, [unroll, batch], dtype=np.int32),
              labels: rng.integers(0, vocab, unroll * batch, dtype=np.int64)} for _ in range(4)]
    return train, feeds, "words", batch * unroll


def session(graph, intra, inter, grappler=True):
    config = v1.ConfigProto(intra_op_parallelism_threads=intra, inter_op_parallelism_threads=inter)
    # Grappler would prune a graph of NoOps before the executor saw them.
    config.graph_options.rewrite_options.disable_meta_optimizer = not grappler
    return v1.Session(graph=graph, config=config)


THREADS = [(1, 1), (2, 1), (1, 2), (2, 2)]


def time_model(name, variants, args):
    """variants: (label, build) pairs, each timed at every thread setting; the label ("" for
    the plain graph) is appended to the threads figure, as the PyTorch peers mark
    channels-last."""
    results = []
    for label, build in variants:
        for intra, inter in THREADS:
            graph = tf.Graph()
            with graph.as_default():
                v1.set_random_seed(0)
                train, feeds, items, per_step = build(args.smoke)
                init = v1.global_variables_initializer()
            with session(graph, intra, inter) as sess:
                sess.run(init)
                state = {"next": 0}

                def step():
                    sess.run(train, feeds[state["next"]])
                    state["next"] = (state["next"] + 1) % len(feeds)
                ms, samples = peer_common.time_steps(step, args.seconds, args.repeats)
            threads = f"{intra}/{inter}" + (f"+{label}" if label else "")
            results.append({"threads": threads, "ms_per_step": ms, "items_per_s": per_step / ms * 1e3,
                            "samples_ms": [round(s, 4) for s in samples]})
            print(f"{name}: intra {intra} inter {inter} {label}: {ms:.2f} ms/step", file=sys.stderr)
    best = min(results, key=lambda r: r["ms_per_step"])
    return {"model": name, "tensorflow": tf.__version__, "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0",
            "tcmalloc": peer_common.tcmalloc_loaded(), "items": items, "items_per_step": per_step,
            "results": results, "best": best}


def null_graph(kind, nodes):
    graph = tf.Graph()
    with graph.as_default():
        first = tf.no_op(name="first")
        if kind == "step":
            return graph, first
        previous, fan = first, []
        for _ in range(nodes):
            with tf.control_dependencies([previous if kind == "chain" else first]):
                op = tf.no_op()
            previous = op
            fan.append(op)
        with tf.control_dependencies([previous] if kind == "chain" else fan):
            last = tf.no_op(name="last")
    return graph, last


def time_null_ops(args):
    nodes = 200 if args.smoke else 10000
    out = {"model": "null_ops", "tensorflow": tf.__version__, "nodes": nodes, "results": []}
    for kind in ("chain", "fan", "step"):
        best = None
        for intra, inter in THREADS:
            graph, target = null_graph(kind, nodes)
            with session(graph, intra, inter, grappler=False) as sess:
                ms, samples = peer_common.time_steps(lambda: sess.run(target), args.seconds, args.repeats)
            row = {"kind": kind, "threads": f"{intra}/{inter}", "ms_per_run": ms,
                   "samples_ms": [round(s, 4) for s in samples]}
            if kind != "step":
                row["null_ops_per_s"] = (nodes + 2) / ms * 1e3
            out["results"].append(row)
            if best is None or ms < best["ms_per_run"]:
                best = row
            print(f"null_ops {kind}: intra {intra} inter {inter}: {ms:.3f} ms/run", file=sys.stderr)
        out[f"best_{kind}"] = best
    return out


def main():
    argv, model = peer_common.pop_option(sys.argv[1:], "--model", "mlp")
    sys.argv[1:] = argv
    args = peer_common.parse_args(__doc__)
    v1.disable_eager_execution()
    def lstm(sampled):
        return [("", lambda smoke: build_lstm(smoke, sampled, False)),
                ("fused", lambda smoke: build_lstm(smoke, sampled, True))]
    builders = {"mlp": [("", build_mlp)], "lenet": [("", build_lenet)], "alexnet": [("", build_alexnet)],
                "lstm_full": lstm(False), "lstm_sampled": lstm(True)}
    if model == "null_ops":
        print(json.dumps(time_null_ops(args)))
    elif model in builders:
        print(json.dumps(time_model(model, builders[model], args)))
    else:
        sys.exit(f"tf_peer.py: unknown --model '{model}' (valid: {', '.join(list(builders) + ['null_ops'])})")


if __name__ == "__main__":
    main()

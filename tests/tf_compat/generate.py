#!/usr/bin/env python3
"""Writes the TensorFlow GraphDef corpus: graphs TensorFlow builds, with its inputs and outputs.

Needs TensorFlow (tests/tf_compat/README.md says how to install it into a git-ignored
virtual environment); running the corpus does not. Each case is a folder under
corpus/ (or --out) holding the GraphDef TensorFlow wrote (binary graph.pb or text
graph.pbtxt), case.pbtxt (tests/tf_compat/tf_case.proto: a sequence of session runs with
their feeds and expected fetches) and the tensors as .npy. Inputs are drawn from a seed
derived from the case's name, so a rerun with the same TensorFlow writes the same files.

  bench/.venv/bin/python tests/tf_compat/generate.py [--out DIR] [--only SUBSTRING]
"""
import argparse
import os
import shutil
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
raw = tf.raw_ops

HERE = os.path.dirname(os.path.abspath(__file__))

f32, f64, i32, i64, u8, b = np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_


# --- Inputs -------------------------------------------------------------------------------------

class Inputs:
    """Draws a case's inputs from a generator seeded by the case's name."""

    def __init__(self, name):
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))

    def normal(self, shape, dtype=f32, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(dtype)

    def uniform(self, shape, low, high, dtype=f32):
        return self.rng.uniform(low, high, shape).astype(dtype)

    def ints(self, shape, low, high, dtype=i32):
        return self.rng.integers(low, high, shape).astype(dtype)

    def bools(self, shape):
        return self.rng.integers(0, 2, shape).astype(b)

    def distinct(self, shape, dtype=f32):
        """Values with no ties (for max, argmax, top_k, sorting)."""
        n = int(np.prod(shape))
        return (self.rng.permutation(n).reshape(shape) * 0.25 - n / 8).astype(dtype)


# --- Writing cases ------------------------------------------------------------------------------

def _quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Case:
    """One corpus case: build the graph under `with case.graph.as_default()`, then add runs."""

    def __init__(self, name, ops, what, binary=False, rtol=0.0, atol=0.0):
        self.name, self.ops, self.what = name, list(ops), what
        self.binary, self.rtol, self.atol = binary, rtol, atol
        self.graph = tf.Graph()
        self.runs = []  # (feeds {name: array}, fetches [(name, compare)], targets, repeat)
        self.inputs = Inputs(name)

    def run(self, fetches=(), feeds=None, targets=(), repeat=1, compare=None, error=""):
        """A session run; `compare` maps fetch names to SHAPE or SORTED; `error`: the run
        fails in TensorFlow with a message containing it (and must in troupe)."""
        self.runs.append((dict(feeds or {}), [(f, (compare or {}).get(f, "VALUES")) for f in fetches],
                          list(targets), repeat, error))

    def write(self, root):
        folder = os.path.join(root, self.name)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        graph_file = "graph.pb" if self.binary else "graph.pbtxt"
        tf.io.write_graph(self.graph.as_graph_def(), folder, graph_file, as_text=not self.binary)
        lines = [f"# Written by tests/tf_compat/generate.py with TensorFlow {tf.__version__}.",
                 f"graph: {_quote(graph_file)}"]
        lines += [f"op: {_quote(op)}" for op in self.ops]
        lines.append(f"what: {_quote(self.what)}")
        if self.rtol:
            lines.append(f"rtol: {self.rtol!r}")
        if self.atol:
            lines.append(f"atol: {self.atol!r}")
        with v1.Session(graph=self.graph, config=v1.ConfigProto(
                intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)) as sess:
            for r, (feeds, fetches, targets, repeat, error) in enumerate(self.runs):
                feed_dict = {self.graph.get_tensor_by_name(k): v for k, v in feeds.items()}
                values = None
                for _ in range(repeat):
                    try:
                        values = sess.run([self.graph.get_tensor_by_name(f) for f, _ in fetches]
                                          + [self.graph.get_operation_by_name(t) for t in targets],
                                          feed_dict)
                    except tf.errors.OpError as e:
                        if not error or error not in e.message:
                            raise
                        values = [None] * len(fetches)
                        break
                    else:
                        if error:
                            raise ValueError(f"{self.name}: run {r} was expected to fail with '{error}'")
                lines.append("run {")
                for i, (k, v) in enumerate(feeds.items()):
                    file = f"run{r}_feed{i}.npy"
                    np.save(os.path.join(folder, file), np.require(v, requirements="C"), allow_pickle=False)
                    lines.append(f"  feed {{ name: {_quote(k)} file: {_quote(file)} }}")
                for i, ((f, compare), value) in enumerate(zip(fetches, values)):
                    if error:
                        lines.append(f"  fetch {{ name: {_quote(f)} }}")
                        continue
                    file = f"run{r}_fetch{i}.npy"
                    value = np.asarray(value)
                    if value.dtype == object:
                        raise ValueError(f"{self.name}: fetch {f} is not numeric")
                    np.save(os.path.join(folder, file), np.require(value, requirements="C"), allow_pickle=False)
                    extra = f" compare: {compare}" if compare != "VALUES" else ""
                    lines.append(f"  fetch {{ name: {_quote(f)} file: {_quote(file)}{extra} }}")
                lines += [f"  target: {_quote(t)}" for t in targets]
                if repeat != 1:
                    lines.append(f"  repeat: {repeat}")
                if error:
                    lines.append(f"  error: {_quote(error)}")
                lines.append("}")
        with open(os.path.join(folder, "case.pbtxt"), "w") as out:
            out.write("\n".join(lines) + "\n")


CASES = []


def case(fn):
    """Registers a function that returns one Case or a list of them."""
    CASES.append(fn)
    return fn


def placeholders(values):
    """A Placeholder named after each key, of the value's dtype and shape."""
    return [v1.placeholder(tf.as_dtype(v.dtype), v.shape, name=k) for k, v in values.items()]


def op_case(name, ops, what, build, feeds, grad=True, binary=False, rtol=0.0, atol=0.0, compare=None):
    """A case that feeds `feeds` (name -> array), builds outputs with `build(*placeholders)`,
    and fetches them; with grad, a second case `<name>_grad` fetches TensorFlow's gradient
    graph (tf.gradients with random output gradients) for every float input."""
    out = []
    c = Case(name, ops, what, binary=binary, rtol=rtol, atol=atol)
    with c.graph.as_default():
        phs = placeholders(feeds)
        ys = build(*phs)
        ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
        c.run([y.name for y in ys], {p.name: v for p, v in zip(phs, feeds.values())},
              compare={y.name: compare for y in ys} if compare else None)
    out.append(c)
    if grad:
        with v1.Session(graph=c.graph) as sess:  # the outputs' shapes, for their gradients
            shapes = [v.shape for v in sess.run(ys, {p: v for p, v in zip(phs, feeds.values())})]
        g = Case(name + "_grad", ops, "tf.gradients of: " + what, binary=True, rtol=rtol, atol=atol)
        with g.graph.as_default():
            phs = placeholders(feeds)
            ys = build(*phs)
            ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
            shapes = [sh for y, sh in zip(ys, shapes) if y.dtype.is_floating]
            ys = [y for y in ys if y.dtype.is_floating]
            xs = [p for p in phs if p.dtype.is_floating]
            dys = [tf.constant(g.inputs.normal(sh, y.dtype.as_numpy_dtype), name=f"dy{i}")
                   for i, (y, sh) in enumerate(zip(ys, shapes))]
            dxs = tf.gradients(ys, xs, grad_ys=dys)
            dxs = [dx for dx in dxs if dx is not None]
            if isinstance(dxs[0], tf.IndexedSlices):
                dxs = [tf.convert_to_tensor(dx) for dx in dxs]
            g.run([tf.identity(dx, name=f"dx{i}").name for i, dx in enumerate(dxs)],
                  {p.name: v for p, v in zip(phs, feeds.values())})
        out.append(g)
    return out


# --- Element-wise -------------------------------------------------------------------------------

UNARY = {
    # op: (function, input domain (low, high) or None for normal, differentiable)
    "Abs": (lambda x: raw.Abs(x=x), None, True), "Neg": (lambda x: raw.Neg(x=x), None, True), "Square": (lambda x: raw.Square(x=x), None, True),
    "Sqrt": (lambda x: raw.Sqrt(x=x), (0.1, 4.0), True), "Rsqrt": (lambda x: raw.Rsqrt(x=x), (0.1, 4.0), True),
    "Exp": (lambda x: raw.Exp(x=x), None, True), "Log": (lambda x: raw.Log(x=x), (0.1, 4.0), True), "Tanh": (lambda x: raw.Tanh(x=x), None, True),
    "Sigmoid": (lambda x: raw.Sigmoid(x=x), None, True), "Relu": (lambda x: raw.Relu(features=x), None, True),
    "Relu6": (lambda x: raw.Relu6(features=x), (-3.0, 9.0), True),
    "Elu": (lambda x: raw.Elu(features=x), None, True),
    "Softplus": (lambda x: raw.Softplus(features=x), None, True),
    "Sign": (lambda x: raw.Sign(x=x), None, False), "Reciprocal": (lambda x: raw.Reciprocal(x=x), (0.5, 3.0), True),
    "Floor": (lambda x: raw.Floor(x=x * 3), None, False), "Ceil": (lambda x: raw.Ceil(x=x * 3), None, False),
    "Round": (lambda x: raw.Round(x=tf.concat([x * 3, [[0.5, 1.5, 2.5, -0.5, -2.5]]], 0)), None, False),
    "Sin": (lambda x: raw.Sin(x=x), None, True), "Cos": (lambda x: raw.Cos(x=x), None, True),
    "Erf": (lambda x: raw.Erf(x=x), None, True), "Expm1": (lambda x: raw.Expm1(x=x), None, True),
    "Log1p": (lambda x: raw.Log1p(x=x), (-0.5, 3.0), True),
    "Softsign": (lambda x: raw.Softsign(features=x), None, True), "Selu": (lambda x: raw.Selu(features=x), None, True),
    "IsNan": (lambda x: raw.IsNan(x=tf.math.log(x)), None, False),
    "IsFinite": (lambda x: raw.IsFinite(x=tf.math.log(x)), None, False),
}


@case
def unary_ops():
    out = []
    for op, (fn, domain, grad) in UNARY.items():
        for dtype in (f32, f64):
            name = f"{op.lower()}_{np.dtype(dtype).name}"
            inp = Inputs(name)
            x = inp.normal([3, 5], dtype) if domain is None else inp.uniform([3, 5], *domain, dtype)
            out += op_case(name, [op], f"{op} of a 3x5 {np.dtype(dtype).name}", fn, {"x": x},
                           grad=grad and dtype == f32)
    for op in ("Abs", "Neg", "Square", "Sign"):
        for dtype in (i32, i64):
            name = f"{op.lower()}_{np.dtype(dtype).name}"
            fn = getattr(raw, op)
            out += op_case(name, [op], f"{op} of integers", lambda x, fn=fn: fn(x=x),
                           {"x": Inputs(name).ints([7], -9, 9, dtype)}, grad=False)
    out += op_case("leaky_relu_alpha", ["LeakyRelu"], "LeakyRelu with alpha 0.3",
                   lambda x: raw.LeakyRelu(features=x, alpha=0.3), {"x": Inputs("lr").normal([4, 6])})
    out += op_case("relu_empty", ["Relu"], "Relu of a 0x3 tensor",
                   lambda x: raw.Relu(features=x), {"x": np.zeros([0, 3], f32)}, grad=False)
    return out


BINARY = {
    "Div": raw.Div, "SquaredDifference": raw.SquaredDifference, "Mod": raw.Mod,
    "Add": raw.Add, "AddV2": raw.AddV2, "Sub": raw.Sub, "Mul": raw.Mul, "RealDiv": raw.RealDiv,
    "Maximum": raw.Maximum, "Minimum": raw.Minimum, "Pow": raw.Pow,
}
BROADCASTS = [("same", [3, 4], [3, 4]), ("row", [3, 4], [4]), ("outer", [2, 1, 4], [3, 1]),
              ("scalar", [], [2, 3]), ("empty", [0, 4], [4])]


@case
def binary_ops():
    out = []
    for op, fn in BINARY.items():
        for shape_name, sx, sy in BROADCASTS:
            name = f"{op.lower()}_{shape_name}"
            inp = Inputs(name)
            if op in ("Pow", "RealDiv", "Div", "Mod"):
                x, y = inp.uniform(sx, 0.5, 2.0), inp.uniform(sy, 0.5, 2.0)
            else:
                x, y = inp.normal(sx), inp.normal(sy)
            out += op_case(name, [op], f"{op} of {sx} and {sy}", lambda x, y, fn=fn: fn(x=x, y=y),
                           {"x": x, "y": y}, grad=shape_name != "empty" and op != "Mod", rtol=1e-5)
    for op in ("Add", "AddV2", "Sub", "Mul", "Maximum", "Minimum", "FloorDiv", "FloorMod", "Div", "Mod",
               "SquaredDifference"):
        for dtype in (i32, i64):
            name = f"{op.lower()}_{np.dtype(dtype).name}"
            inp = Inputs(name)
            x = inp.ints([3, 4], -20, 20, dtype)
            y = inp.ints([4], 1, 6, dtype) * np.where(inp.bools([4]), 1, -1).astype(dtype)
            fn = getattr(raw, op)
            out += op_case(name, [op], f"{op} of integers (negative operands: floor semantics)",
                           lambda x, y, fn=fn: fn(x=x, y=y), {"x": x, "y": y}, grad=False)
    for op in ("FloorDiv", "FloorMod"):
        name = f"{op.lower()}_float"
        grad = op == "FloorMod"
        inp = Inputs(name)
        x, y = inp.normal([3, 4]) * 5, inp.uniform([4], 0.5, 2) * np.array([1, -1, 1, -1], f32)
        fn = getattr(raw, op)
        out += op_case(name, [op], f"{op} of floats", lambda x, y, fn=fn: fn(x=x, y=y),
                       {"x": x, "y": y.astype(f32)}, grad=grad)
    inp = Inputs("div_no_nan")
    out += op_case("div_no_nan", ["DivNoNan"], "DivNoNan with zeros in y, broadcasting",
                   lambda x, y: tf.math.divide_no_nan(x, y),
                   {"x": inp.normal([3, 4]), "y": np.array([0.5, 0.0, -2.0, 0.0], f32)}, rtol=1e-5)
    out += op_case("mul_f64", ["Mul"], "Mul of float64 with broadcasting",
                   lambda x, y: x * y, {"x": Inputs("m64").normal([2, 3], f64), "y": Inputs("m64y").normal([3], f64)})
    return out


@case
def compare_ops():
    out = []
    for op in ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"):
        fn = getattr(raw, op)
        for dtype in (f32, i32):
            name = f"{op.lower()}_{np.dtype(dtype).name}"
            inp = Inputs(name)
            x, y = inp.ints([3, 4], -2, 3).astype(dtype), inp.ints([4], -2, 3).astype(dtype)
            out += op_case(name, [op], f"{op} with broadcasting", lambda x, y, fn=fn: fn(x=x, y=y),
                           {"x": x, "y": y}, grad=False)
    inp = Inputs("equal_bool")
    out += op_case("equal_bool", ["Equal"], "Equal of booleans", lambda x, y: raw.Equal(x=x, y=y),
                   {"x": inp.bools([5]), "y": inp.bools([5])}, grad=False)
    return out


@case
def select_cast_misc():
    out = []
    inp = Inputs("select")
    out += op_case("select_vector_condition", ["Select"], "TF1 Select with a condition over the first dimension",
                   lambda c, x, y: raw.Select(condition=c, x=x, y=y),
                   {"c": inp.bools([3]), "x": inp.normal([3, 2]), "y": inp.normal([3, 2])})
    out += op_case("select_same_shape", ["Select"], "Select with a condition of x's shape",
                   lambda c, x, y: raw.Select(condition=c, x=x, y=y),
                   {"c": inp.bools([2, 3]), "x": inp.normal([2, 3]), "y": inp.normal([2, 3])})
    out += op_case("selectv2_broadcast", ["SelectV2"], "SelectV2 broadcasting all three",
                   lambda c, x, y: raw.SelectV2(condition=c, t=x, e=y),
                   {"c": inp.bools([2, 1]), "x": inp.normal([3]), "y": inp.normal([2, 3])})
    casts = [(f32, i32, inp.normal([6]) * 3), (i32, f32, inp.ints([6], -50, 50)),
             (f32, b, np.array([0, 1.5, -0.0, 2, 0, -3], f32)), (b, f32, inp.bools([6])),
             (f64, f32, inp.normal([6], f64)), (i64, i32, inp.ints([6], -1000, 1000, i64)),
             (f32, u8, inp.uniform([6], 0, 250)), (i32, i64, inp.ints([6], -9, 9))]
    for src, dst, x in casts:
        name = f"cast_{np.dtype(src).name}_to_{np.dtype(dst).name}"
        out += op_case(name, ["Cast"], f"Cast {np.dtype(src).name} to {np.dtype(dst).name}",
                       lambda x, dst=dst: tf.cast(x, dst), {"x": x},
                       grad=src in (f32, f64) and dst in (f32, f64))
    out += op_case("zeros_ones_like", ["ZerosLike", "OnesLike"], "ZerosLike and OnesLike",
                   lambda x, n: [raw.ZerosLike(x=x), raw.OnesLike(x=x), raw.ZerosLike(x=n), raw.OnesLike(x=n)],
                   {"x": inp.normal([2, 3]), "n": inp.ints([4], 0, 5)}, grad=False)
    out += op_case("add_n", ["AddN"], "AddN of three", lambda a, b_, c: raw.AddN(inputs=[a, b_, c]),
                   {"a": inp.normal([2, 3]), "b": inp.normal([2, 3]), "c": inp.normal([2, 3])})
    out += op_case("clip_by_value_scalar", ["ClipByValue"], "ClipByValue with scalar bounds",
                   lambda x: raw.ClipByValue(t=x, clip_value_min=-0.5, clip_value_max=0.7), {"x": inp.normal([3, 4])})
    out += op_case("clip_by_value_tensor", ["ClipByValue"], "ClipByValue with bounds of t's shape",
                   lambda x, lo, hi: raw.ClipByValue(t=x, clip_value_min=lo, clip_value_max=hi),
                   {"x": inp.normal([3, 4]), "lo": inp.uniform([3, 4], -1, -0.2), "hi": inp.uniform([3, 4], 0.1, 1)})
    return out


# --- Reductions ---------------------------------------------------------------------------------

@case
def reductions():
    out = []
    axes_cases = [("axis1", [1], False), ("neg_keep", [-1], True), ("axes02", [0, 2], False),
                  ("all_keep", [0, 1, 2], True), ("none", [], False)]
    for op in ("Sum", "Mean", "Max", "Min", "Prod"):
        fn = getattr(raw, op)
        for tag, axes, keep in axes_cases:
            name = f"{op.lower()}_{tag}"
            inp = Inputs(name)
            x = inp.distinct([2, 3, 4]) if op in ("Max", "Min") else inp.uniform([2, 3, 4], 0.5, 1.5)
            out += op_case(name, [op], f"{op} over axes {axes}, keep_dims={keep}",
                           lambda x, fn=fn, axes=axes, keep=keep: fn(input=x, axis=tf.constant(axes, tf.int32),
                                                                     keep_dims=keep),
                           {"x": x}, rtol=1e-5)
        name = f"{op.lower()}_int32"
        out += op_case(name, [op], f"{op} of int32 over axis 0",
                       lambda x, fn=fn: fn(input=x, axis=tf.constant(0), keep_dims=False),
                       {"x": Inputs(name).ints([4, 3], -5, 6)}, grad=False)
    inp = Inputs("all_any")
    out += op_case("all_any", ["All", "Any"], "All and Any over an axis, keep_dims, and over all",
                   lambda c: [tf.reduce_all(c, 1), tf.reduce_any(c, -1, keepdims=True), tf.reduce_all(c),
                              tf.reduce_any(c, [0, 1])],
                   {"c": inp.bools([4, 3])}, grad=False)
    out += op_case("sum_int64_axis", ["Sum"], "Sum with an int64 axis",
                   lambda x: raw.Sum(input=x, axis=tf.constant([1], tf.int64)), {"x": Inputs("s").normal([3, 4])})
    out += op_case("sum_empty_input", ["Sum"], "Sum over an empty dimension",
                   lambda x: raw.Sum(input=x, axis=tf.constant([0])), {"x": np.zeros([0, 3], f32)}, grad=False)
    for op, fn in (("Cumsum", tf.math.cumsum), ("Cumprod", tf.math.cumprod)):
        for tag, axis, exclusive, reverse in (("axis1", 1, False, False), ("exclusive_reverse", -1, True, True),
                                              ("axis0_reverse", 0, False, True)):
            name = f"{op.lower()}_{tag}"
            out += op_case(name, [op], f"{op} over axis {axis}, exclusive={exclusive}, reverse={reverse}",
                           lambda x, fn=fn, a=axis, e=exclusive, r=reverse: fn(x, a, exclusive=e, reverse=r),
                           {"x": Inputs(name).uniform([3, 4], 0.5, 1.5)}, rtol=1e-5)
    out += op_case("cumsum_int64", ["Cumsum"], "Cumsum of int64 with an int64 axis",
                   lambda x: tf.math.cumsum(x, tf.constant(0, tf.int64)), {"x": Inputs("cs").ints([4, 2], -9, 9, i64)},
                   grad=False)
    for op in ("ArgMax", "ArgMin"):
        fn = getattr(raw, op)
        for axis, otype in ((1, tf.int64), (-1, tf.int32), (0, tf.int64)):
            name = f"{op.lower()}_axis{axis}_{otype.name}"
            out += op_case(name, [op], f"{op} over axis {axis} as {otype.name}",
                           lambda x, fn=fn, axis=axis, otype=otype: fn(input=x, dimension=tf.constant(axis),
                                                                       output_type=otype),
                           {"x": Inputs(name).distinct([3, 5])}, grad=False)
    return out


# --- Matrices -----------------------------------------------------------------------------------

@case
def matmuls():
    out = []
    for ta in (False, True):
        for tb in (False, True):
            name = f"matmul_t{int(ta)}{int(tb)}"
            inp = Inputs(name)
            a = inp.normal([5, 3] if ta else [3, 5])
            bm = inp.normal([4, 5] if tb else [5, 4])
            out += op_case(name, ["MatMul"], f"MatMul transpose_a={ta} transpose_b={tb}",
                           lambda a, bm, ta=ta, tb=tb: raw.MatMul(a=a, b=bm, transpose_a=ta, transpose_b=tb),
                           {"a": a, "b": bm}, rtol=1e-5, atol=1e-6)
    inp = Inputs("matmul_f64")
    out += op_case("matmul_f64", ["MatMul"], "MatMul of float64", lambda a, bm: tf.matmul(a, bm),
                   {"a": inp.normal([4, 6], f64), "b": inp.normal([6, 2], f64)})
    out += op_case("batch_matmul_v2_broadcast", ["BatchMatMulV2"], "BatchMatMulV2 broadcasting batch dimensions",
                   lambda a, bm: raw.BatchMatMulV2(x=a, y=bm, adj_y=True),
                   {"a": inp.normal([2, 1, 3, 4]), "b": inp.normal([3, 5, 4])}, rtol=1e-5, atol=1e-6)
    out += op_case("batch_matmul_adj", ["BatchMatMul"], "BatchMatMul with adj_x",
                   lambda a, bm: raw.BatchMatMul(x=a, y=bm, adj_x=True),
                   {"a": inp.normal([2, 4, 3]), "b": inp.normal([2, 4, 5])}, rtol=1e-5, atol=1e-6)
    return out


# --- Arrays -------------------------------------------------------------------------------------

@case
def array_ops():
    out = []
    inp = Inputs("array_ops")
    x = inp.normal([2, 3, 4])
    out += op_case("reshape_infer", ["Reshape"], "Reshape with -1", lambda x: tf.reshape(x, [4, -1]), {"x": x})
    out += op_case("reshape_int64_shape", ["Reshape"], "Reshape with an int64 shape",
                   lambda x: raw.Reshape(tensor=x, shape=tf.constant([6, 4], tf.int64)), {"x": x})
    out += op_case("expand_dims_neg", ["ExpandDims"], "ExpandDims at axis -1",
                   lambda x: tf.expand_dims(x, -1), {"x": x})
    out += op_case("squeeze_axis", ["Squeeze"], "Squeeze one axis",
                   lambda x: tf.squeeze(x, [1]), {"x": inp.normal([3, 1, 2, 1])})
    out += op_case("squeeze_all", ["Squeeze"], "Squeeze every 1", lambda x: tf.squeeze(x),
                   {"x": inp.normal([3, 1, 2, 1])})
    out += op_case("shape_size_rank", ["Shape", "Size", "Rank"], "Shape (int32, int64), Size, Rank",
                   lambda x: [raw.Shape(input=x), raw.Shape(input=x, out_type=tf.int64), raw.Size(input=x),
                              raw.Rank(input=x)],
                   {"x": x}, grad=False)
    out += op_case("fill", ["Fill"], "Fill from fed dims and value",
                   lambda d, v: tf.fill(d, v), {"d": np.array([2, 3], i32), "v": np.array(1.5, f32)})
    out += op_case("placeholder_with_default_grad", ["PlaceholderWithDefault"], "PlaceholderWithDefault fed",
                   lambda p: tf.square(v1.placeholder_with_default(p * 2.0, [3])), {"p": inp.normal([3])})
    out += op_case("identity_n_stop_gradient", ["IdentityN", "Identity", "StopGradient"],
                   "IdentityN, Identity, StopGradient",
                   lambda a, c: list(raw.IdentityN(input=[a, c])) + [tf.identity(a), tf.stop_gradient(a) * a],
                   {"a": inp.normal([3]), "c": inp.ints([2], 0, 9)})
    out += op_case("concat_neg_axis", ["ConcatV2"], "ConcatV2 of three at axis -1",
                   lambda a, c, d: tf.concat([a, c, d], -1),
                   {"a": inp.normal([2, 3]), "c": inp.normal([2, 1]), "d": inp.normal([2, 2])})
    out += op_case("concat_axis0_int", ["ConcatV2"], "ConcatV2 of int32 with an empty piece",
                   lambda a, c: tf.concat([a, c], 0), {"a": inp.ints([2, 2], 0, 9), "c": np.zeros([0, 2], i32)},
                   grad=False)
    out += op_case("pack_unpack", ["Pack", "Unpack"], "Pack at axis 1, Unpack at axis 0",
                   lambda a, c: [tf.stack([a, c], axis=1)] + tf.unstack(a, axis=0),
                   {"a": inp.normal([2, 3]), "c": inp.normal([2, 3])})
    out += op_case("split", ["Split"], "Split into 3 along axis -1",
                   lambda a: tf.split(a, 3, axis=-1), {"a": inp.normal([2, 6])})
    out += op_case("split_v", ["SplitV"], "SplitV with a -1 size",
                   lambda a: tf.split(a, [1, -1, 2], axis=0), {"a": inp.normal([6, 2])})
    out += op_case("slice", ["Slice"], "Slice with a -1 size",
                   lambda a: tf.slice(a, [1, 0, 1], [1, -1, 2]), {"a": x})
    for tag, fn in (("basic", lambda a: a[1:, ::2, 1:3]), ("negative_stride", lambda a: a[::-1, 2:0:-1]),
                    ("shrink_newaxis", lambda a: a[1, tf.newaxis, :, -1]), ("ellipsis", lambda a: a[..., 1:]),
                    ("masks", lambda a: a[:, :2])):
        out += op_case(f"strided_slice_{tag}", ["StridedSlice"], f"StridedSlice ({tag})", fn, {"a": x})
    out += op_case("tile", ["Tile"], "Tile", lambda a: tf.tile(a, [2, 1, 3]), {"a": x})
    out += op_case("transpose", ["Transpose"], "Transpose with a permutation",
                   lambda a: tf.transpose(a, [2, 0, 1]), {"a": x})
    out += op_case("pad", ["Pad"], "Pad", lambda a: tf.pad(a, [[1, 0], [0, 2], [1, 1]]), {"a": x})
    out += op_case("pad_v2", ["PadV2"], "PadV2 with a constant",
                   lambda a: tf.pad(a, [[0, 1], [2, 0]], constant_values=-3.0), {"a": inp.normal([2, 3])})
    out += op_case("broadcast_to", ["BroadcastTo"], "BroadcastTo", lambda a: tf.broadcast_to(a, [4, 2, 3]),
                   {"a": inp.normal([2, 1])})
    out += op_case("one_hot", ["OneHot"], "OneHot with on/off values and an index out of range",
                   lambda i: [tf.one_hot(i, 4, on_value=2.0, off_value=-1.0), tf.one_hot(i, 4, axis=0)],
                   {"i": np.array([0, 3, -1, 5, 2], i32)}, grad=False)
    out += op_case("one_hot_int64", ["OneHot"], "OneHot of int64 indices as int32",
                   lambda i: tf.one_hot(i, 3, dtype=tf.int32), {"i": np.array([[0, 2], [1, 1]], i64)}, grad=False)
    out += op_case("gather_v2_axis1", ["GatherV2"], "GatherV2 along axis 1",
                   lambda p, i: tf.gather(p, i, axis=1), {"p": x, "i": np.array([[2, 0], [1, 1]], i32)})
    out += op_case("gather_v2_negative_axis", ["GatherV2"], "GatherV2 along axis -1 with int64 indices",
                   lambda p, i: tf.gather(p, i, axis=-1), {"p": x, "i": np.array([[3, 0], [1, 1]], i64)})
    out += op_case("top_k", ["TopKV2"], "TopKV2", lambda a: list(tf.math.top_k(a, 3)),
                   {"a": inp.distinct([3, 6])})
    out += op_case("where", ["Where"], "Where of a boolean matrix", lambda c: tf.where(c),
                   {"c": inp.bools([3, 4])}, grad=False)
    out += op_case("invert_permutation", ["InvertPermutation"], "InvertPermutation",
                   lambda p: tf.math.invert_permutation(p), {"p": np.array([2, 4, 0, 1, 3], i32)}, grad=False)
    out += op_case("dynamic_partition_stitch", ["DynamicPartition", "DynamicStitch"],
                   "DynamicPartition into 3, DynamicStitch back",
                   lambda d, p: tf.dynamic_stitch(tf.dynamic_partition(tf.range(6), p, 3),
                                                  tf.dynamic_partition(d, p, 3)),
                   {"d": inp.normal([6, 2]), "p": np.array([2, 0, 1, 0, 2, 2], i32)})
    out += op_case("unsorted_segment_sum", ["UnsortedSegmentSum"], "UnsortedSegmentSum with an id out of range",
                   lambda d, s: tf.math.unsorted_segment_sum(d, s, 4),
                   {"d": inp.normal([5, 3]), "s": np.array([0, 3, -1, 0, 2], i32)})
    out += op_case("concat_offset", ["ConcatOffset"], "ConcatOffset",
                   lambda a, c: raw.ConcatOffset(concat_dim=1, shape=[a, c]),
                   {"a": np.array([2, 3, 5], i32), "c": np.array([2, 7, 5], i32)}, grad=False)
    out += op_case("broadcast_gradient_args", ["BroadcastGradientArgs"], "BroadcastGradientArgs",
                   lambda s0, s1: list(raw.BroadcastGradientArgs(s0=s0, s1=s1)),
                   {"s0": np.array([2, 1, 4], i32), "s1": np.array([3, 1], i32)}, grad=False)
    out += op_case("range", ["Range"], "Range of int32 (fed), float and negative steps",
                   lambda n: [tf.range(n), tf.range(2, n, 3), tf.range(1.5, -2.0, -0.75), tf.range(10, 2, -4, tf.int64)],
                   {"n": np.array(7, i32)}, grad=False)
    out += op_case("lin_space", ["LinSpace"], "LinSpace of float and double, num fed and 1",
                   lambda n: [tf.linspace(-1.0, 2.0, n), tf.linspace(tf.constant(0.5, tf.float64), 3.0, 7),
                              tf.linspace(3.0, 4.0, 1)],
                   {"n": np.array(5, i32)}, grad=False)
    out += op_case("in_top_k", ["InTopKV2"], "InTopKV2 (tf.math.in_top_k) with ties and k 1 and 2",
                   lambda p, t: [tf.math.in_top_k(t, p, 1), tf.math.in_top_k(t, p, 2)],
                   {"p": np.array([[0.1, 0.5, 0.5, 0.2], [0.9, 0.1, 0.3, 0.3], [0.2, 0.2, 0.2, 0.2]], f32),
                    "t": np.array([2, 3, 0], i32)}, grad=False)
    out += op_case("shape_n", ["ShapeN"], "ShapeN of three, int64",
                   lambda a, c, d: list(raw.ShapeN(input=[a, c, d], out_type=tf.int64)),
                   {"a": inp.normal([2, 3]), "c": inp.normal([4]), "d": inp.normal([])}, grad=False)
    out += op_case("logical_ops", ["LogicalAnd", "LogicalOr", "LogicalNot"], "LogicalAnd/Or with broadcasting, LogicalNot",
                   lambda p, q: [tf.logical_and(p, q), tf.logical_or(p, q), tf.logical_not(p)],
                   {"p": inp.bools([3, 4]), "q": inp.bools([4])}, grad=False)
    out += op_case("list_diff", ["ListDiff"], "ListDiff (tf.compat.v1.setdiff1d) with int64 positions",
                   lambda x_, y_: list(raw.ListDiff(x=x_, y=y_, out_idx=tf.int64)),
                   {"x": np.array([4, 1, 7, 1, 9, 3], i32), "y": np.array([1, 3, 8], i32)}, grad=False)
    out += op_case("scatter_nd", ["ScatterNd"], "ScatterNd of rows with a duplicate index",
                   lambda i, u: tf.scatter_nd(i, u, [4, 3]),
                   {"i": np.array([[1], [3], [1]], i32), "u": inp.normal([3, 3])})
    out += op_case("scatter_nd_elements", ["ScatterNd"], "ScatterNd of single elements, int64 indices",
                   lambda i, u: tf.scatter_nd(i, u, tf.constant([2, 3], tf.int64)),
                   {"i": np.array([[0, 2], [1, 0]], i64), "u": inp.normal([2])})
    out += op_case("gather_nd_elements", ["GatherNd"], "GatherNd of single elements",
                   lambda p, i: tf.gather_nd(p, i), {"p": inp.normal([3, 4]), "i": np.array([[0, 3], [2, 1], [0, 3]], i32)})
    out += op_case("gather_nd_slices", ["GatherNd"], "GatherNd of rows with batch-shaped int64 indices",
                   lambda p, i: tf.gather_nd(p, i), {"p": x, "i": np.array([[[1], [0]], [[1], [1]]], i64)})
    out += op_case("reverse_v2", ["ReverseV2"], "ReverseV2 over axes 0 and -1",
                   lambda a: tf.reverse(a, [0, -1]), {"a": x})
    out += op_case("unique", ["Unique"], "Unique with int64 positions",
                   lambda a: list(tf.unique(a, out_idx=tf.int64)), {"a": np.array([3, 1, 3, 7, 1, 0], i32)}, grad=False)
    out += op_case("broadcast_args", ["BroadcastArgs"], "BroadcastArgs",
                   lambda s0, s1: raw.BroadcastArgs(s0=s0, s1=s1),
                   {"s0": np.array([2, 1, 4], i32), "s1": np.array([3, 1], i32)}, grad=False)
    out += op_case("check_numerics", ["CheckNumerics"], "CheckNumerics of finite values",
                   lambda a: tf.debugging.check_numerics(a * 2.0, "doubled"), {"a": inp.normal([3])})
    c = Case("check_numerics_nan", ["CheckNumerics"], "CheckNumerics fails on a NaN, naming its message")
    with c.graph.as_default():
        a = v1.placeholder(tf.float32, [3], name="a")
        checked = tf.debugging.check_numerics(tf.math.log(a), "log of a")
        c.run([checked.name], {a.name: np.array([1.0, 2.0, 3.0], f32)})
        c.run([checked.name], {a.name: np.array([1.0, -1.0, 3.0], f32)}, error="log of a : Tensor had NaN values")
    out.append(c)
    out += op_case("parallel_dynamic_stitch", ["ParallelDynamicStitch"], "ParallelDynamicStitch of distinct indices",
                   lambda d0, d1: raw.ParallelDynamicStitch(indices=[tf.constant([0, 2]), tf.constant([1, 3])], data=[d0, d1]),
                   {"d0": inp.normal([2, 2]), "d1": inp.normal([2, 2])})
    c = Case("placeholder_with_default", ["PlaceholderWithDefault", "Const"],
             "PlaceholderWithDefault fed and not fed; Const of several dtypes")
    with c.graph.as_default():
        p = v1.placeholder_with_default(tf.constant([1.0, 2.0]), [2], name="p")
        consts = [tf.constant(v) for v in (np.arange(6, dtype=f64).reshape(2, 3), np.array([True, False]),
                                           np.array(7, i64), np.array([255, 0], u8))]
        c.run([p.name] + [k.name for k in consts])
        c.run([tf.identity(p * 2).name], {p.name: np.array([5.0, -1.0], f32)})
    out.append(c)
    return out


# --- Neural network ops -------------------------------------------------------------------------

@case
def nn_ops():
    out = []
    inp = Inputs("nn_ops")
    out += op_case("bias_add_nhwc", ["BiasAdd"], "BiasAdd NHWC", lambda v, bb: tf.nn.bias_add(v, bb),
                   {"v": inp.normal([2, 3, 3, 4]), "b": inp.normal([4])})
    out += op_case("bias_add_nchw", ["BiasAdd"], "BiasAdd NCHW",
                   lambda v, bb: tf.nn.bias_add(v, bb, data_format="NCHW"),
                   {"v": inp.normal([2, 4, 3, 3]), "b": inp.normal([4])})
    for tag, strides, padding, shape, fshape, dil in (
            ("same", 1, "SAME", [2, 5, 5, 3], [3, 3, 3, 4], 1), ("valid_s2", 2, "VALID", [1, 7, 6, 2], [3, 2, 2, 3], 1),
            ("same_s2", 2, "SAME", [2, 6, 6, 3], [5, 5, 3, 2], 1), ("1x1", 1, "VALID", [2, 4, 4, 3], [1, 1, 3, 5], 1),
            ("dilated", 1, "SAME", [1, 6, 6, 2], [3, 3, 2, 2], 2)):
        name = f"conv2d_{tag}"
        ci = Inputs(name)
        out += op_case(name, ["Conv2D"], f"Conv2D {padding} stride {strides} dilation {dil} of {shape} by {fshape}",
                       lambda v, f, s=strides, p=padding, d=dil: tf.nn.conv2d(v, f, s, p, dilations=d),
                       {"x": ci.normal(shape), "f": ci.normal(fshape)}, rtol=1e-4, atol=1e-5)
    out += op_case("conv2d_backprop_input", ["Conv2DBackpropInput"], "Conv2DBackpropInput (conv2d_transpose), stride 2",
                   lambda dy, f: raw.Conv2DBackpropInput(input_sizes=tf.constant([2, 7, 7, 3]), filter=f, out_backprop=dy,
                                                         strides=[1, 2, 2, 1], padding="SAME"),
                   {"dy": inp.normal([2, 4, 4, 2]), "f": inp.normal([3, 3, 3, 2])}, rtol=1e-4, atol=1e-5)
    out += op_case("conv2d_backprop_filter", ["Conv2DBackpropFilter"], "Conv2DBackpropFilter, VALID",
                   lambda v, dy: raw.Conv2DBackpropFilter(input=v, filter_sizes=tf.constant([3, 3, 2, 4]), out_backprop=dy,
                                                          strides=[1, 1, 1, 1], padding="VALID"),
                   {"x": inp.normal([2, 6, 5, 2]), "dy": inp.normal([2, 4, 3, 4])}, rtol=1e-4, atol=1e-5)
    out += op_case("avg_pool_grad", ["AvgPoolGrad"], "AvgPoolGrad 3x3 stride 2 SAME",
                   lambda dy: raw.AvgPoolGrad(orig_input_shape=tf.constant([2, 5, 5, 3]), grad=dy, ksize=[1, 3, 3, 1],
                                              strides=[1, 2, 2, 1], padding="SAME"),
                   {"dy": inp.normal([2, 3, 3, 3])}, rtol=1e-5)
    out += op_case("selu_softsign_grad", ["SeluGrad", "SoftsignGrad"], "SeluGrad and SoftsignGrad",
                   lambda dy, o, v: [raw.SeluGrad(gradients=dy, outputs=o), raw.SoftsignGrad(gradients=dy, features=v)],
                   {"dy": inp.normal([3, 4]), "outputs": inp.normal([3, 4]), "x": inp.normal([3, 4])}, grad=False,
                   rtol=1e-5)
    out += op_case("softplus_grad", ["SoftplusGrad"], "SoftplusGrad",
                   lambda dy, v: raw.SoftplusGrad(gradients=dy, features=v),
                   {"dy": inp.normal([3, 4]), "x": inp.normal([3, 4])}, grad=False, rtol=1e-5)
    out += op_case("conv2d_explicit_padding", ["Conv2D"], "Conv2D with EXPLICIT padding",
                   lambda v, f: tf.nn.conv2d(v, f, 1, [[0, 0], [1, 2], [0, 1], [0, 0]]),
                   {"x": inp.normal([1, 4, 4, 2]), "f": inp.normal([3, 3, 2, 2])}, rtol=1e-4, atol=1e-5)
    for op, fn in (("MaxPool", tf.nn.max_pool2d), ("AvgPool", tf.nn.avg_pool2d)):
        for tag, k, s, p in (("same", 3, 2, "SAME"), ("valid", 2, 2, "VALID"), ("overlap", 3, 1, "VALID")):
            name = f"{op.lower()}_{tag}"
            pi = Inputs(name)
            out += op_case(name, [op], f"{op} {k}x{k} stride {s} {p}",
                           lambda v, fn=fn, k=k, s=s, p=p: fn(v, k, s, p),
                           {"x": pi.distinct([2, 6, 5, 3])}, rtol=1e-5)
    out += op_case("lrn", ["LRN"], "LRN as AlexNet uses it",
                   lambda v: tf.nn.local_response_normalization(v, 2, 1.0, 2e-5, 0.75),
                   {"x": inp.normal([2, 3, 3, 8])}, rtol=1e-4, atol=1e-5)
    out += op_case("fused_batch_norm_training", ["FusedBatchNormV3"], "FusedBatchNormV3 training",
                   lambda v, s, o: list(tf.compat.v1.nn.fused_batch_norm(v, s, o, epsilon=1e-3))[:1],
                   {"x": inp.normal([2, 3, 3, 4]), "scale": inp.uniform([4], 0.5, 1.5), "offset": inp.normal([4])},
                   rtol=1e-4, atol=1e-5)
    out += op_case("fused_batch_norm_inference", ["FusedBatchNormV3"], "FusedBatchNormV3 inference",
                   lambda v, s, o, m, var: tf.compat.v1.nn.fused_batch_norm(v, s, o, m, var, 1e-3,
                                                                             is_training=False)[0],
                   {"x": inp.normal([2, 3, 3, 4]), "scale": inp.uniform([4], 0.5, 1.5), "offset": inp.normal([4]),
                    "mean": inp.normal([4]), "var": inp.uniform([4], 0.5, 2)}, rtol=1e-4, atol=1e-5)
    for op in ("FusedBatchNorm", "FusedBatchNormV2"):
        fn = getattr(raw, op)
        for training in (True, False):
            name = f"{op.lower()}_{'training' if training else 'inference'}"
            bi = Inputs(name)
            out += op_case(name, [op], f"{op} (TF 1.x's), is_training={training}",
                           lambda v, sc, of, m, var, fn=fn, tr=training: fn(x=v, scale=sc, offset=of, mean=m,
                                                                             variance=var, epsilon=1e-3,
                                                                             is_training=tr)[0],
                           {"x": bi.normal([2, 3, 3, 4]), "scale": bi.uniform([4], 0.5, 1.5), "offset": bi.normal([4]),
                            "mean": bi.normal([4]) if not training else np.zeros([4], f32),
                            "var": bi.uniform([4], 0.5, 2) if not training else np.ones([4], f32)},
                           rtol=1e-4, atol=1e-5)
    for op, fn in (("Softmax", tf.nn.softmax), ("LogSoftmax", tf.nn.log_softmax)):
        out += op_case(op.lower(), [op], op, lambda v, fn=fn: fn(v), {"x": inp.normal([4, 7])}, rtol=1e-5, atol=1e-6)
    out += op_case("softmax_cross_entropy", ["SoftmaxCrossEntropyWithLogits"], "softmax cross-entropy",
                   lambda lg, lb: tf.nn.softmax_cross_entropy_with_logits(labels=lb, logits=lg),
                   {"logits": inp.normal([4, 5]), "labels": _softmax(inp.normal([4, 5]))}, rtol=1e-5, atol=1e-6)
    out += op_case("sparse_softmax_cross_entropy", ["SparseSoftmaxCrossEntropyWithLogits"],
                   "sparse softmax cross-entropy, int64 labels",
                   lambda lg, lb: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=lb, logits=lg),
                   {"logits": inp.normal([4, 5]), "labels": np.array([0, 4, 2, 2], i64)}, rtol=1e-5, atol=1e-6)
    out += op_case("l2_loss", ["L2Loss"], "L2Loss", lambda v: tf.nn.l2_loss(v), {"x": inp.normal([3, 4])},
                   rtol=1e-5)
    for op, fn, lo, hi in (("Relu6", tf.nn.relu6, -2, 8), ("Elu", tf.nn.elu, -2, 2), ("Softplus", tf.nn.softplus, -3, 3)):
        out += op_case(f"{op.lower()}_of_sum", [op], f"{op} after an Add", lambda a, c, fn=fn: fn(a + c),
                       {"a": inp.uniform([3, 4], lo, hi), "c": inp.normal([4], scale=0.1)}, rtol=1e-5)
    return out


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


# --- Random ops (shapes only: troupe's generator is not TensorFlow's) ---------------------------

@case
def rnn_ops():
    """BlockLSTM and BlockLSTMV2 (TensorFlow's fused LSTM) and, through tf.gradients, their
    gradient ops; past seq_len_max TensorFlow leaves i, f, o, ci and co unset, so those
    cases fetch cs and h only."""
    out = []
    settings = [
        # name, op, time, batch, input, cell, seq_len_max, attributes, fetch every output
        ("block_lstm", "BlockLSTM", 4, 3, 5, 6, 4, {}, True),
        ("block_lstm_peephole_clip", "BlockLSTM", 5, 2, 3, 4, 3,
         {"use_peephole": True, "cell_clip": 0.5, "forget_bias": 0.7}, False),
        ("block_lstm_v2", "BlockLSTMV2", 3, 2, 4, 5, 3, {"use_peephole": True}, True),
    ]
    for name, op, time, batch, inputs, cell, steps, attrs, every in settings:
        ri = Inputs(name)
        fn = getattr(raw, op)

        def build(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, fn=fn, attrs=attrs, every=every):
            outs = fn(seq_len_max=seq_len_max, x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf,
                      wco=wco, b=b, **attrs)
            return list(outs) if every else [outs[1], outs[6]]

        feeds = {"seq_len_max": np.array(steps, i64), "x": ri.normal([time, batch, inputs]),
                 "cs_prev": ri.normal([batch, cell]), "h_prev": ri.normal([batch, cell]),
                 "w": ri.normal([inputs + cell, 4 * cell], scale=0.5), "wci": ri.normal([cell]),
                 "wcf": ri.normal([cell]), "wco": ri.normal([cell]), "b": ri.normal([4 * cell])}
        out += op_case(name, [op, op.replace("LSTM", "LSTMGrad")],
                       f"{op} over {time} steps (seq_len_max {steps}), batch {batch}, input {inputs}, cell {cell}"
                       + (f", {attrs}" if attrs else ""), build, feeds, rtol=1e-5, atol=1e-5)
    for name, attrs in (("lstm_block_cell", {}),
                        ("lstm_block_cell_peephole", {"use_peephole": True, "cell_clip": -1.0, "forget_bias": 0.5})):
        ci = Inputs(name)
        batch, inputs, cell = 3, 5, 4

        # TensorFlow 2 registers no gradient for LSTMBlockCell (TF 1.x's contrib did): the
        # gradient op is called directly on the cell's outputs.
        def build_cell(x, cs_prev, h_prev, w, wci, wcf, wco, b, cs_grad, h_grad, attrs=attrs):
            outs = raw.LSTMBlockCell(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b, **attrs)
            grads = raw.LSTMBlockCellGrad(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b,
                                          i=outs[0], cs=outs[1], f=outs[2], o=outs[3], ci=outs[4], co=outs[5],
                                          cs_grad=cs_grad, h_grad=h_grad,
                                          use_peephole=attrs.get("use_peephole", False))
            return list(outs) + list(grads)

        feeds = {"x": ci.normal([batch, inputs]), "cs_prev": ci.normal([batch, cell]), "h_prev": ci.normal([batch, cell]),
                 "w": ci.normal([inputs + cell, 4 * cell], scale=0.5), "wci": ci.normal([cell]),
                 "wcf": ci.normal([cell]), "wco": ci.normal([cell]), "b": ci.normal([4 * cell]),
                 "cs_grad": ci.normal([batch, cell]), "h_grad": ci.normal([batch, cell])}
        out += op_case(name, ["LSTMBlockCell", "LSTMBlockCellGrad"],
                       f"LSTMBlockCell and LSTMBlockCellGrad, batch {batch}, input {inputs}, cell {cell}"
                       + (f", {attrs}" if attrs else ""), build_cell, feeds, grad=False, rtol=1e-5, atol=1e-5)
    return out


@case
def random_ops():
    out = []
    for op, fn in (("RandomUniform", lambda s: tf.random.uniform(s, seed=1)),
                   ("RandomStandardNormal", lambda s: tf.random.normal(s, seed=2)),
                   ("TruncatedNormal", lambda s: tf.random.truncated_normal(s, seed=3))):
        out += op_case(op.lower(), [op], f"{op} of a fed shape (dtype and shape compared)", fn,
                       {"shape": np.array([3, 4], i32)}, grad=False, compare="SHAPE")
    out += op_case("random_uniform_int", ["RandomUniformInt"], "RandomUniformInt, int32 and int64 (shapes compared)",
                   lambda s_: [tf.random.uniform(s_, 0, 10, tf.int32, seed=5),
                               tf.random.uniform(s_, -5, 5, tf.int64, seed=6)],
                   {"shape": np.array([3, 4], i32)}, grad=False, compare="SHAPE")
    out += op_case("log_uniform_candidate_sampler", ["LogUniformCandidateSampler"],
                   "LogUniformCandidateSampler (shapes compared)",
                   lambda t: list(tf.random.log_uniform_candidate_sampler(t, 1, 5, True, 20, seed=4)),
                   {"true": np.array([[1], [7]], i64)}, grad=False, compare="SHAPE")
    out += op_case("compute_accidental_hits", ["ComputeAccidentalHits"], "ComputeAccidentalHits",
                   lambda t, s: list(tf.nn.compute_accidental_hits(t, s, 1)),
                   {"true": np.array([[1], [7], [3]], i64), "sampled": np.array([7, 1, 0, 3], i64)}, grad=False)
    return out


# --- Variables, optimizers, queues --------------------------------------------------------------

def _resource_var(name, value):
    return v1.get_variable(name, initializer=tf.constant(value), use_resource=True)


@case
def variable_ops():
    out = []
    inp = Inputs("variables")
    c = Case("resource_variable_ops", ["VarHandleOp", "AssignVariableOp", "ReadVariableOp",
                                       "AssignAddVariableOp", "AssignSubVariableOp", "VarIsInitializedOp"],
             "resource variable: initialized?, assign, add, sub, read", binary=True)
    with c.graph.as_default():
        v = _resource_var("v", inp.normal([2, 3]))
        delta = v1.placeholder(tf.float32, [2, 3], name="delta")
        is_init = raw.VarIsInitializedOp(resource=v.handle)
        add = v.assign_add(delta, read_value=False)
        sub = v.assign_sub(delta * 0.5, read_value=False)
        read = tf.identity(v.read_value(), name="read")
        c.run([is_init.name])
        c.run(targets=[v.initializer.name])
        c.run([is_init.name])
        c.run(feeds={delta.name: inp.normal([2, 3])}, targets=[add.name])
        c.run([read.name])
        c.run(feeds={delta.name: inp.normal([2, 3])}, targets=[sub.name], repeat=2)
        c.run([read.name])
        c.run(targets=[v.assign(tf.ones([2, 3]) * 4.0, read_value=False).name])
        c.run([read.name])
    out.append(c)
    c = Case("resource_gather_scatter", ["ResourceGather", "ResourceScatterAdd", "DestroyResourceOp"],
             "ResourceGather, ResourceScatterAdd (embedding rows), DestroyResourceOp", binary=True)
    with c.graph.as_default():
        e = _resource_var("emb", inp.normal([5, 3]))
        ids = v1.placeholder(tf.int32, [None], name="ids")
        rows = tf.identity(tf.nn.embedding_lookup(e, ids), name="rows")
        upd = v1.placeholder(tf.float32, [None, 3], name="updates")
        scatter = raw.ResourceScatterAdd(resource=e.handle, indices=ids, updates=upd)
        c.run(targets=[e.initializer.name])
        c.run([rows.name], {ids.name: np.array([4, 0, 4], i32)})
        c.run([], {ids.name: np.array([1, 1, 3], i32), upd.name: inp.normal([3, 3])}, targets=[scatter.name])
        c.run([tf.identity(e.read_value()).name])
        c.run(targets=[raw.DestroyResourceOp(resource=e.handle).name])
    out.append(c)
    optimizers = {
        "gradient_descent": (["ResourceApplyGradientDescent"], lambda: v1.train.GradientDescentOptimizer(0.1)),
        "momentum": (["ResourceApplyMomentum"], lambda: v1.train.MomentumOptimizer(0.05, 0.9)),
        "nesterov": (["ResourceApplyMomentum"], lambda: v1.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True)),
        "adagrad": (["ResourceApplyAdagrad"], lambda: v1.train.AdagradOptimizer(0.1)),
        "adam": (["ResourceApplyAdam"], lambda: v1.train.AdamOptimizer(0.01)),
        "rmsprop": (["ResourceApplyRMSProp"], lambda: v1.train.RMSPropOptimizer(0.01, momentum=0.5)),
    }
    for tag, (ops, make) in optimizers.items():
        c = Case(f"optimizer_{tag}", ops, f"3 steps of tf.compat.v1.train's {tag} on resource variables",
                 binary=True, rtol=1e-5, atol=1e-6)
        with c.graph.as_default():
            x = v1.placeholder(tf.float32, [4, 3], name="x")
            w = _resource_var("w", inp.normal([3, 2]))
            bias = _resource_var("b", np.zeros([2], f32))
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + bias))
            step = make().minimize(loss)
            c.run(targets=[v1.global_variables_initializer().name])
            c.run([loss.name], {x.name: inp.normal([4, 3])}, targets=[step.name], repeat=3)
            c.run([tf.identity(w.read_value()).name, tf.identity(bias.read_value()).name])
        out.append(c)
    return out


@case
def queue_ops():
    out = []
    inp = Inputs("queues")
    c = Case("fifo_queue", ["FIFOQueueV2", "QueueEnqueueV2", "QueueEnqueueManyV2", "QueueDequeueV2",
                            "QueueDequeueManyV2", "QueueDequeueUpToV2", "QueueSizeV2", "QueueCloseV2"],
             "FIFOQueue: enqueue, enqueue many, dequeue, dequeue many, size, close, dequeue up to")
    with c.graph.as_default():
        q = tf.queue.FIFOQueue(10, [tf.float32, tf.int32], shapes=[[2], []])
        a = v1.placeholder(tf.float32, [None, 2], name="a")
        n = v1.placeholder(tf.int32, [None], name="n")
        c.run(targets=[q.enqueue_many([a, n]).name], feeds={a.name: inp.normal([3, 2]), n.name: np.array([1, 2, 3], i32)})
        c.run(targets=[q.enqueue([tf.constant([9.0, 8.0]), tf.constant(4)]).name])
        c.run([q.size().name])
        c.run([t.name for t in q.dequeue()])
        c.run([t.name for t in q.dequeue_many(2)])
        c.run(targets=[q.close().name])
        c.run([t.name for t in q.dequeue_up_to(5)])
    out.append(c)
    c = Case("padding_fifo_queue", ["PaddingFIFOQueueV2"], "PaddingFIFOQueue pads a batch to its longest")
    with c.graph.as_default():
        q = tf.queue.PaddingFIFOQueue(5, [tf.int32], shapes=[[None]])
        s = v1.placeholder(tf.int32, [None], name="s")
        enq = q.enqueue([s])
        c.run(targets=[enq.name], feeds={s.name: np.array([1, 2, 3], i32)})
        c.run(targets=[enq.name], feeds={s.name: np.array([4], i32)})
        c.run([q.dequeue_many(2).name])
    out.append(c)
    c = Case("random_shuffle_queue", ["RandomShuffleQueueV2"],
             "RandomShuffleQueue returns what went in (order compared sorted)")
    with c.graph.as_default():
        q = tf.queue.RandomShuffleQueue(10, 0, [tf.int32], shapes=[[]], seed=5)
        c.run(targets=[q.enqueue_many([tf.range(6)]).name])
        d = q.dequeue_many(6)
        c.run([d.name], compare={d.name: "SORTED"})
    out.append(c)
    return out


def _raw_accumulator_case(name, sparse):
    """The ref-handle accumulators (what TF 1.x graphs have), through raw ops."""
    ops = (["SparseConditionalAccumulator", "SparseAccumulatorApplyGradient", "SparseAccumulatorTakeGradient"]
           if sparse else ["ConditionalAccumulator", "AccumulatorApplyGradient", "AccumulatorNumAccumulated",
                           "AccumulatorSetGlobalStep", "AccumulatorTakeGradient"])
    c = Case(name, ops, f"{ops[0]} (reference handle): apply, count, take, stale gradients dropped")
    inp = Inputs(name)
    with c.graph.as_default():
        if sparse:
            acc = raw.SparseConditionalAccumulator(dtype=tf.float32, shape=[4, 2], shared_name="acc")
            idx = v1.placeholder(tf.int64, [None], name="indices")
            val = v1.placeholder(tf.float32, [None, 2], name="values")
            t = v1.placeholder(tf.int64, [], name="t")
            apply = raw.SparseAccumulatorApplyGradient(handle=acc, local_step=t, gradient_indices=idx,
                                                       gradient_values=val, gradient_shape=tf.constant([4, 2], tf.int64),
                                                       has_known_shape=True)
            c.run(targets=[apply.name], feeds={idx.name: np.array([0, 3], i64), val.name: inp.normal([2, 2]),
                                               t.name: np.array(0, i64)})
            c.run(targets=[apply.name], feeds={idx.name: np.array([3], i64), val.name: inp.normal([1, 2]),
                                               t.name: np.array(0, i64)})
            took = raw.SparseAccumulatorTakeGradient(handle=acc, num_required=2, dtype=tf.float32)
            c.run([took.indices.name, took.values.name, took.shape.name])
        else:
            acc = raw.ConditionalAccumulator(dtype=tf.float32, shape=[2, 2], shared_name="acc", reduction_type="SUM")
            g = v1.placeholder(tf.float32, [2, 2], name="g")
            t = v1.placeholder(tf.int64, [], name="t")
            apply = raw.AccumulatorApplyGradient(handle=acc, local_step=t, gradient=g)
            c.run(targets=[apply.name], feeds={g.name: inp.normal([2, 2]), t.name: np.array(0, i64)})
            c.run(targets=[apply.name], feeds={g.name: inp.normal([2, 2]), t.name: np.array(0, i64)})
            c.run([raw.AccumulatorNumAccumulated(handle=acc).name])
            c.run([raw.AccumulatorTakeGradient(handle=acc, num_required=2, dtype=tf.float32).name])
            c.run(targets=[raw.AccumulatorSetGlobalStep(handle=acc, new_global_step=4).name])
            c.run(targets=[apply.name], feeds={g.name: inp.normal([2, 2]), t.name: np.array(1, i64)})
            c.run([raw.AccumulatorNumAccumulated(handle=acc).name])
    return c


@case
def accumulator_ops():
    c = Case("conditional_accumulator", ["ConditionalAccumulator", "AccumulatorApplyGradient",
                                         "AccumulatorNumAccumulated", "AccumulatorTakeGradient",
                                         "AccumulatorSetGlobalStep"],
             "ConditionalAccumulator averages gradients of the current step, drops stale ones")
    inp = Inputs("accumulator")
    with c.graph.as_default():
        acc = v1.ConditionalAccumulator(tf.float32, shape=[2, 2], reduction_type="MEAN")
        g = v1.placeholder(tf.float32, [2, 2], name="g")
        t = v1.placeholder(tf.int64, [], name="t")
        apply = acc.apply_grad(g, local_step=t)
        c.run(targets=[apply.name], feeds={g.name: inp.normal([2, 2]), t.name: np.array(0, i64)})
        c.run(targets=[apply.name], feeds={g.name: inp.normal([2, 2]), t.name: np.array(0, i64)})
        c.run([acc.num_accumulated().name])
        c.run([acc.take_grad(2).name])
        c.run(targets=[acc.set_global_step(5).name])
        c.run(targets=[apply.name], feeds={g.name: inp.normal([2, 2]), t.name: np.array(3, i64)})
        c.run([acc.num_accumulated().name])
    return [c, _raw_accumulator_case("accumulator_ref_handle", False),
            _raw_accumulator_case("sparse_accumulator_ref_handle", True)]


# --- Whole models: a training step, as TensorFlow 1.x users wrote them ---------------------------

def _dense(x, inp, name, n_in, n_out, activation=None):
    w = _resource_var(f"{name}/w", inp.normal([n_in, n_out], scale=1.0 / np.sqrt(n_in)))
    b_ = _resource_var(f"{name}/b", inp.normal([n_out], scale=0.1))
    y = tf.matmul(x, w) + b_
    return activation(y) if activation else y


def _train_case(name, ops, what, build, feeds, optimizer, steps=3, rtol=1e-4, atol=1e-5):
    """A model whose variables start at constants: initialize, train `steps` steps on the
    same batch (the loss fetched at each), then fetch every variable."""
    c = Case(name, ops, what, binary=True, rtol=rtol, atol=atol)
    with c.graph.as_default():
        phs = placeholders(feeds)
        loss = build(c.inputs, *phs)
        train = optimizer().minimize(loss)
        c.run(targets=[v1.global_variables_initializer().name])
        feed = {p.name: v for p, v in zip(phs, feeds.values())}
        for _ in range(steps):
            c.run([loss.name], feed, targets=[train.name])
        reads = [tf.identity(v.read_value()) if hasattr(v, "read_value") else tf.identity(v)
                 for v in v1.global_variables()]
        c.run([r.name for r in reads])
    return c


def _mlp_loss(inp, x, labels):
    h = _dense(x, inp, "hidden1", 20, 16, tf.nn.relu)
    h = _dense(h, inp, "hidden2", 16, 12, tf.nn.relu)
    logits = _dense(h, inp, "logits", 12, 5)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _lenet_loss(inp, images, labels):
    k1 = _resource_var("conv1/w", inp.normal([5, 5, 1, 4], scale=0.2))
    c1 = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(images, k1, 1, "SAME"), _resource_var("conv1/b", np.zeros([4], f32))))
    p1 = tf.nn.max_pool2d(c1, 2, 2, "VALID")
    k2 = _resource_var("conv2/w", inp.normal([5, 5, 4, 6], scale=0.1))
    c2 = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(p1, k2, 1, "VALID"), _resource_var("conv2/b", np.zeros([6], f32))))
    p2 = tf.nn.max_pool2d(c2, 2, 2, "VALID")
    flat = tf.reshape(p2, [-1, 2 * 2 * 6])
    h = _dense(flat, inp, "fc1", 24, 10, tf.nn.relu)
    logits = _dense(h, inp, "fc2", 10, 3)
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=tf.one_hot(labels, 3), logits=logits))


def _lstm_loss(inp, xs, target):
    """An LSTM cell written out as TF 1.x tutorials did (one fused matmul, split into
    gates), unrolled over the time steps of xs [time, batch, features]."""
    n_in, n_hidden = 3, 4
    w = _resource_var("lstm/kernel", inp.normal([n_in + n_hidden, 4 * n_hidden], scale=0.4))
    bias = _resource_var("lstm/bias", np.zeros([4 * n_hidden], f32))
    batch = tf.shape(xs)[1]
    h = tf.zeros(tf.stack([batch, n_hidden]))
    c_state = tf.zeros(tf.stack([batch, n_hidden]))
    for x_t in tf.unstack(xs, num=4, axis=0):
        gates = tf.matmul(tf.concat([x_t, h], 1), w) + bias
        i, j, f, o = tf.split(gates, 4, axis=1)
        c_state = c_state * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
        h = tf.tanh(c_state) * tf.sigmoid(o)
    out = _dense(h, inp, "projection", n_hidden, 2)
    return tf.reduce_mean(tf.square(out - target))


def _embedding_loss(inp, ids, target):
    """An embedding split over three variables (a PartitionedVariable's parts, "mod"
    strategy: row r lives in part r % 3) as TF 1.x's embedding_lookup reads it."""
    parts = [_resource_var(f"embedding/part_{k}", inp.normal([3, 4])) for k in range(3)]
    rows = v1.nn.embedding_lookup(parts, ids, partition_strategy="mod")
    return tf.reduce_mean(tf.square(tf.reduce_sum(rows, 1) - target))


@case
def models():
    inp = Inputs("models")
    mlp_feeds = {"x": inp.normal([8, 20]), "labels": inp.ints([8], 0, 5)}
    lenet_feeds = {"images": inp.normal([2, 16, 16, 1]), "labels": inp.ints([2], 0, 3)}
    lstm_feeds = {"xs": inp.normal([4, 2, 3]), "target": inp.normal([2, 2])}
    embedding_feeds = {"ids": np.array([[0, 7], [4, 4], [8, 2]], i32), "target": inp.normal([3, 4])}
    sgd = lambda: v1.train.GradientDescentOptimizer(0.1)  # noqa: E731
    adam = lambda: v1.train.AdamOptimizer(0.01)  # noqa: E731
    return [
        _train_case("model_mlp_sgd", ["MatMul", "Relu", "SparseSoftmaxCrossEntropyWithLogits"],
                    "MLP 20-16-12-5, 3 steps of gradient descent", _mlp_loss, mlp_feeds, sgd),
        _train_case("model_mlp_adam", ["ResourceApplyAdam"], "MLP 20-16-12-5, 3 steps of Adam",
                    _mlp_loss, mlp_feeds, adam),
        _train_case("model_lenet_adam", ["Conv2D", "MaxPool", "SoftmaxCrossEntropyWithLogits"],
                    "LeNet-5 shaped (16x16 input), 3 steps of Adam", _lenet_loss, lenet_feeds, adam),
        _train_case("model_lstm_sgd", ["Split", "ConcatV2", "Sigmoid", "Tanh"],
                    "an LSTM cell unrolled over 4 steps, 3 steps of gradient descent", _lstm_loss, lstm_feeds, sgd),
        _train_case("model_embedding_partitioned", ["DynamicPartition", "DynamicStitch", "ResourceGather",
                                                    "ResourceScatterAdd"],
                    "embedding_lookup over a variable in 3 parts ('mod'), 3 steps of sparse gradient descent",
                    _embedding_loss, embedding_feeds, sgd),
    ]


# --- Graphs as TF 1.x wrote them: reference variables, frozen graphs ----------------------------

def _ref_variable_mlp(inp, x, labels):
    w = v1.get_variable("w", initializer=tf.constant(inp.normal([20, 8], scale=0.3)))
    b_ = v1.get_variable("b", initializer=tf.constant(np.zeros([8], f32)))
    w2 = v1.get_variable("w2", initializer=tf.constant(inp.normal([8, 5], scale=0.3)))
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w) + b_), w2)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


@case
def ref_variables():
    """Written with tf.compat.v1.disable_resource_variables(), as every TF 1.x release did:
    VariableV2, Assign, Identity reads, the ref Apply* ops."""
    v1.disable_resource_variables()
    try:
        inp = Inputs("ref_variables")
        feeds = {"x": inp.normal([6, 20]), "labels": inp.ints([6], 0, 5)}
        out = []
        for tag, op, make in (("sgd", "ApplyGradientDescent", lambda: v1.train.GradientDescentOptimizer(0.2)),
                              ("momentum", "ApplyMomentum", lambda: v1.train.MomentumOptimizer(0.1, 0.9)),
                              ("adagrad", "ApplyAdagrad", lambda: v1.train.AdagradOptimizer(0.1)),
                              ("adam", "ApplyAdam", lambda: v1.train.AdamOptimizer(0.01)),
                              ("rmsprop", "ApplyRMSProp", lambda: v1.train.RMSPropOptimizer(0.01))):
            c = Case(f"ref_variables_{tag}", ["VariableV2", "Assign", "Identity", op, "AssignAdd"],
                     f"reference variables (VariableV2) trained 3 steps with {op} and a global step",
                     binary=True, rtol=1e-4, atol=1e-5)
            with c.graph.as_default():
                phs = placeholders(feeds)
                loss = _ref_variable_mlp(c.inputs, *phs)
                step = v1.train.get_or_create_global_step()
                train = make().minimize(loss, global_step=step)
                c.run(targets=[v1.global_variables_initializer().name])
                feed = {p.name: v for p, v in zip(phs, feeds.values())}
                for _ in range(3):
                    c.run([loss.name], feed, targets=[train.name])
                c.run([tf.identity(v).name for v in v1.global_variables()])
            out.append(c)
        c = Case("ref_variables_assign_ops", ["VariableV2", "Assign", "AssignAdd", "AssignSub", "ScatterAdd",
                                              "IsVariableInitialized"],
                 "Assign (its value fetched), AssignAdd, AssignSub, ScatterAdd, IsVariableInitialized", binary=True)
        with c.graph.as_default():
            v = v1.get_variable("v", initializer=tf.constant(inp.normal([3, 2])))
            delta = v1.placeholder(tf.float32, [3, 2], name="delta")
            init = v1.is_variable_initialized(v)
            c.run([init.name])
            c.run(targets=[v.initializer.name])
            c.run([init.name])
            c.run([v1.assign_add(v, delta).name], {delta.name: inp.normal([3, 2])})
            c.run([v1.assign_sub(v, delta).name], {delta.name: inp.normal([3, 2])})
            c.run([v1.scatter_add(v, [2, 0], tf.constant(inp.normal([2, 2]))).name])
            c.run([v1.assign(v, delta * 2.0).name], {delta.name: inp.normal([3, 2])})
            c.run([tf.identity(v).name, (v * 3.0).name])
        out.append(c)
        return out
    finally:
        v1.enable_resource_variables()


@case
def frozen_graphs():
    """Inference graphs frozen by convert_variables_to_constants: variables folded into Consts."""
    out = []
    for tag, resource in (("ref", False), ("resource", True)):
        if not resource:
            v1.disable_resource_variables()
        try:
            inp = Inputs(f"frozen_{tag}")
            x_value = inp.normal([4, 20])
            c = Case(f"frozen_mlp_{tag}_variables", ["Const", "MatMul", "Softmax"],
                     f"an MLP with {tag} variables frozen by convert_variables_to_constants", binary=True, rtol=1e-5,
                     atol=1e-6)
            trained = tf.Graph()
            with trained.as_default():
                x = v1.placeholder(tf.float32, [None, 20], name="x")
                w = v1.get_variable("w", initializer=tf.constant(inp.normal([20, 6], scale=0.3)))
                b_ = v1.get_variable("b", initializer=tf.constant(inp.normal([6], scale=0.1)))
                tf.nn.softmax(tf.matmul(x, w) + b_, name="probabilities")
                with v1.Session() as sess:
                    sess.run(v1.global_variables_initializer())
                    frozen = v1.graph_util.convert_variables_to_constants(
                        sess, trained.as_graph_def(), ["probabilities"])
            with c.graph.as_default():
                tf.graph_util.import_graph_def(frozen, name="")
                c.run(["probabilities:0"], {"x:0": x_value})
            out.append(c)
        finally:
            v1.enable_resource_variables()
    return out


# --- Main ---------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "corpus"))
    parser.add_argument("--only", default="", help="write only the cases whose name contains this")
    args = parser.parse_args()
    v1.disable_eager_execution()
    v1.set_random_seed(0)
    names = set()
    written = 0
    for make in CASES:
        cases = make()
        for c in cases:
            if c.name in names:
                raise ValueError(f"two cases named {c.name}")
            names.add(c.name)
            if args.only in c.name:
                c.write(args.out)
                written += 1
    print(f"wrote {written} cases under {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

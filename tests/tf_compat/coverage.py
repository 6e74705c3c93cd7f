#!/usr/bin/env python3
"""Rewrites the op coverage tables of doc/graphdef.md from the corpus and `troupe ops`.

Between the markers `<!-- coverage:begin -->` and `<!-- coverage:end -->` of the page it
writes: every op troupe has, with its kernels, its gradient and the corpus cases that run
it (written by TensorFlow, forward and through tf.gradients); troupe's ops that TensorFlow
lacks; and the TensorFlow ops that common TF 1.x models use that troupe still lacks.
Needs TensorFlow (to read the binary graphs and list TensorFlow's ops) and a built troupe:

  bench/.venv/bin/python tests/tf_compat/coverage.py [--troupe build/troupe]
"""
import argparse
import collections
import os
import subprocess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Ops that TF 1.x models and their input pipelines commonly have in their graphs (from
# the model garden's v1 models, tf.layers, tf.nn, tf.train and tf.data as TF 1.15 built
# them). The ones troupe lacks are listed on the page.
COMMON_V1_OPS = """
Abs Add AddN AddV2 All Any ArgMax ArgMin Assert Assign AssignAdd AssignSub AvgPool AvgPoolGrad
BatchMatMul BatchMatMulV2 BatchToSpaceND BiasAdd BiasAddGrad BlockLSTM BroadcastArgs BroadcastGradientArgs
BroadcastTo Cast Ceil CheckNumerics ClipByValue Concat ConcatOffset ConcatV2 Const Conv2D
Conv2DBackpropFilter Conv2DBackpropInput Conv3D Cos CropAndResize Cumsum DecodeJpeg DecodePng
DepthToSpace DepthwiseConv2dNative DepthwiseConv2dNativeBackpropFilter
DepthwiseConv2dNativeBackpropInput Div DivNoNan DynamicPartition DynamicStitch Elu Enter Equal
Erf Exit Exp ExpandDims Fill Floor FloorDiv FloorMod FusedBatchNorm FusedBatchNormGrad
FusedBatchNormGradV3 FusedBatchNormV3 Gather GatherNd GatherV2 Greater GreaterEqual Identity
IdentityN InTopKV2 IsFinite IteratorGetNext IteratorV2 L2Loss LRN LSTMBlockCell LeakyRelu Less LessEqual
LinSpace ListDiff Log Log1p LogSoftmax LogicalAnd LogicalNot LogicalOr LoopCond MatMul
MatrixBandPart Max MaxPool MaxPoolGrad Maximum Mean Merge MergeSummary Min Minimum MirrorPad Mod
Mul Neg NextIteration NoOp NonMaxSuppressionV3 NotEqual OneHot OnesLike Pack Pad PadV2
ParseExample Placeholder PlaceholderWithDefault Pow Prod RandomShuffle RandomStandardNormal
RandomUniform RandomUniformInt Range Rank ReadVariableOp RealDiv Reciprocal Relu Relu6 Reshape
ResizeBilinear ResizeNearestNeighbor RestoreV2 ReverseSequence ReverseV2 Round Rsqrt SaveV2
ScalarSummary ScatterNd Select SelectV2 Selu Shape ShapeN Sigmoid Sign Sin Size Slice Softmax
SoftmaxCrossEntropyWithLogits Softplus Softsign SpaceToBatchND SpaceToDepth
SparseSoftmaxCrossEntropyWithLogits SparseTensorDenseMatMul SparseToDense Split SplitV Sqrt Square
SquaredDifference Squeeze StopGradient StridedSlice StridedSliceGrad StringToHashBucketFast Sub Sum
Switch Tanh TensorArrayGatherV3 TensorArrayReadV3 TensorArrayScatterV3 TensorArraySizeV3
TensorArrayV3 TensorArrayWriteV3 Tile TopKV2 Transpose TruncatedNormal Unique Unpack
UnsortedSegmentSum VarHandleOp VariableV2 Where While ZerosLike
""".split()

# Handled at load (graph/ref_variables.h), so present although not in `troupe ops`.
REWRITTEN = {"VariableV2", "Variable", "Assign", "AssignAdd", "AssignSub", "ScatterAdd", "IsVariableInitialized",
             "ApplyGradientDescent", "ApplyMomentum", "ApplyAdagrad", "ApplyAdam", "ApplyRMSProp"}


def read_graph(folder):
    graph = tf.compat.v1.GraphDef()
    if os.path.exists(os.path.join(folder, "graph.pb")):
        with open(os.path.join(folder, "graph.pb"), "rb") as f:
            graph.ParseFromString(f.read())
    else:
        with open(os.path.join(folder, "graph.pbtxt")) as f:
            text_format.Parse(f.read(), graph)
    return graph


def tables(troupe):
    ours = {}
    for line in subprocess.run([troupe, "ops"], capture_output=True, text=True, check=True).stdout.splitlines():
        name, devices, gradient = line.split()
        ours[name] = (devices, gradient)
    corpus = os.path.join(HERE, "corpus")
    cases = collections.defaultdict(set)  # op -> cases whose graph has it
    grad_cases = collections.defaultdict(set)  # op -> tf.gradients cases of it
    for name in sorted(os.listdir(corpus)):
        for node in read_graph(os.path.join(corpus, name)).node:
            cases[node.op].add(name)
        if name.endswith("_grad"):
            with open(os.path.join(corpus, name, "case.pbtxt")) as f:
                for line in f:
                    if line.startswith("op:"):
                        grad_cases[line.split('"')[1]].add(name)
    tf_ops = set(dir(tf.raw_ops))
    n_cases = len(os.listdir(corpus))
    out = [f"The corpus has {n_cases} cases (TensorFlow {tf.__version__}); `troupe ops` lists {len(ours)} ops.", "",
           "| op | kernels | gradient | corpus cases | tf.gradients cases |", "|---|---|---|---|---|"]
    for name, (devices, gradient) in sorted(ours.items()):
        if name not in tf_ops:
            continue
        out.append(f"| {name} | {devices} | {gradient} | {len(cases[name])} | {len(grad_cases[name]) or ''} |")
    for name in sorted(REWRITTEN):
        out.append(f"| {name} | rewritten at load | | {len(cases[name])} | |")
    out += ["", "Gradient: `yes` (troupe builds it), `none` (declared not differentiable, as in TensorFlow), "
            "`missing` (differentiating through it is an error naming the op; TensorFlow's own gradient graphs "
            "for these ops load and run, as the corpus shows). Kernels `-`: a runtime kernel (variables, queues, "
            "Send/Recv) that the actor runtime adds.", "",
            "troupe's ops that TensorFlow lacks: " +
            ", ".join(f"`{n}`" for n in sorted(n for n in ours if n not in tf_ops)) + ".", "",
            "TensorFlow ops common in TF 1.x models that troupe lacks (a graph with one fails at load, naming "
            "the op and the node): " +
            ", ".join(f"`{n}`" for n in COMMON_V1_OPS if n not in ours and n not in REWRITTEN) + "."]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--troupe", default=os.path.join(ROOT, "build", "troupe"))
    parser.add_argument("--page", default=os.path.join(ROOT, "doc", "graphdef.md"))
    args = parser.parse_args()
    with open(args.page) as f:
        page = f.read()
    begin, end = "<!-- coverage:begin -->", "<!-- coverage:end -->"
    head, rest = page.split(begin)
    _, tail = rest.split(end)
    with open(args.page, "w") as f:
        f.write(head + begin + "\n" + tables(args.troupe) + "\n" + end + tail)


if __name__ == "__main__":
    main()

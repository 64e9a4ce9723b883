"""Synthetic ONNX models (opset 17) with deterministic weights, for tests and examples.

Inputs carry symbolic dims ("N", "H", "W", "S") that the canonicalizer has to freeze;
`default_inputs` gives the concrete shapes configs use.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from workbench.errors import UserError

OPSET = 17
IR_VERSION = 9  # loads in every onnxruntime the project supports (>= 1.18) and in TVM's importer


class _Graph:
    """Accumulates nodes and initializers; weights come from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, value: np.ndarray | float) -> str:
        """Add a float32 initializer and return its name."""
        name = f"w{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def const_i64(self, value: list[int]) -> str:
        """Add an int64 initializer (axes, split sizes, slice bounds) and return its name."""
        name = f"w{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.int64), name))
        return name

    def split(self, x: str, sizes: list[int], axis: int) -> list[str]:
        """Add a Split node and return the names of its outputs."""
        name = f"split{len(self.nodes)}"
        outs = [f"{name}_{i}" for i in range(len(sizes))]
        self.nodes.append(helper.make_node("Split", [x, self.const_i64(sizes)], outs, name=name, axis=axis))
        return outs

    def weight(self, shape: tuple[int, ...], fan_in: int) -> str:
        """He-initialized weight, so activations stay O(1)."""
        return self.const(self.rng.normal(0.0, np.sqrt(2.0 / fan_in), shape))

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        """Add a node with one output (named `out`, or after the node) and return that name."""
        name = f"{op_type.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out or name], name=name, **attrs))
        return out or name

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1) -> str:
        """Conv (no bias) followed by BatchNormalization with non-trivial statistics."""
        w = self.weight((cout, cin // group, k, k), fan_in=cin // group * k * k)
        y = self.op("Conv", x, w, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride], group=group)
        gamma = self.const(self.rng.uniform(0.5, 1.5, cout))
        beta = self.const(self.rng.normal(0.0, 0.1, cout))
        mean = self.const(self.rng.normal(0.0, 0.1, cout))
        var = self.const(self.rng.uniform(0.5, 1.5, cout))
        return self.op("BatchNormalization", y, gamma, beta, mean, var, epsilon=1e-5)

    def head(self, x: str, cin: int, classes: int = 10) -> str:
        """GlobalAveragePool, Flatten and a Gemm classifier writing graph output `logits`."""
        flat = self.op("Flatten", self.op("GlobalAveragePool", x), axis=1)
        w, b = self.weight((classes, cin), fan_in=cin), self.const(self.rng.normal(0.0, 0.1, classes))
        return self.op("Gemm", flat, w, b, transB=1, out="logits")

    def model(self, name: str, x_dims: list[int | str], out: str, out_dims: list[int | str],
              x_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
        """Wrap the nodes into an opset-17 model with input `x`."""
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("x", x_type, x_dims)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_dims)],
            self.inits,
        )
        model = helper.make_model(graph, producer_name="workbench.zoo",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model


def _residual(g: _Graph, x: str, c: int) -> str:
    """Two Conv+BN (Relu between) plus the skip connection, then Relu."""
    y = g.conv_bn(g.op("Relu", g.conv_bn(x, c, c, 3)), c, c, 3)
    return g.op("Relu", g.op("Add", y, x))


def convnet_small() -> onnx.ModelProto:
    """ResNet-like classifier: Conv+BN+Relu, residual blocks, strided conv, MaxPool, Gemm head."""
    g = _Graph(seed=1)
    y = g.op("Relu", g.conv_bn("x", 3, 16, 3))
    y = _residual(g, y, 16)
    y = g.op("Relu", g.conv_bn(y, 16, 32, 3, stride=2))
    y = g.op("MaxPool", y, kernel_shape=[2, 2], strides=[2, 2])
    y = _residual(g, y, 32)
    return g.model("convnet_small", ["N", 3, "H", "W"], g.head(y, 32), ["N", 10])


def _inverted_residual(g: _Graph, x: str, c: int, expand: int, stride: int) -> str:
    """MobileNetV2/V3 block: 1x1 expand+HardSwish, depthwise 3x3+Clip(0,6), 1x1 project."""
    hidden = c * expand
    y = g.op("HardSwish", g.conv_bn(x, c, hidden, 1))
    y = g.op("Clip", g.conv_bn(y, hidden, hidden, 3, stride=stride, group=hidden), g.const(0.0), g.const(6.0))
    y = g.conv_bn(y, hidden, c, 1)
    return g.op("Add", y, x) if stride == 1 else y


def mobilenet_block() -> onnx.ModelProto:
    """Depthwise (group>1) convs, HardSwish, Clip with min/max inputs, residual Add, Gemm head."""
    g = _Graph(seed=2)
    y = _inverted_residual(g, "x", 16, expand=4, stride=1)
    y = _inverted_residual(g, y, 16, expand=4, stride=2)
    return g.model("mobilenet_block", ["N", 16, "H", "W"], g.head(y, 16), ["N", 10])


def _linear(g: _Graph, x: str, cin: int, cout: int) -> str:
    """MatMul with a [cin, cout] weight plus a bias Add."""
    return g.op("Add", g.op("MatMul", x, g.weight((cin, cout), fan_in=cin)), g.const(g.rng.normal(0.0, 0.1, cout)))


def _layer_norm(g: _Graph, x: str, d: int) -> str:
    """LayerNormalization over the last axis with random scale and bias."""
    scale, bias = g.const(g.rng.uniform(0.5, 1.5, d)), g.const(g.rng.normal(0.0, 0.1, d))
    return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=1e-5)


def transformer_block() -> onnx.ModelProto:
    """Pre-LN encoder block: LayerNorm, single-head attention, Softmax, erf-GELU MLP, residuals."""
    g, d = _Graph(seed=3), 64
    h = _layer_norm(g, "x", d)
    q, k, v = (_linear(g, h, d, d) for _ in range(3))
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 2, 1])), g.const(1.0 / np.sqrt(d)))
    attn = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    x1 = g.op("Add", "x", _linear(g, attn, d, d))
    m = _linear(g, _layer_norm(g, x1, d), d, 4 * d)
    erf = g.op("Erf", g.op("Div", m, g.const(np.sqrt(2.0))))
    gelu = g.op("Mul", g.op("Mul", m, g.op("Add", erf, g.const(1.0))), g.const(0.5))
    y = g.op("Add", x1, _linear(g, gelu, 4 * d, d), out="y")
    return g.model("transformer_block", ["N", "S", d], y, ["N", "S", d])


def _conv1d_relu(g: _Graph, x: str, cin: int, cout: int, k: int, stride: int) -> str:
    """Conv1d with bias, then Relu."""
    w, b = g.weight((cout, cin, k), fan_in=cin * k), g.const(g.rng.normal(0.0, 0.1, cout))
    return g.op("Relu", g.op("Conv", x, w, b, kernel_shape=[k], pads=[k // 2] * 2, strides=[stride]))


def _jax_layer_norm(g: _Graph, x: str, d: int) -> str:
    """Layer norm as jax2tf exports it: variance = max(0, mean(x²) - mean(x)²), a two-input Max that TVM's
    frontend turns into relax.stack + max."""
    mean = g.op("ReduceMean", x, axes=[-1], keepdims=1)
    square_mean = g.op("ReduceMean", g.op("Mul", x, x), axes=[-1], keepdims=1)
    variance = g.op("Max", g.op("Sub", square_mean, g.op("Mul", mean, mean)), g.const(0.0))
    scale, bias = g.const(g.rng.uniform(0.5, 1.5, d)), g.const(g.rng.normal(0.0, 0.1, d))
    normed = g.op("Div", g.op("Sub", x, mean), g.op("Sqrt", g.op("Add", variance, g.const(1e-6))))
    return g.op("Add", g.op("Mul", normed, scale), bias)


def byte_classifier() -> onnx.ModelProto:
    """1-D conv classifier over int32 byte ids: Gather embedding, Conv1d, LayerNorm, attention, mean pooling.

    The shape of a real model (Magika's content-type classifier, a jax2tf export) whose layer norm made
    convert_layout(conv2d=NHWC) fail inside TVM ("Invalid SLayout: can't find S in source layout ABC")."""
    g, d = _Graph(seed=4), 32
    table = g.const(g.rng.normal(0.0, 1.0, (256, d)))
    emb = g.op("Transpose", g.op("Gather", table, "x", axis=0), perm=[0, 2, 1])  # [N, d, L]
    y = _conv1d_relu(g, _conv1d_relu(g, emb, d, d, 5, 2), d, d, 3, 1)
    h = _jax_layer_norm(g, g.op("Transpose", y, perm=[0, 2, 1]), d)  # [N, L/2, d]
    q, k, v = (_linear(g, h, d, d) for _ in range(3))
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 2, 1])), g.const(1.0 / np.sqrt(d)))
    attn = g.op("Add", h, g.op("MatMul", g.op("Softmax", scores, axis=-1), v))
    pooled = g.op("ReduceMean", attn, axes=[1], keepdims=0)
    w, b = g.weight((2, d), fan_in=d), g.const(g.rng.normal(0.0, 0.1, 2))
    return g.model("byte_classifier", ["N", "L"], g.op("Gemm", pooled, w, b, transB=1, out="logits"), ["N", 2],
                   x_type=TensorProto.INT32)


def _conv_silu(g: _Graph, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
    """YOLO's Conv + SiLU (x * sigmoid(x)), bias folded into the conv as exporters leave it."""
    w, b = g.weight((cout, cin, k, k), fan_in=cin * k * k), g.const(g.rng.normal(0.0, 0.1, cout))
    y = g.op("Conv", x, w, b, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride])
    return g.op("Mul", y, g.op("Sigmoid", y))


def yolo_block() -> onnx.ModelProto:
    """YOLOX/YOLOv8-style detector at odd sizes: a Focus (space to depth by strided Slices), Conv+SiLU, a C2f
    Split/Concat, SPPF max pools, a 1-channel objectness conv at the odd, prime-width stride-4 level (13 at the
    default 52x52 input), nearest Resize upsampling concatenated with the earlier feature map, a 1x1 head.

    The objectness conv's packed schedule writes one value per pixel step; the default schedule vectorized the
    step loop around vectorized ones, and TVM's lowering failed ("VectorizeLoop before LiftStorageAlloc"), as it
    did on a real 416x416 detector."""
    g = _Graph(seed=5)
    starts = [[0, 0], [1, 0], [0, 1], [1, 1]]
    focus = [g.op("Slice", "x", g.const_i64(s), g.const_i64([1 << 30] * 2), g.const_i64([2, 3]), g.const_i64([2, 2]))
             for s in starts]
    p1 = _conv_silu(g, g.op("Concat", *focus, axis=1), 12, 16, 3)
    a, b = g.split(p1, [8, 8], axis=1)
    c2f = _conv_silu(g, g.op("Concat", a, b, _conv_silu(g, b, 8, 8, 3), axis=1), 24, 16, 1)
    p2 = _conv_silu(g, c2f, 16, 32, 3, stride=2)
    pools = [p2]
    for _ in range(2):
        pools.append(g.op("MaxPool", pools[-1], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    sppf = _conv_silu(g, g.op("Concat", *pools, axis=1), 96, 16, 1)
    w_obj, b_obj = g.weight((1, 16, 1, 1), fan_in=16), g.const(g.rng.normal(0.0, 0.1, 1))
    objectness = g.op("Sigmoid", g.op("Conv", sppf, w_obj, b_obj, kernel_shape=[1, 1]))
    scales = g.const([1.0, 1.0, 2.0, 2.0])
    up = g.op("Resize", sppf, "", scales, mode="nearest")
    head = _conv_silu(g, g.op("Concat", up, c2f, axis=1), 32, 16, 3)
    w, bias = g.weight((21, 16, 1, 1), fan_in=16), g.const(g.rng.normal(0.0, 0.1, 21))
    boxes = g.op("Conv", head, w, bias, kernel_shape=[1, 1])
    out = g.op("Mul", boxes, g.op("Resize", objectness, "", scales, mode="nearest"), out="y")
    return g.model("yolo_block", ["N", 3, "H", "W"], out, ["N", 21, "H2", "W2"])


def alexnet_small() -> onnx.ModelProto:
    """A classic model-zoo classifier, scaled down: an 11x11 stride-4 conv on 3 channels, LRN, max pools, a 5x5
    conv, then fully connected layers at batch 1 with inference Dropout between them (Gemm with transB, as such
    exports have it): the layers whose weights a GEMV must stream at memory speed."""
    g = _Graph(seed=6)
    c1 = g.op("Relu", g.op("Conv", "x", g.weight((24, 3, 11, 11), 3 * 121), g.const(np.zeros(24)),
                           kernel_shape=[11, 11], strides=[4, 4], pads=[2, 2, 2, 2]))
    p1 = g.op("MaxPool", g.op("LRN", c1, size=5, alpha=1e-4, beta=0.75, bias=2.0), kernel_shape=[3, 3], strides=[2, 2])
    c2 = g.op("Relu", g.op("Conv", p1, g.weight((48, 24, 5, 5), 24 * 25), g.const(np.zeros(48)),
                           kernel_shape=[5, 5], pads=[2, 2, 2, 2]))
    p2 = g.op("MaxPool", g.op("LRN", c2, size=5, alpha=1e-4, beta=0.75, bias=2.0), kernel_shape=[3, 3], strides=[2, 2])
    x = g.op("Flatten", p2, axis=1)
    for cin, cout in ((48 * 7 * 7, 1024), (1024, 1024)):
        fc = g.op("Gemm", x, g.weight((cout, cin), cin), g.const(g.rng.normal(0.0, 0.1, cout)), transB=1)
        x = g.op("Dropout", g.op("Relu", fc))
    out = g.op("Gemm", x, g.weight((100, 1024), 1024), g.const(np.zeros(100)), transB=1, out="y")
    return g.model("alexnet_small", ["N", 3, 127, 127], out, ["N", 100])


# name -> (builder, graph input name -> default concrete shape)
_MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, list[int]]]] = {
    "convnet_small": (convnet_small, {"x": [1, 3, 64, 64]}),
    "mobilenet_block": (mobilenet_block, {"x": [1, 16, 56, 56]}),
    "transformer_block": (transformer_block, {"x": [1, 32, 64]}),
    "byte_classifier": (byte_classifier, {"x": [1, 512]}),
    "yolo_block": (yolo_block, {"x": [1, 3, 52, 52]}),
    "alexnet_small": (alexnet_small, {"x": [1, 3, 127, 127]}),
}
NAMES: tuple[str, ...] = tuple(_MODELS)


def _entry(name: str) -> tuple[Callable[[], onnx.ModelProto], dict[str, list[int]]]:
    """Look up `name`; unknown names are a UserError with a suggestion and the list of names."""
    if name not in _MODELS:
        close = difflib.get_close_matches(name, NAMES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"unknown zoo model {name!r}{hint}; available: {', '.join(NAMES)}")
    return _MODELS[name]


def build(name: str) -> onnx.ModelProto:
    """Build the zoo model `name` (deterministic: same bytes every call)."""
    return _entry(name)[0]()


def default_inputs(name: str) -> dict[str, list[int]]:
    """Graph input name -> the concrete shape configs use for zoo model `name`."""
    return {k: list(v) for k, v in _entry(name)[1].items()}

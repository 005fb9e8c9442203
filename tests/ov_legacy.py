"""A writer of legacy OpenVINO IR (v5-v7: ``<blobs>``-era layers) with an ONNX twin.

OpenVINO no longer reads these IRs, so the tests write them here from the layer catalog
(``formats.md`` §5.1/§5.2, the seed "IR Notation Reference Catalog"): one XML + ``.bin`` per
network, ports numbered inputs first then outputs, weights as ``<blobs>`` byte ranges in the
layer precision.  :class:`Twin` adds every layer to the IR and, independently, the ONNX
nodes computing the catalog's formula for it, so onnxruntime is the reference.  Port dims
come from ONNX shape inference of the twin.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference


class Twin:
    """Build a legacy IR and its ONNX twin layer by layer."""

    def __init__(self, name: str, x_shape: tuple[int, ...], version: int = 7,
                 precision: str = "FP32") -> None:
        self.name, self.version, self.precision = name, version, precision
        self.layers: list[dict] = []
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.bin = bytearray()
        self.x_shape = x_shape
        self.layers.append({"name": "data", "type": "Input", "inputs": [], "data": {},
                            "blobs": {}, "n_out": 1})
        self.k = 0

    # -- plumbing -----------------------------------------------------------------------------
    def _c(self, value, hint: str) -> str:
        self.k += 1
        name = f"{hint}_{self.k}"
        self.inits[name] = np.asarray(value)
        return name

    def _n(self, op: str, ins: list[str], out: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def layer(self, ltype: str, name: str, inputs: list[str], data: dict | None = None,
              blobs: dict[str, np.ndarray] | None = None, n_out: int = 1,
              precision: str | None = None) -> str:
        self.layers.append({"name": name, "type": ltype, "inputs": list(inputs),
                            "data": data or {}, "blobs": blobs or {}, "n_out": n_out,
                            "precision": precision})
        return name

    # -- layers (IR + twin) ---------------------------------------------------------------------
    def conv(self, x, name, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), group=1, dil=(1, 1),
             legacy_xy=False):
        o, _, kh, kw = w.shape
        if legacy_xy:  # the oldest attribute spelling
            data = {"kernel-x": kw, "kernel-y": kh, "stride-x": stride[1], "stride-y": stride[0],
                    "pad-x": pads[1], "pad-y": pads[0], "pad-r": pads[3], "pad-b": pads[2],
                    "output": o, "group": group}
        else:
            data = {"kernel": f"{kh},{kw}", "strides": f"{stride[0]},{stride[1]}",
                    "pads_begin": f"{pads[0]},{pads[1]}", "pads_end": f"{pads[2]},{pads[3]}",
                    "dilations": f"{dil[0]},{dil[1]}", "output": o, "group": group}
        blobs = {"weights": w} | ({"biases": b} if b is not None else {})
        ins = [x, self._c(w, "w")] + ([self._c(b, "b")] if b is not None else [])
        self._n("Conv", ins, name, strides=list(stride), pads=list(pads), group=group,
                dilations=list(dil))
        return self.layer("Convolution", name, [x], data, blobs)

    def deconv(self, x, name, w, b=None, stride=(2, 2), pads=(0, 0, 0, 0), group=1):
        _, og, kh, kw = w.shape  # [I, O/G, kh, kw]
        data = {"kernel": f"{kh},{kw}", "strides": f"{stride[0]},{stride[1]}",
                "pads_begin": f"{pads[0]},{pads[1]}", "pads_end": f"{pads[2]},{pads[3]}",
                "output": og * group, "group": group}
        blobs = {"weights": w} | ({"biases": b} if b is not None else {})
        ins = [x, self._c(w, "w")] + ([self._c(b, "b")] if b is not None else [])
        self._n("ConvTranspose", ins, name, strides=list(stride), pads=list(pads), group=group)
        return self.layer("Deconvolution", name, [x], data, blobs)

    def relu(self, x, name, slope=0.0):
        if slope:
            self._n("LeakyRelu", [x], name, alpha=slope)
            return self.layer("ReLU", name, [x], {"negative_slope": slope})
        self._n("Relu", [x], name)
        return self.layer("ReLU", name, [x])

    def activation(self, x, name, kind, onnx_op, **attrs):
        self._n(onnx_op, [x], name, **attrs)
        return self.layer("Activation", name, [x], {"type": kind} | attrs)

    def clamp(self, x, name, lo, hi):
        self._n("Clip", [x, self._c(np.float32(lo), "lo"), self._c(np.float32(hi), "hi")], name)
        return self.layer("Clamp", name, [x], {"min": lo, "max": hi})

    def prelu(self, x, name, slope):
        self._n("PRelu", [x, self._c(slope.reshape(-1, 1, 1), "slope")], name)
        return self.layer("PReLU", name, [x], {"channel_shared": 0}, {"weights": slope})

    def pool(self, x, name, method, k, s, pads=(0, 0, 0, 0), exclude_pad=True, rounding=None):
        data = {"kernel": f"{k},{k}", "strides": f"{s},{s}", "pool-method": method,
                "pads_begin": f"{pads[0]},{pads[1]}", "pads_end": f"{pads[2]},{pads[3]}",
                "exclude-pad": "true" if exclude_pad else "false"}
        if rounding:
            data["rounding_type"] = rounding
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": list(pads),
                 "ceil_mode": int(rounding == "ceil")}
        if method == "max":
            self._n("MaxPool", [x], name, **attrs)
        else:
            self._n("AveragePool", [x], name, count_include_pad=int(not exclude_pad), **attrs)
        return self.layer("Pooling", name, [x], data)

    def eltwise(self, xs, name, op, coeff=None):
        onnx_op = {"sum": "Add", "mul": "Mul", "max": "Max"}[op]
        ins = list(xs)
        if coeff:
            ins = [self._n("Mul", [x, self._c(np.float32(c), "coeff")], f"{name}_c{i}")
                   for i, (x, c) in enumerate(zip(xs, coeff))]
        y = ins[0]
        for i, x in enumerate(ins[1:], 1):
            y = self._n(onnx_op, [y, x], name if i == len(ins) - 1 else f"{name}_{i}")
        data = {"operation": op} | ({"coeff": ",".join(str(c) for c in coeff)} if coeff else {})
        return self.layer("Eltwise", name, list(xs), data)

    def scaleshift(self, x, name, gamma, beta):
        g = self._n("Mul", [x, self._c(gamma.reshape(1, -1, 1, 1), "g")], f"{name}_g")
        self._n("Add", [g, self._c(beta.reshape(1, -1, 1, 1), "b")], name)
        return self.layer("ScaleShift", name, [x], {}, {"weights": gamma, "biases": beta})

    def power(self, x, name, power, scale, shift):
        a = self._n("Mul", [x, self._c(np.float32(scale), "s")], f"{name}_s")
        a = self._n("Add", [a, self._c(np.float32(shift), "t")], f"{name}_t")
        self._n("Pow", [a, self._c(np.float32(power), "p")], name)
        return self.layer("Power", name, [x], {"power": power, "scale": scale, "shift": shift})

    def concat(self, xs, name, axis=1):
        self._n("Concat", list(xs), name, axis=axis)
        return self.layer("Concat", name, list(xs), {"axis": axis})

    def fc(self, x, name, w, b):
        f = self._n("Flatten", [x], f"{name}_flat", axis=1)
        self._n("Gemm", [f, self._c(w, "w"), self._c(b, "b")], name, transB=1)
        return self.layer("FullyConnected", name, [x], {"out-size": w.shape[0]},
                          {"weights": w, "biases": b})

    def flatten(self, x, name):
        self._n("Flatten", [x], name, axis=1)
        return self.layer("Flatten", name, [x], {"axis": 1, "end_axis": -1})

    def reshape(self, x, name, dims):
        self._n("Reshape", [x, self._c(np.array(dims, np.int64), "shape")], name)
        return self.layer("Reshape", name, [x], {"dim": ",".join(map(str, dims))})

    def permute(self, x, name, order):
        self._n("Transpose", [x], name, perm=list(order))
        return self.layer("Permute", name, [x], {"order": ",".join(map(str, order))})

    def softmax(self, x, name, axis=1):
        self._n("Softmax", [x], name, axis=axis)
        return self.layer("SoftMax", name, [x], {"axis": axis})

    def resample(self, x, name, factor, kind):
        mode = {"NEAREST": ("nearest", "asymmetric"), "LINEAR": ("linear", "half_pixel")}[kind]
        sc = self._c(np.array([1, 1, factor, factor], np.float32), "scales")
        self._n("Resize", [x, "", sc], name, mode=mode[0], coordinate_transformation_mode=mode[1],
                nearest_mode="floor")
        return self.layer("Resample", name, [x], {"type": f"caffe.ResampleParameter.{kind}",
                                                  "factor": factor, "antialias": 0})

    def crop(self, x, name, axis, offset, dim):
        end = [o + d for o, d in zip(offset, dim)]
        self._n("Slice", [x, self._c(np.array(offset, np.int64), "st"),
                          self._c(np.array(end, np.int64), "en"),
                          self._c(np.array(axis, np.int64), "ax")], name)
        return self.layer("Crop", name, [x], {"axis": ",".join(map(str, axis)),
                                              "offset": ",".join(map(str, offset)),
                                              "dim": ",".join(map(str, dim))})

    def batchnorm(self, x, name, mean, var, eps):
        c = mean.size
        self._n("BatchNormalization", [x, self._c(np.ones(c, np.float32), "one"),
                                       self._c(np.zeros(c, np.float32), "zero"),
                                       self._c(mean, "mean"), self._c(var, "var")], name,
                epsilon=eps)
        return self.layer("BatchNormalization", name, [x], {"epsilon": eps},
                          {"weights": var, "biases": mean})

    def norm(self, x, name, size, alpha, beta, k=1.0, region="across"):
        if region == "across":
            self._n("LRN", [x], name, size=size, alpha=alpha, beta=beta, bias=k)
        else:  # the catalog's formula over a size x size window of each channel
            lo = (size - 1) // 2
            sq = self._n("Mul", [x, x], f"{name}_sq")
            avg = self._n("AveragePool", [sq], f"{name}_avg", kernel_shape=[size, size],
                          pads=[lo, lo, size - 1 - lo, size - 1 - lo], count_include_pad=1)
            d = self._n("Mul", [avg, self._c(np.float32(alpha), "a")], f"{name}_a")
            d = self._n("Add", [d, self._c(np.float32(k), "k")], f"{name}_k")
            d = self._n("Pow", [d, self._c(np.float32(beta), "b")], f"{name}_b")
            self._n("Div", [x, d], name)
        return self.layer("Norm", name, [x], {"alpha": alpha, "beta": beta, "local-size": size,
                                              "region": region, "k": k})

    # -- output -------------------------------------------------------------------------------
    def onnx(self, outputs: list[str]) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(self.x_shape))],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        return m

    def write(self, xml: Path, outputs: list[str]) -> onnx.ModelProto:
        """Write ``xml`` and the ``.bin`` beside it; return the ONNX twin."""
        twin = self.onnx(outputs)
        inferred = shape_inference.infer_shapes(twin)
        shapes = {"data": list(self.x_shape)}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        ids = {layer["name"]: i for i, layer in enumerate(self.layers)}
        prec = self.precision
        dt = np.float16 if prec == "FP16" else np.float32
        lines = ['<?xml version="1.0"?>',
                 f'<net name="{self.name}" version="{self.version}" batch="1">', "  <layers>"]
        edges = []

        def port(pid: int, dims: list[int]) -> str:
            return (f'<port id="{pid}">' + "".join(f"<dim>{d}</dim>" for d in dims)
                    + "</port>")

        for lid, layer in enumerate(self.layers):
            lp = layer.get("precision") or prec
            lines.append(f'    <layer id="{lid}" name="{layer["name"]}" type="{layer["type"]}"'
                         f' precision="{lp}">')
            if layer["data"]:
                attrs = " ".join(f"{k}={quoteattr(str(v))}" for k, v in layer["data"].items())
                lines.append(f"      <data {attrs}/>")
            ins = layer["inputs"]
            if ins:
                lines.append("      <input>" + "".join(port(i, shapes[s]) for i, s in
                                                      enumerate(ins)) + "</input>")
                edges += [(ids[s], 0 if self.layers[ids[s]]["type"] == "Input"
                           else len(self.layers[ids[s]]["inputs"]), lid, i)
                          for i, s in enumerate(ins)]
            lines.append("      <output>" + port(len(ins), shapes[layer["name"]]) + "</output>")
            if layer["blobs"]:
                parts = []
                for key, arr in layer["blobs"].items():
                    raw = np.ascontiguousarray(arr, dtype=dt).tobytes()
                    parts.append(f'<{key} offset="{len(self.bin)}" size="{len(raw)}"/>')
                    self.bin += raw
                lines.append("      <blobs>" + "".join(parts) + "</blobs>")
            lines.append("    </layer>")
        lines += ["  </layers>", "  <edges>"]
        lines += [f'    <edge from-layer="{a}" from-port="{p}" to-layer="{b}" to-port="{q}"/>'
                  for a, p, b, q in edges]
        lines += ["  </edges>", "</net>", ""]
        xml.write_text("\n".join(lines))
        xml.with_suffix(".bin").write_bytes(bytes(self.bin))
        return twin

"""ImageNet-style preprocessing (resize then centre crop, issue 29 item 4): against a plain
PIL reference written here (torchvision's Resize(256) + CenterCrop(224) steps), through
dvsdk-compile --resize-crop and dvsdk eval --resize-crop."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper
from PIL import Image

import dvsdk
from dvsdk.cli.compile import run as compile_cli
from dvsdk.cli.main import run as dvsdk_cli
from dvsdk.errors import NetFileError
from dvsdk.netfile import decode, encode
from dvsdk.runtime.images import preprocess, resize
from dvsdk.runtime.records import verify
from dvsdk.tasks.geometry import Geometry

from .onnx_models import make_model, w


def torchvision_style(rgb, size, resize_to):
    """Shorter side to ``resize_to`` (the longer int(resize_to * long / short)), bilinear;
    then the centred size x size window at int(round((dim - size) / 2))."""
    h, wd = rgb.shape[:2]
    if h <= wd:
        nh, nw = resize_to, int(resize_to * wd / h)
    else:
        nh, nw = int(resize_to * h / wd), resize_to
    img = Image.fromarray(rgb).resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - size) / 2)), int(round((nw - size) / 2))
    return np.asarray(img)[top:top + size, left:left + size]


@pytest.mark.parametrize("hw,size,ratio,to", [((300, 400), 224, 0.875, 256),
                                              ((500, 333), 224, 0.875, 256),
                                              ((427, 640), 224, 0.875, 256),
                                              ((640, 427), 224, 0.875, 256),
                                              ((64, 64), 32, 0.5, 64),
                                              ((90, 120), 60, 1.0, 60),
                                              ((37, 23), 16, 0.8, 20)])
def test_crop_equals_torchvision_style_pil_steps(hw, size, ratio, to):
    rgb = (np.random.default_rng(sum(hw)).random((*hw, 3)) * 255).astype(np.uint8)
    np.testing.assert_array_equal(resize(rgb, size, size, "crop", ratio),
                                  torchvision_style(rgb, size, to))


def test_crop_geometry_inverts_to_original_pixels():
    rgb = np.zeros((300, 400, 3), np.uint8)
    rgb[100:200, 150:260] = 255
    small = resize(rgb, 224, 224, "crop")
    ys, xs = np.nonzero(small[..., 0] > 127)
    g = Geometry.of(300, 400, 224, 224, "crop", 0.875)
    got = g.boxes_to_original(np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]]))
    np.testing.assert_allclose(got[0], [150, 100, 260, 200], atol=2)
    assert (g.top, g.left, g.scaled_height, g.scaled_width) == (-16, -58, 256, 341)


def classifier(tmp_path):
    inits = {"k": w(1, 4, 3, 8, 8, scale=0.3), "b": w(2, 4, scale=0.2),
             "shape": np.array([1, 4], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "k", "b"], ["c"], kernel_shape=[8, 8],
                              strides=[8, 8]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Reshape", ["g", "shape"], ["logits"])]
    onnx.save(make_model(nodes, [("x", [1, 3, 16, 16])], ["logits"], inits),
              tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


def test_compile_resize_crop_records_it_and_run_image_applies_it(tmp_path):
    model = classifier(tmp_path)
    assert compile_cli([str(model), "-o", str(tmp_path / "c.bin"), "--resize-crop", "0.8",
                        "--scale", "1/255", "-q"]) == 0
    net = dvsdk.netfile.read(tmp_path / "c.bin")
    pre = net.meta["inputs"][0]["preprocess"]
    assert pre["resize"] == "crop" and pre["crop_ratio"] == 0.8
    rgb = (np.random.default_rng(3).random((37, 23, 3)) * 255).astype(np.uint8)
    x = (torchvision_style(rgb, 16, 20).astype(np.float32) * (1 / 255)).transpose(2, 0, 1)[None]
    np.testing.assert_array_equal(preprocess(rgb, (1, 3, 16, 16), pre), x)
    with dvsdk.load(tmp_path / "c.bin") as n:
        np.testing.assert_array_equal(n.run_image(rgb)["logits"], n.run(x)["logits"])
    net.meta["inputs"][0]["preprocess"]["crop_ratio"] = 1.5
    with pytest.raises(NetFileError) as e:
        verify(decode(encode(net)))
    assert e.value.field.endswith("crop_ratio")


def test_eval_resize_crop_equals_a_net_compiled_with_it(tmp_path, capsys):
    model = classifier(tmp_path)
    labels = ["a", "b", "c", "d"]
    dvsdk.compile(model, tmp_path / "plain.bin", labels=labels, scale=1 / 255)
    dvsdk.compile(model, tmp_path / "crop.bin", labels=labels, scale=1 / 255,
                  resize="crop")
    rng = np.random.default_rng(0)
    for k, name in enumerate(labels):
        (tmp_path / "ds" / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray((rng.random((30 + 7 * i, 20 + 5 * k, 3)) * 255).astype(np.uint8)
                            ).save(tmp_path / "ds" / name / f"{i}.png")
    runs = {}
    for net, extra in (("plain.bin", ["--resize-crop"]), ("crop.bin", []),
                       ("plain.bin", [])):
        capsys.readouterr()
        assert dvsdk_cli(["eval", str(tmp_path / net), str(tmp_path / "ds"), "--json",
                          "--per-image", str(tmp_path / "p.jsonl"), "-f"] + extra) == 0
        rows = [json.loads(ln) for ln in (tmp_path / "p.jsonl").read_text().splitlines()]
        runs[(net, bool(extra))] = [(r["top_k"], r["scores"]) for r in rows]
    assert runs[("plain.bin", True)] == runs[("crop.bin", False)]
    assert runs[("plain.bin", True)] != runs[("plain.bin", False)]   # it did change
    assert dvsdk_cli(["eval", str(tmp_path / "plain.bin"), str(tmp_path / "ds"),
                      "--resize-crop", "1.5"]) == 2

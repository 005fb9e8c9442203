"""Every CLI flag through a real subprocess: outputs, files written, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from .onnx_models import mobilenetv2_like

ENV = {**os.environ, "DVSDK_DEVICE": "sim://"}


def cli(*args: str, check: int | None = 0, env: dict | None = None) -> subprocess.CompletedProcess:
    mod = {"dvsdk": "dvsdk.cli.main", "dvsdk-compile": "dvsdk.cli.compile",
           "dvsdk-run": "dvsdk.cli.run", "dvsdk-agent": "dvsdk.link.agent"}[args[0]]
    proc = subprocess.run([sys.executable, "-m", mod, *args[1:]], capture_output=True,
                          text=True, timeout=120, env=env or ENV)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    model = d / "mnv2.onnx"
    onnx.save(mobilenetv2_like(), model)
    labels = d / "labels.txt"
    labels.write_text("\n".join(f"class-{i}" for i in range(10)) + "\n")
    rng = np.random.default_rng(0)
    img = d / "cat.png"
    Image.fromarray(rng.integers(0, 256, (70, 50, 3), dtype=np.uint8)).save(img)
    imgs = d / "batch"
    imgs.mkdir()
    for i, mode in enumerate(("L", "RGBA", "P")):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).convert(mode) \
            .save(imgs / f"{i}.png")
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(imgs / "j.jpg")
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(imgs / "b.bmp")
    net = d / "mnv2.bin"
    out = cli("dvsdk-compile", str(model), "-o", str(net), "--labels", str(labels),
              "--mean", "127.5", "--scale", "0.0078125", "--report").stdout
    assert "Softmax" in out and "cpu" in out and f"wrote {net}" in out
    return {"dir": d, "model": model, "net": net, "img": img, "imgs": imgs, "labels": labels}


def test_help_has_examples():
    for tool in ("dvsdk", "dvsdk-compile", "dvsdk-run", "dvsdk-agent"):
        out = cli(tool, "--help").stdout
        assert "examples:" in out


def test_version_with_and_without_device():
    assert cli("dvsdk", "--version").stdout.startswith("dvsdk 0.1.0, net.bin format 1")
    out = cli("dvsdk", "--version", "--device", "sim://?ub_size=655360").stdout
    assert "ub_size 655360" in out and "mac_num 576" in out


def test_info_prints_sysfs_keys():
    out = cli("dvsdk", "info").stdout
    assert "ub_size" in out and "524288" in out and "simulated" in out


def test_classification_top_k_with_labels(files):
    out = cli("dvsdk-run", str(files["net"]), str(files["img"]), "-k", "3").stdout
    lines = [ln for ln in out.splitlines() if "%" in ln]
    assert len(lines) == 3 and all("class-" in ln for ln in lines)
    probs = [float(ln.split("%")[0]) for ln in lines]
    assert probs == sorted(probs, reverse=True)


def test_json_batch_directory_and_formats(files):
    res = json.loads(cli("dvsdk-run", str(files["net"]), str(files["imgs"]), "--json").stdout)
    assert [Path(r["input"]).name for r in res["results"]] == ["0.png", "1.png", "2.png",
                                                                "b.bmp", "j.jpg"]
    for r in res["results"]:
        assert abs(sum(t["probability"] for t in r["top"]) - 1) < 0.5 and r["cycles"] > 0


def test_results_match_the_python_api(files, tmp_path):
    import dvsdk

    out = tmp_path / "y.npz"
    cli("dvsdk-run", str(files["net"]), str(files["img"]), "--save", str(out), "-q")
    saved = np.load(out)
    with dvsdk.load(files["net"], "sim://") as net:
        ref = net.run_image(files["img"])
    (name,) = ref
    np.testing.assert_array_equal(saved[name], ref[name])


def test_images_may_follow_options_and_outputs_get_normal_permissions(files, tmp_path):
    out = tmp_path / "y.npz"
    proc = cli("dvsdk-run", str(files["net"]), "-k", "1", str(files["img"]), "--save",
               str(out), str(files["imgs"] / "0.png"), "--json")
    assert len(json.loads(proc.stdout)["results"]) == 2
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


def test_npy_input_and_save(files, tmp_path):
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 96, 96)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    cli("dvsdk-run", str(files["net"]), "--input", str(tmp_path / "x.npy"), "--save",
        str(tmp_path / "o.npz"), "-q")
    assert np.load(tmp_path / "o.npz")["softmax_out236"].shape == (1, 10)


def test_bench_json_and_table(files):
    res = json.loads(cli("dvsdk-run", str(files["net"]), str(files["img"]), "--bench", "3",
                         "--json").stdout)["bench"]
    assert set(res["stages"]) == {"preprocess", "pack", "sync", "device", "unpack", "cpu ops",
                                 "total"}
    assert res["fps_double_buffered"] >= res["fps"] > 0 and res["device_time"] == "predicted"
    out = cli("dvsdk-run", str(files["net"]), str(files["img"]), "--bench", "2", "-q").stdout
    assert "p99 us" in out and "FPS sequential" in out and "predicted" in out


def test_profile_and_trace(files, tmp_path):
    out = cli("dvsdk-run", str(files["net"]), str(files["img"]), "--profile", "-q").stdout
    assert "MAC util" in out and "depthwise conv 3x3" in out and "576-MAC peak" in out
    trace = tmp_path / "t.json"
    cli("dvsdk-run", str(files["net"]), str(files["img"]), "--trace", str(trace), "-q")
    events = json.loads(trace.read_text())["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert {"device", "pack", "cpu"} <= cats
    dev = [e for e in events if e.get("cat") == "device"]
    assert dev[0]["args"]["cycles"] > 0


def test_selftest(files):
    out = cli("dvsdk-run", str(files["net"]), "--selftest").stdout
    assert out.startswith("selftest PASS")


def test_verbose_and_quiet(files):
    v = cli("dvsdk-run", str(files["net"]), str(files["img"]), "-v").stdout
    assert "segment0:" in v and "cpu ops" in v
    assert cli("dvsdk-run", str(files["net"]), str(files["img"]), "-q").stdout == ""


def test_no_progress_bar_in_pipes(files):
    proc = cli("dvsdk-run", str(files["net"]), str(files["imgs"]))
    assert "[#" not in proc.stderr and proc.stderr == ""


@pytest.mark.parametrize("args,code,needle", [
    (["missing.bin", "x.png"], 2, "net.bin not found"),
    (["{net}", "nope.png"], 2, "no such image"),
    (["{net}"], 2, "give an image"),
    (["{net}", "{labels}"], 2, "cannot decode image"),
    (["{net}", "{img}", "--device", "warp://x"], 2, "unknown device URL scheme"),
    (["{net}", "{img}", "--device", "sim://?fault=hang", "--timeout", "0.2"], 3,
     "interrupt did not arrive"),
    (["{net}", "{img}", "--device", "sim://?ub_size=65536"], 2, "unified buffer"),
    (["{net}", "{img}", "--save-mask", "m.png"], 2, "class map needs"),
    (["{net}", "{img}", "--ipu"], 2, "no IPU equivalent"),
])
def test_errors_are_one_line_with_exit_codes(files, args, code, needle):
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    proc = cli("dvsdk-run", *argv, check=code)
    assert needle in proc.stderr and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_debug_shows_the_traceback(files):
    proc = cli("dvsdk-run", "missing.bin", "x.png", "--debug", check=2)
    assert "Traceback" in proc.stderr


def test_corrupt_net_bin(files, tmp_path):
    bad = tmp_path / "bad.bin"
    data = bytearray(files["net"].read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    proc = cli("dvsdk-run", str(bad), str(files["img"]), check=2)
    assert "CRC mismatch" in proc.stderr


def test_compile_errors(files, tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    proc = cli("dvsdk-compile", str(junk), "-o", str(tmp_path / "j.bin"), check=2)
    assert "cannot read ONNX model" in proc.stderr
    assert not (tmp_path / "j.bin").exists()
    proc = cli("dvsdk-compile", str(files["model"]), "--input-size", "banana", check=2)
    assert "HxW" in proc.stderr
    proc = cli("dvsdk-compile", str(files["model"]), "--mean", "1,2", check=2)
    assert "mean needs 1 or 3 values" in proc.stderr


def test_compile_quantized_and_quiet(files, tmp_path):
    out = tmp_path / "q.bin"
    assert cli("dvsdk-compile", str(files["model"]), "-o", str(out), "--quantize",
               "-q").stdout == ""
    said = cli("dvsdk-compile", str(files["model"]), "-o", str(out), "--quantize",
               "--force").stdout
    assert "quantized" in said and "relative RMS error" in said
    assert cli("dvsdk-run", str(out), "--selftest").stdout.startswith("selftest PASS")


def test_ipu_preprocessing_matches_the_cpu_path(files, tmp_path):
    import dvsdk

    net = tmp_path / "ipu.bin"
    cli("dvsdk-compile", str(files["model"]), "-o", str(net), "--scale", str(1 / 255), "-q")
    img = tmp_path / "exact.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (96, 96, 3), dtype=np.uint8)) \
        .save(img)
    with dvsdk.load(net, "sim://") as n:
        a = n.run_image(img)
        b = n.run_image(img, ipu=True)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=1e-3)
    res = json.loads(cli("dvsdk-run", str(net), str(img), "--ipu", "--json").stdout)
    assert res["results"][0]["top"][0]["class"] == int(np.argmax(a[next(iter(a))]))


def test_doctor_without_a_board_says_so():
    proc = cli("dvsdk", "doctor", "--device", "uio://?sysfs=/nonexistent&dev=/nonexistent",
               check=3)
    assert "DV700" in proc.stdout


def _on_a_tty(argv: list[str]) -> str:
    """Run a CLI with stderr on a real pseudo-terminal; return what it drew there."""
    import pty
    import select

    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=sub_fd,
                            env=ENV)
    os.close(sub_fd)
    chunks = []
    while True:
        ready, _, _ = select.select([main_fd], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(main_fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(main_fd)
    assert proc.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_progress_on_a_terminal(files, tmp_path):
    shown = _on_a_tty(["-m", "dvsdk.cli.run", str(files["net"]), str(files["imgs"])])
    assert "[#" in shown and "5/5" in shown
    shown = _on_a_tty(["-m", "dvsdk.cli.compile", str(files["model"]), "-o",
                       str(tmp_path / "p.bin")])
    assert "optimizing the model" in shown and "golden self-test" in shown


def test_save_mask_writes_the_class_map(tmp_path):
    rng = np.random.default_rng(5)
    wt = rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32)
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1],
                               kernel_shape=[3, 3])], "seg",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 20, 28])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 20, 28])],
        [onnx.numpy_helper.from_array(wt, "W")])
    onnx.save(onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 13)],
                                     ir_version=8), tmp_path / "seg.onnx")
    cli("dvsdk-compile", str(tmp_path / "seg.onnx"), "-o", str(tmp_path / "seg.bin"),
        "--scale", str(1 / 255), "-q")
    img = tmp_path / "street.png"
    Image.fromarray(rng.integers(0, 256, (20, 28, 3), dtype=np.uint8)).save(img)
    mask = tmp_path / "mask.png"
    out = cli("dvsdk-run", str(tmp_path / "seg.bin"), str(img), "--save-mask", str(mask),
              "--save", str(tmp_path / "y.npz")).stdout
    assert f"saved class map to {mask}" in out
    scores = np.load(tmp_path / "y.npz")["y"]
    colors = np.asarray(Image.open(mask).convert("RGB"))
    assert colors.shape == (20, 28, 3)
    from dvsdk.cli.run import PALETTE

    np.testing.assert_array_equal(colors, PALETTE[np.argmax(scores[0], axis=0)])

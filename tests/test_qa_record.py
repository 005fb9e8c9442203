"""Record and replay (dvsdk.qa.record, dvsdk.qa.replay, dvsdk-run --record, dvsdk replay).

A recording on sim:// replays bit-identically on sim://; a recording with one output byte
changed is reported at the right command, tensor position and values, found independently
here with numpy and the chunked-layout math; a truncated or foreign file is a clear error."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

import dvsdk
from dvsdk.cli.main import run
from dvsdk.errors import RecordError
from dvsdk.hw import layout
from dvsdk.qa.record import Recorder
from dvsdk.qa.replay import replay

from .conftest import ROOT
from .onnx_models import NetBuilder

MODELS = ROOT / "examples" / "models"
SEVEN = str(MODELS / "samples" / "seven_1442.png")


@pytest.fixture(scope="module")
def digits_rec(tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "digits.dvrec"
    assert run_cli(["dvsdk-run", str(MODELS / "digits.bin"), SEVEN, "--record", str(path),
                    "-q"]) == 0
    return path


def run_cli(argv):
    from dvsdk.cli.run import run as run_tool

    return run_tool(argv[1:])


def test_record_then_replay_on_the_simulator_is_bit_identical(digits_rec, capsys):
    results, info = replay(digits_rec)
    assert info["simulated"] and results and all(r.identical for r in results)
    assert all(r.replayed_us == pytest.approx(r.recorded_us) for r in results)
    assert run(["replay", str(digits_rec)]) == 0
    out = capsys.readouterr().out
    assert "bit-identical" in out and "identical" in out


def test_the_recording_holds_what_the_kick_consumed(digits_rec):
    z = zipfile.ZipFile(digits_rec)
    m = json.loads(z.read("manifest.json"))
    assert m["format"] == "dvrec" and m["format_version"] == 1
    ex = m["execs"][0]
    assert ex["unit"] == "conv" and ex["commands"][0]["type"] == "ConvCommand"
    whats = {r["what"] for r in ex["reads"]}
    assert {"command stream", "input"} <= whats and any(w.startswith("weights") for w in whats)
    assert [w["what"] for w in ex["writes"]] == ["output"] * len(ex["commands"])
    # the recorded input is the packed image dvsdk-run fed: check it independently
    with dvsdk.load(MODELS / "digits.bin") as net:
        x = dvsdk.runtime.images.preprocess(SEVEN, (1, 1, 16, 16),
                                            net.inputs[0]["preprocess"])
    inp = next(r for r in ex["reads"] if r["what"] == "input")
    got = np.frombuffer(z.read(f"blobs/{inp['blob']}"), np.float16)
    want = layout.pack(x[0].transpose(1, 2, 0))
    assert np.array_equal(got, want)


def test_a_tampered_output_byte_is_found_at_its_command_and_position(digits_rec, tmp_path):
    z = zipfile.ZipFile(digits_rec)
    m = json.loads(z.read("manifest.json"))
    ex = m["execs"][0]
    k = len(ex["writes"]) - 1
    item = ex["writes"][k]
    data = bytearray(z.read(f"blobs/{item['blob']}"))
    e = 5                                           # element 5 of the last command's output
    data[2 * e + 1] ^= 0x40                         # flip an exponent bit of that FP16 value
    bad = tmp_path / "tampered.dvrec"
    with zipfile.ZipFile(bad, "w") as out:
        item["blob"] = "tampered"
        out.writestr("manifest.json", json.dumps(m))
        for name in z.namelist():
            if name.startswith("blobs/"):
                out.writestr(name, z.read(name))
        out.writestr("blobs/tampered", bytes(data))
    results, _ = replay(bad)
    r = results[0]
    assert not r.identical and len(r.differences) == 1
    d = r.differences[0]
    assert (d.command, d.byte, d.bytes_differing) == (k, 2 * e + 1, 1)
    cmd = ex["commands"][k]
    # independently: where element 5 of the chunked (H, W, C) output lies
    from dvsdk.hw import dims
    from dvsdk.qa.record import decode_command

    conv = decode_command(cmd, lambda i: None)
    (ow, oh, _, oc), _ = dims.run_output_shape(conv.runs[0], (conv.w, conv.h, conv.z, conv.c))
    offs = layout.offsets((oh, ow, oc))
    y, x, ch = (int(v[0]) for v in np.nonzero(offs == e))
    assert f"channel {ch}, y {y}, x {x}" in d.where
    assert d.recorded == float(np.frombuffer(bytes(data[2 * e:2 * e + 2]), np.float16)[0])
    assert d.replayed != d.recorded
    assert run(["replay", str(bad)]) == 5


def test_a_multi_segment_net_with_cpu_steps(tmp_path):
    """Several command lists with a CPU step between them: each exec is replayed with the
    inputs it consumed, so the CPU's results need no re-computation."""
    b = NetBuilder(7)
    x = b.node("Relu", [b.conv("x", 3, 8)])
    x = b.node("Softmax", [x], axis=1)                       # a CPU step between segments
    y = b.node("Relu", [b.conv(x, 8, 8)])
    model = b.model([("x", (1, 3, 10, 10))], [y], "seg")
    net = dvsdk.compile(model.SerializeToString(), golden=False)
    dev = dvsdk.open_device("sim://")
    rec = Recorder().attach(dev)
    with dvsdk.load(net, dev) as n:
        n.run(np.random.default_rng(0).uniform(0, 1, (1, 3, 10, 10)).astype(np.float32))
    dev.close()
    path = tmp_path / "seg.dvrec"
    rec.save(path)
    results, _ = replay(path)
    assert len(results) == 2 and all(r.identical for r in results)


def test_truncated_and_foreign_recordings_are_clear_errors(digits_rec, tmp_path, capsys):
    data = digits_rec.read_bytes()
    cut = tmp_path / "cut.dvrec"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(RecordError, match="truncated or damaged"):
        replay(cut)
    assert run(["replay", str(cut)]) == 2
    assert "truncated or damaged" in capsys.readouterr().err
    other = tmp_path / "other.dvrec"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "dvrec", "format_version": 99}))
    other.write_bytes(buf.getvalue())
    with pytest.raises(RecordError, match="unsupported recording version"):
        replay(other)
    with pytest.raises(RecordError, match="not found"):
        replay(tmp_path / "nope.dvrec")


def test_per_command_predicted_times_add_up(tmp_path):
    b = NetBuilder(8)
    x = "x"
    for i in range(3):
        x = b.node("Relu", [b.conv(x, 8 if i else 3, 8)])
    net = dvsdk.compile(b.model([("x", (1, 3, 12, 12))], [x], "three").SerializeToString(),
                        golden=False, chain=False)
    dev = dvsdk.open_device("sim://")
    rec = Recorder().attach(dev)
    with dvsdk.load(net, dev) as n:
        n.run(np.ones((1, 3, 12, 12), np.float32))
    dev.close()
    rec.save(tmp_path / "t.dvrec")
    (r,), _ = replay(tmp_path / "t.dvrec")
    assert r.identical and len(r.command_us) == r.commands == 3
    # each command alone fetches its own stream: a little more than its share of the list
    assert sum(r.command_us) == pytest.approx(r.replayed_us, rel=0.05)


def test_recorded_on_every_backend_replays_identically_on_the_simulator(device, tmp_path):
    """Record on the fake board (both kicks), DMP's kernel module (fake), a link or the
    simulator; replay on sim://: bit-identical, as a real board should be."""
    rec = Recorder().attach(device)
    with dvsdk.load(MODELS / "digits.bin", device) as net:
        y = net.run_image(SEVEN)
    device.recorder = None
    assert net.labels[int(np.argmax(y["probs"]))] == "seven"
    rec.save(tmp_path / "b.dvrec")
    results, info = replay(tmp_path / "b.dvrec", "sim://")
    assert results and all(r.identical for r in results), [r.differences for r in results]
    assert info["backend"] == device.info().backend


def test_a_skip_connection_across_a_cpu_step_is_recorded_from_dram(tmp_path):
    """Segment 2 reads a tensor segment 1 wrote that the CPU never read back: the recording
    must hold what the device sees (DRAM), not the CPU's stale cached view."""
    b = NetBuilder(9)
    h = b.node("Relu", [b.conv("x", 8, 8)])                   # segment 1 writes h
    s = b.node("Sigmoid", [b.node("Softmax", [h], axis=1)])  # CPU
    y = b.node("Add", [b.conv(s, 8, 8), h])                   # segment 2 reads h again
    model = b.model([("x", (1, 8, 6, 6))], [b.node("Relu", [y])], "skip")
    net = dvsdk.compile(model.SerializeToString(), golden=False)
    dev = dvsdk.open_device("sim://")
    rec = Recorder().attach(dev)
    with dvsdk.load(net, dev) as n:
        n.run(np.random.default_rng(1).uniform(-1, 1, (1, 8, 6, 6)).astype(np.float32))
    dev.close()
    rec.save(tmp_path / "skip.dvrec")
    results, _ = replay(tmp_path / "skip.dvrec")
    assert len(results) >= 2 and all(r.identical for r in results)


def test_an_fc_command_is_recorded_as_the_device_runs_it_on_every_backend(device, tmp_path):
    """An FC is lowered to a 1x1 conv at commit (§6.4); on dv:// too (where DMP's module
    builds the stream) the recording holds its input, its re-packed weights and its
    output, and the packed weights as commit read them (the buffer is overwritten and
    freed after commit here: the device runs the list's own copy), and replays
    bit-identically on sim://."""
    from dvsdk.driver.cmdlist import CommandList
    from dvsdk.driver.commands import FcCommand
    from dvsdk.hw.weights import pack_fc_weights

    from .hw import upload

    rng = np.random.default_rng(5)
    n_in, n_out = 48, 10
    w = rng.uniform(-1, 1, (n_out, n_in)).astype(np.float16)
    b = rng.uniform(-1, 1, n_out).astype(np.float16)
    x = rng.uniform(-1, 1, n_in).astype(np.float16)
    packed = pack_fc_weights(w, b, (n_in, 1, 1), (n_out, 1, 1))
    fw = upload(device, packed, name="fc-w")
    fx = upload(device, x, name="fc-in")
    fo = device.alloc(n_out * 2, name="fc-out")
    rec = Recorder().attach(device)
    with CommandList(device) as cl:
        cl.add(FcCommand(weight_buf=fw, input_buf=fx, output_buf=fo, input_size=n_in,
                         output_size=n_out))
        cl.commit()
        fw.write(0, np.zeros(fw.size, np.uint8))  # after commit: the list has its own copy
        fw.sync_for_device()
        fw.free()
        cl.run()
        lowered = cl._owned[0]  # the weights re-packed for the 1x1 conv
        (entry,) = rec.execs
    device.recorder = None
    ids = {id(buf): rec.buffers[id(buf)]["id"] for buf in (fx, fo, lowered)}
    reads = {(r["buf"], r["offset"], r["nbytes"]) for r in entry["reads"]}
    writes = {(r["buf"], r["offset"], r["nbytes"]) for r in entry["writes"]}
    assert (ids[id(fx)], 0, n_in * 2) in reads
    assert any(buf == ids[id(lowered)] and n > 0 for buf, _, n in reads)
    assert writes == {(ids[id(fo)], 0, n_out * 2)}
    (fc_read,) = [r for r in entry["reads"] if r["buf"] == rec.buffers[id(fw)]["id"]]
    assert bytes(rec.blobs[fc_read["blob"]]) == bytes(np.frombuffer(packed, np.uint8))
    fo.sync_for_cpu()
    want = w.astype(np.float32) @ x.astype(np.float32) + b.astype(np.float32)
    got = fo.read(0, n_out * 2).view(np.float16).astype(np.float32)
    assert np.allclose(got, want, atol=1e-2 + 1e-2 * np.abs(want).max())
    rec.save(tmp_path / "fc.dvrec")
    results, _ = replay(tmp_path / "fc.dvrec", "sim://")
    assert results and all(r.identical for r in results), [r.differences for r in results]


def test_a_recording_replays_identically_in_other_configurations(tmp_path):
    """Recorded with the compiled loops on two threads, replayed in children with numpy
    alone on one thread under another OpenBLAS kernel, and with the SSE2 build of the
    product: bit-identical each time, as the arithmetic is the host's in no way
    (firmware_spec/arithmetic.md).  A 56x56 net with 3x3, depthwise, 1x1 and a transposed
    conv, tanh and sigmoid on the device."""
    import os
    import subprocess
    import sys

    b = NetBuilder(31)
    h = b.node("Relu", [b.conv("x", 8, 16, k=3)])
    h = b.node("Tanh", [b.conv(h, 16, 16, k=3, group=16)])
    h = b.node("Sigmoid", [b.conv(h, 16, 24, k=1)])
    y = b.node("ConvTranspose", [h, b.const(np.random.default_rng(5).standard_normal(
        (24, 8, 2, 2)).astype(np.float32) * 0.2)], strides=[2, 2])
    model = b.model([("x", (1, 8, 56, 56))], [y], "rec56")
    net = dvsdk.compile(model.SerializeToString(), golden=False)
    dev = dvsdk.open_device("sim://")
    rec = Recorder().attach(dev)
    with dvsdk.load(net, dev) as n:
        n.run(np.random.default_rng(6).uniform(-1, 1, (1, 8, 56, 56)).astype(np.float32))
    dev.close()
    path = tmp_path / "rec56.dvrec"
    rec.save(path)
    for extra in ({"DVSDK_NATIVE": "0", "DVSDK_SIM_THREADS": "1", "OPENBLAS_CORETYPE": "Nehalem"},
                  {"DVSDK_NATIVE_ISA": "sse2", "DVSDK_SIM_THREADS": "2"}):
        r = subprocess.run([sys.executable, "-m", "dvsdk.cli.main", "replay", str(path)],
                           env={**os.environ, **extra}, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0 and "bit-identical" in r.stdout, (extra, r.stdout, r.stderr)

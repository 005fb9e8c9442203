"""Record and replay (dvsdk.qa.record, dvsdk.qa.replay, dvsdk-run --record, dvsdk replay).

A recording on sim:// replays bit-identically on sim://; a recording with one output byte
changed is reported at the right command, tensor position and values, found independently
here with numpy and the chunked-layout math; a truncated or foreign file is a clear error."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
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
    with zipfile.ZipFile(bad, "w") as out:   # a consistent recording of another output
        item["blob"] = hashlib.sha256(bytes(data)).hexdigest()
        out.writestr("manifest.json", json.dumps(m))
        for name in z.namelist():
            if name.startswith("blobs/"):
                out.writestr(name, z.read(name))
        out.writestr(f"blobs/{item['blob']}", bytes(data))
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


# -- issue 25, item 9: a failed --record keeps the old file; replay checks what it reads --

def _rewrite(src, dst, edit=None, blob=None):
    """A copy of recording ``src`` at ``dst`` with ``edit(manifest)`` applied and, where
    ``blob`` is ``(name, bytes)``, that blob's content replaced under its old name."""
    z = zipfile.ZipFile(src)
    m = json.loads(z.read("manifest.json"))
    if edit is not None:
        edit(m)
    with zipfile.ZipFile(dst, "w") as out:
        out.writestr("manifest.json", json.dumps(m))
        for name in z.namelist():
            if name.startswith("blobs/"):
                data = blob[1] if blob and name == f"blobs/{blob[0]}" else z.read(name)
                out.writestr(name, data)
    return dst


def test_a_run_that_fails_before_the_first_kick_keeps_the_old_recording(digits_rec, tmp_path,
                                                                        capsys):
    """It replaced the recording with an empty one, which replayed as bit-identical."""
    path = tmp_path / "run.dvrec"
    path.write_bytes(digits_rec.read_bytes())
    before = path.read_bytes()
    missing = str(tmp_path / "nope.bin")
    # (--force: replacing an existing output is asked for, as every output flag needs)
    assert run_cli(["dvsdk-run", missing, SEVEN, "--record", str(path), "--force"]) == 2
    assert path.read_bytes() == before
    capsys.readouterr()
    # a run that completes without a kick (its one input is unreadable) records nothing
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    rc = run_cli(["dvsdk-run", str(MODELS / "digits.bin"), str(bad), "--record", str(path),
                  "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and "nothing to record" in err and "left as it was" in err
    assert path.read_bytes() == before
    assert not (tmp_path / "fresh.dvrec").exists()
    assert run_cli(["dvsdk-run", missing, "--record", str(tmp_path / "fresh.dvrec")]) == 2
    assert not (tmp_path / "fresh.dvrec").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_temporary_file_left_by_a_killed_recorder_is_removed_by_the_next_run(digits_rec,
                                                                             tmp_path):
    """A writer SIGKILLed mid-save leaves its temporary file beside the recording; the next
    --record run removes it, even one that fails before recording anything."""
    path = tmp_path / "run.dvrec"
    code = ("import os, signal, sys\n"
            "from dvsdk.fsutil import atomic_write\n"
            "def write(f):\n"
            "    f.write(b'half a recording')\n"
            "    f.flush()\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "atomic_write(sys.argv[1], write)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([sys.executable, "-c", code, str(path)], env=env, timeout=120)
    assert killed.returncode == -9
    stray = [p for p in tmp_path.iterdir() if p.name.startswith(".run.dvrec.")]
    assert len(stray) == 1 and not path.exists()
    assert run_cli(["dvsdk-run", str(tmp_path / "nope.bin"), "--record", str(path)]) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_recording_with_no_execs_is_refused(digits_rec, tmp_path, capsys):
    empty = _rewrite(digits_rec, tmp_path / "empty.dvrec", lambda m: m.update(execs=[]))
    with pytest.raises(RecordError, match="holds no kick"):
        replay(empty)
    assert run(["replay", str(empty)]) == 2
    assert "holds no kick" in capsys.readouterr().err


def test_a_tampered_blob_is_a_bad_recording_not_a_device_difference(digits_rec, tmp_path,
                                                                    capsys):
    """A blob whose content no longer has the SHA-256 it is named by read as a device
    difference (exit 5); now it is a damaged recording (exit 2)."""
    m = json.loads(zipfile.ZipFile(digits_rec).read("manifest.json"))
    item = m["execs"][0]["writes"][-1]
    data = bytearray(zipfile.ZipFile(digits_rec).read(f"blobs/{item['blob']}"))
    data[11] ^= 0x40
    bad = _rewrite(digits_rec, tmp_path / "t.dvrec", blob=(item["blob"], bytes(data)))
    with pytest.raises(RecordError, match="damaged") as ei:
        replay(bad)
    assert ei.value.field == f"blobs/{item['blob'][:12]}"
    assert run(["replay", str(bad)]) == 2
    assert "damaged" in capsys.readouterr().err


def _set(path, value):
    """An edit that sets the manifest entry at ``path`` (keys and indexes) to ``value``,
    or deletes it where ``value`` is ``...``."""
    def edit(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        if value is ...:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return edit


@pytest.mark.parametrize("path, value, field", [
    (("execs",), ..., "execs"),                                   # a KeyError before
    (("execs",), {"0": 1}, "execs"),
    (("execs", 0), "conv", "execs[0]"),
    (("execs", 0, "reads", 0, "offset"), -64, "execs[0].reads[0].offset"),
    (("execs", 0, "writes", 0, "offset"), -2, "execs[0].writes[0].offset"),
    (("execs", 0, "reads", 0, "nbytes"), 1 << 40, "execs[0].reads[0].nbytes"),
    (("execs", 0, "reads", 0, "buf"), 99, "execs[0].reads[0].buf"),
    (("execs", 0, "reads", 0, "blob"), "tampered", "execs[0].reads[0].blob"),
    (("execs", 0, "unit"), "gpu", "execs[0].unit"),
    (("execs", 0, "commands"), [], "execs[0].commands"),
    (("execs", 0, "commands", 0, "type"), "ConvRun", "execs[0].commands[0].type"),
    (("execs", 0, "commands", 0, "input_buf", "offset"), -8,
     "execs[0].commands[0].input_buf.offset"),
    (("execs", 0, "time_us"), "fast", "execs[0].time_us"),
    (("buffers",), None, "buffers"),
    (("buffers", 0, "size"), -1, "buffers[0].size"),
    (("buffers", 1, "id"), 0, "buffers[1].id"),
])
def test_a_malformed_manifest_is_a_bad_recording(digits_rec, tmp_path, capsys, path, value,
                                                 field):
    """Exit 2 with the JSON path, never "internal error" (a missing ``execs`` was one)."""
    bad = _rewrite(digits_rec, tmp_path / "m.dvrec", _set(path, value))
    with pytest.raises(RecordError) as ei:
        replay(bad)
    assert ei.value.field == field
    assert run(["replay", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err and field in err


def test_edited_manifests_are_replayed_or_refused_never_crash(digits_rec, tmp_path):
    """150 seeded edits of one manifest entry each (junk of every JSON type): each replays
    or is refused with a dvsdk error (found: unhashable buffer ids, commands fields of
    the wrong type raised TypeError/AttributeError)."""
    import copy
    import random

    from dvsdk.errors import DvsdkError

    z = zipfile.ZipFile(digits_rec)
    base = json.loads(z.read("manifest.json"))
    junk = [None, -1, -(2**40), 2**64, "x", "", [], {}, [1, 2], {"a": 1}, 1.5, True, 0, 3,
            float("inf"), float("nan"), "conv", {"buf": 0, "offset": 0}]

    def paths(node, p=()):
        if p:
            yield p
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for k, v in items:
            yield from paths(v, p + (k,))

    every = list(paths(base))
    rng = random.Random(25)
    for i in range(150):
        m = copy.deepcopy(base)
        p = rng.choice(every)
        _set(p, rng.choice(junk))(m)
        bad = _rewrite(digits_rec, tmp_path / f"f{i}.dvrec", lambda doc, m=m: doc.update(m))
        try:
            replay(bad, "sim://?dram_mb=16")
        except DvsdkError:
            pass

"""A net.bin's program is checked as a schedule (issue 25, item 7; netbin.md, "What a
reader rejects"): every value produced before it is used, each tensor written once, the
bytes a step reads still holding what it names, bounded sizes, and a load whose work
grows linearly with the program.

Each file here is edited with its CRCs recomputed (``encode``), so every edit reaches the
checks; before issue 25 a program that ran its first step twice loaded, and its answers
were another network's.
"""

from __future__ import annotations

import copy
import cProfile
import pstats
from pathlib import Path

import pytest
from onnx import helper

import dvsdk
from dvsdk.cli.run import run as dvsdk_run
from dvsdk.compiler.build import compile
from dvsdk.errors import NetFileError
from dvsdk.netfile import LIMITS, NetFile, decode, encode, read, write
from dvsdk.runtime.net import Net

from .onnx_models import make_model, w

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "models" / "digits.bin"
SEVEN = DIGITS.parent / "samples" / "seven_1442.png"
SIM = "sim://?dram_mb=16"


def refused(net: NetFile) -> NetFileError:
    """The reader's refusal of ``net`` (after a round trip through the bytes)."""
    with pytest.raises(NetFileError) as ei:
        Net(decode(encode(net)), SIM).close()
    return ei.value


def test_a_step_run_twice_is_refused(tmp_path):
    """digits.bin with its hardware step run twice answered 3 or 8 depending on the
    image (the second run reads the image's arena slot after the logits took it); now the
    reader refuses it, and dvsdk-run says so in one line with exit 2."""
    net = read(DIGITS)
    net.meta["program"].insert(1, copy.deepcopy(net.meta["program"][0]))
    err = refused(net)
    assert err.field == "program[1].commands" and "CMDS[0] again" in str(err)
    path = tmp_path / "twice.bin"
    write(net, path)
    assert dvsdk_run([str(path), str(SEVEN)]) == 2


def test_a_tensor_written_twice_is_refused():
    """A CPU step run twice (its input intact both times) writes its output twice."""
    net = read(DIGITS)
    net.meta["program"].append(copy.deepcopy(net.meta["program"][1]))
    err = refused(net)
    assert err.field == "program[2].outputs[0]"
    assert "writes probs a second time (first: program[1].outputs[0])" in str(err)
    net = read(DIGITS)                     # a step writing a network input
    net.meta["program"][1]["outputs"] = ["image"]
    assert "writes image a second time (first: inputs[0])" in str(refused(net))


def _renamed_copy(net: NetFile) -> NetFile:
    """digits.bin's hardware step run a second time over copies of its records, writing
    tensors of new names placed where the first run's outputs are: every tensor is written
    once, but the second run overwrites what the first one made (and the image)."""
    net = copy.deepcopy(net)
    n = len(net.command_records())
    net.commands = net.commands * 2
    meta = net.meta
    for t in ("pool2", "logits"):
        meta["tensors"][t + "_b"] = copy.deepcopy(meta["tensors"][t])
        meta["arena"]["offsets"][t + "_b"] = meta["arena"]["offsets"][t]
    again = copy.deepcopy(meta["program"][0])
    again.update(commands=[n, n], command_outputs=["pool2_b", "logits_b"],
                 command_inputs=[["image"], ["pool2_b"]])
    meta["program"].insert(1, again)
    return net


def test_a_tensor_overwritten_before_it_is_read_is_refused():
    """Names alone are consistent here; the arena is not: the copy's first command reads
    the image's bytes, which the first run's logits took over."""
    err = refused(_renamed_copy(read(DIGITS)))
    assert err.field == "program[1].command_inputs[0]"
    assert "reads image, whose arena bytes 0..20 were overwritten by logits" in str(err)


def test_a_value_is_read_only_after_it_is_written():
    net = read(DIGITS)
    net.meta["program"].reverse()          # the softmax before the step that makes logits
    err = refused(net)
    assert err.field == "program[0].inputs[0]" and "before anything wrote it" in str(err)
    net = read(DIGITS)
    net.meta["program"][1]["inputs"] = ["probs"]   # a host tensor nothing wrote yet
    err = refused(net)
    assert err.field == "program[1].inputs[0]" and "has no value" in str(err)


def test_command_names_are_its_buffers():
    """command_inputs and command_outputs must name the tensors at the command's buffers:
    the schedule check follows them."""
    net = read(DIGITS)
    net.meta["program"][0]["command_inputs"][1] = ["image"]   # the FC reads pool2
    err = refused(net)
    assert err.field == "program[0].command_inputs[1]" and "not where CMDS[1] reads" in str(err)
    net = read(DIGITS)
    net.meta["program"][0]["command_outputs"][0] = "logits"
    err = refused(net)
    assert err.field == "program[0].command_outputs[0]"
    net = read(DIGITS)
    del net.meta["program"][0]["command_outputs"]
    err = refused(net)
    assert err.field == "program[0].command_outputs" and "missing" in str(err)


def test_every_record_is_run_by_one_step():
    net = read(DIGITS)
    net.commands = net.commands + net.command_records()[0] + b"\0" * (-len(
        net.command_records()[0]) % 8)
    err = refused(net)
    assert err.field == "CMDS[2]" and "run by no hw step" in str(err)


@pytest.mark.parametrize("what, limit", [("program", "program_steps"),
                                         ("tensors", "tensors"), ("CMDS", "commands")])
def test_sizes_are_bounded(what, limit):
    """Steps, tensors and command records have limits (netbin.yaml ``meta_limits``),
    checked before the work that grows with them."""
    net = read(DIGITS)
    n = LIMITS[limit] + 1
    if what == "program":
        step = net.meta["program"][1]
        net.meta["program"] = [net.meta["program"][0]] + [step] * n
    elif what == "tensors":
        net.meta["tensors"].update({f"t{i}": {"shape": [1]} for i in range(n)})
    else:
        net.commands = net.command_records()[0] * n
    err = refused(net)
    assert err.limit == LIMITS[limit]
    assert err.field == what


def _chain(k: int) -> NetFile:
    """k blocks of a hardware 1x1 conv and a CPU softmax: 2k steps, k commands."""
    nodes, inits, x = [], {}, "x"
    for i in range(k):
        inits[f"w{i}"] = w(i, 8, 8, 1, 1)
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}"))
        nodes.append(helper.make_node("Softmax", [f"c{i}"], [f"s{i}"], axis=1,
                                      name=f"sm{i}"))
        x = f"s{i}"
    return compile(make_model(nodes, [("x", [1, 8, 4, 4])], [x], inits), golden=False)


def _calls(fn) -> int:
    """Function calls (Python and built-in) made by ``fn()``, counted by cProfile: the
    load's work, counted, not timed."""
    prof = cProfile.Profile()
    prof.runcall(fn)
    return pstats.Stats(prof).total_calls


def test_load_work_grows_linearly_with_the_program():
    """Reading and loading a program 32 times as long takes at most 32 x 1.25 times the
    work (about 32 x now; it was 56 x before issue 25, where every CPU step merged the
    pieces of every command before it)."""
    small, big = encode(_chain(25)), encode(_chain(800))
    with dvsdk.open_device(SIM) as dev:
        Net(decode(small), dev).close()   # imports and one-off caches
        work = [_calls(lambda d=d: Net(decode(d), dev).close()) for d in (small, big)]
    assert len(decode(big).meta["program"]) == 1600
    assert work[1] < 32 * 1.25 * work[0], work

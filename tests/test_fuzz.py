"""Bad input never crashes: damaged net.bin files, garbage command streams and configuration
images end in a dvsdk error or a device status, never a raw exception.

The net.bin part (issue 10 §5) edits META with its CRCs recomputed, so every edit reaches the
reader: each file must either load and run giving exactly the original's outputs, or be
refused with :class:`NetFileError`; never another exception, never a silently different run.
Each finding of the original fuzzing campaign is a named test below.
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from dvsdk.cli.run import run as dvsdk_run
from dvsdk.compiler.build import compile
from dvsdk.errors import NetFileError
from dvsdk.hw.spec import SPEC
from dvsdk.netfile import LIMITS, NetFile, decode, read
from dvsdk.runtime.net import Net

from . import onnx_models as M
from .hw import kick_stream
from .test_netfile import container

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "models" / "digits.bin"
SIM = "sim://?dram_mb=16"
JUNK = [None, -1, -(2**40), 2**40, 2**63, 2**64, 2**31, "x", "", [], {}, [1, 2], {"a": 1}, 1.5,
        -0.5, True, False, "hw", "S0", 0, 1, 2, 3, [2**32, 2**32], [[[[1]]]], float("inf"),
        float("nan")]


def softmax_net() -> NetFile:
    """conv -> relu (hw) -> Pad reflect with CNST pads -> Softmax over C (CPU, uploaded) ->
    conv (hw, a device output) -> Transpose (CPU, a host output)."""
    b = M.NetBuilder(40)
    h = b.node("Relu", [b.conv("x", 3, 8)])
    p = b.node("Pad", [h, b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")],
               mode="reflect")
    y = b.conv(b.node("Softmax", [p], axis=1), 8, 4, k=3, p=0)
    t = b.node("Transpose", [y], perm=[0, 2, 3, 1])
    return compile(b.model([("x", (1, 3, 6, 6))], [y, t], "softmax_net"))


class Case:
    """A net, its golden input and the outputs the unedited file gives on the simulator."""

    def __init__(self, net: NetFile) -> None:
        self.net = net
        self.feeds = {n: net.array(e, "GOLD") for n, e in net.meta["golden"]["inputs"].items()}
        with Net(net, SIM) as n:
            self.ref = n.run(self.feeds)

    def meta(self) -> dict:
        return copy.deepcopy(self.net.meta)

    def file(self, meta: dict | None = None, raw: bytes | None = None, **sections: bytes
             ) -> bytes:
        """The net.bin bytes with META (a dict, or raw JSON) replaced; CRCs valid."""
        if raw is None:
            raw = json.dumps(self.meta() if meta is None else meta).encode()
        n = self.net
        parts = {"META": raw, "CMDS": n.commands, "WGTS": n.weights, "CNST": n.constants,
                 "GOLD": n.golden, **sections}
        return container(list(parts.items()))

    def outcome(self, data: bytes) -> str:
        """"refused", "same" or "different"; any other exception fails the test."""
        try:
            with Net(decode(data), SIM) as n:
                got = n.run(self.feeds, timeout=1.0)
        except NetFileError as e:
            assert str(e) and "\n" not in str(e)
            return "refused"
        # in order: an output's name is a label (editing it renames the result's key)
        same = len(got) == len(self.ref) and all(
            a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
            for a, b in zip(got.values(), self.ref.values()))
        return "same" if same else "different"

    def refused(self, data: bytes) -> NetFileError:
        with pytest.raises(NetFileError) as ei:
            with Net(decode(data), SIM) as n:
                n.run(self.feeds, timeout=1.0)
        return ei.value


@pytest.fixture(scope="module")
def digits() -> Case:
    return Case(read(DIGITS))


@pytest.fixture(scope="module")
def smx() -> Case:
    return Case(softmax_net())


@pytest.fixture(scope="module", params=["digits", "softmax_net"])
def case(request, digits, smx) -> Case:
    return {"digits": digits, "softmax_net": smx}[request.param]


# --------------------------------------------------------------------------- the findings
def test_shape_of_2_pow_64_is_refused(digits):
    """Was OverflowError from np.prod in check_meta."""
    for where in ("tensors", "golden"):
        meta = digits.meta()
        entry = meta["tensors"]["logits"] if where == "tensors" else \
            meta["golden"]["outputs"]["probs"]
        entry["shape"] = [2**64]
        e = digits.refused(digits.file(meta))
        assert e.value == 2**64 and e.limit == LIMITS["int_abs"]
        assert e.field.endswith(".shape[0]") and e.field.startswith(where)


def test_meta_nested_1000_deep_is_refused(digits):
    """Was RecursionError from json.loads; the depth is measured before the parser recurses."""
    meta = digits.meta()
    for depth in (1000, 100_000):
        raw = json.dumps(meta)[:-1] + ',"deep":' + "[" * depth + "]" * depth + "}"
        e = digits.refused(digits.file(raw=raw.encode()))
        assert e.field == "META" and e.value == depth + 1 and e.limit == LIMITS["json_depth"]
    # the limit itself is fine; brackets inside strings do not count
    ok = json.dumps(meta)[:-1] + ',"deep":' + "[" * 31 + "]" * 31 + ',"s":"' + "[" * 99 + '"}'
    assert digits.outcome(digits.file(raw=ok.encode())) == "same"


def test_5000_digit_integer_is_refused(digits):
    """Was ValueError (Python's int-string conversion limit)."""
    size = f'"size": {digits.meta()["arena"]["size"]}'  # (the only value it prints as)
    raw = json.dumps(digits.meta()).replace(size, '"size": ' + "9" * 5000)
    e = digits.refused(digits.file(raw=raw.encode()))
    assert e.field == "arena.size" and "too long" in str(e)
    assert len(str(e)) < 300                    # the value is abbreviated, not printed whole
    raw = json.dumps(digits.meta()).replace(size, size + "." + "0" * 5000)
    assert digits.refused(digits.file(raw=raw.encode())).field == "arena.size"


@pytest.mark.parametrize("dtype", ["S0", "S4", "O", ">f4", "V8", "float32,int8", "U1", "M8"])
def test_dtype_S0_and_other_types_are_refused(smx, dtype):
    """"S0" was a ZeroDivisionError (itemsize 0); only the listed element types pass."""
    for where in ("constants", "golden"):
        meta = smx.meta()
        entry = next(iter(meta["constants"].values())) if where == "constants" else \
            meta["golden"]["inputs"]["x"]
        entry["dtype"] = dtype
        e = smx.refused(smx.file(meta))
        assert e.field.startswith(where) and e.field.endswith(".dtype") and e.value == dtype


def test_constant_of_2_pow_32_squared_elements_is_refused(smx):
    """[2**32, 2**32] wrapped to 0 elements in int64; products are exact now."""
    meta = smx.meta()
    name = next(iter(meta["constants"]))
    for shape, field in (([2**32, 2**32], "shape[0]"), ([2**31 - 1] * 2, "shape"),
                         ([1] * 9, "shape"), ([100], "constants")):
        meta["constants"][name]["shape"] = shape
        e = smx.refused(smx.file(meta))
        assert e.field.startswith(f"constants.{name}") and e.field.endswith(
            field if field != "constants" else name), (shape, e)


@pytest.mark.parametrize("value", [
    {"__array__": [[1], [2, 3]], "dtype": "<i8", "shape": [2]},          # ragged
    {"__array__": [1, 2, 3], "dtype": "<i8", "shape": [2]},              # shape mismatch
    {"__array__": ["a"], "dtype": "<f4", "shape": [1]},                  # not numbers
    {"__array__": [None], "dtype": "<f4", "shape": [1]},
    {"__array__": [2**40], "dtype": "<i4", "shape": [1]},                # does not fit
    {"__array__": [1.5], "dtype": "<i8", "shape": [1]},
    {"__array__": [1], "dtype": "S0", "shape": [1]},
    {"__array__": [1], "dtype": "<i8", "shape": [1], "extra": 1},
    {"__array__": [0] * 10, "dtype": "<i8", "shape": [LIMITS["attr_elements"] + 1]},
])
def test_bad_cpu_attribute_arrays_are_refused(smx, value):
    """Were ValueError/TypeError from the runtime's decode_attr."""
    meta = smx.meta()
    i = next(i for i, s in enumerate(meta["program"]) if s.get("op") == "Transpose")
    meta["program"][i]["attrs"]["perm"] = value
    e = smx.refused(smx.file(meta))
    assert e.field.startswith(f"program[{i}].attrs.perm")


def test_second_meta_section_is_refused(digits):
    """The last META used to win silently."""
    other = digits.meta()
    other["program"][1]["attrs"]["axis"] = 0
    data = container([("META", json.dumps(digits.meta()).encode()),
                      ("META", json.dumps(other).encode()), ("CMDS", digits.net.commands),
                      ("WGTS", digits.net.weights), ("GOLD", digits.net.golden)])
    e = digits.refused(data)
    assert e.field == "META" and "two META sections" in str(e)
    for tag in ("CMDS", "GOLD"):                    # any tag
        data = container([("META", json.dumps(digits.meta()).encode()),
                          ("CMDS", digits.net.commands), ("WGTS", digits.net.weights),
                          ("GOLD", digits.net.golden), (tag, b"")])
        assert digits.refused(data).field == tag


def test_duplicate_json_key_is_refused(digits):
    raw = json.dumps(digits.meta())[:-1] + ', "arena": {"size": 0}}'
    e = digits.refused(digits.file(raw=raw.encode()))
    assert e.field == "META" and e.value == "arena"


@pytest.mark.parametrize("axis", [2**63, -(2**63), 2**62, 2**32, 2, -3, 1.0, True, "1", None])
def test_softmax_axis_outside_the_rank_is_refused(digits, axis):
    """An axis of 2**63 ran as axis % ndim; the axis must lie in [-rank, rank - 1]."""
    meta = digits.meta()
    meta["program"][1]["attrs"]["axis"] = axis
    e = digits.refused(digits.file(meta))
    assert e.field == "program[1].attrs.axis"


def test_softmax_axis_within_the_rank(digits, smx):
    meta = digits.meta()
    meta["program"][1]["attrs"]["axis"] = -1                # the same axis of [1, 10]
    assert digits.outcome(digits.file(meta)) == "same"
    meta = smx.meta()
    i = next(i for i, s in enumerate(meta["program"]) if s.get("op") == "Softmax")
    for axis, ok in ((-4, True), (3, True), (4, False), (-5, False)):
        meta["program"][i]["attrs"]["axis"] = axis
        assert smx.outcome(smx.file(meta)) != "refused" if ok else \
            smx.refused(smx.file(meta)).field == f"program[{i}].attrs.axis"


@pytest.mark.parametrize("delta", [1, 3, 2, 16, -2, 64])
def test_tensor_offsets_are_checked_against_the_commands(digits, delta):
    """An odd offset (and one that is even but where no command reads or writes the tensor)
    ran on the wrong bytes; placement and plan are edited together so only the commands can
    tell."""
    meta = digits.meta()
    for name in ("logits", "image"):
        off = meta["tensors"][name]["device"]["offset"] + delta
        if off < 0:
            continue
        meta["tensors"][name]["device"]["offset"] = off
        meta["arena"]["offsets"][name] = off
        e = digits.refused(digits.file(meta))
        assert e.field == f"tensors.{name}.device" + (".offset" if delta % 2 else "")
        meta = digits.meta()


def test_placement_and_plan_must_agree(digits):
    meta = digits.meta()
    meta["arena"]["offsets"]["logits"] = 2
    assert digits.refused(digits.file(meta)).field == "arena.offsets.logits"
    meta = digits.meta()
    meta["tensors"]["logits"]["device"]["hwc"] = [1, 2, 5]       # same bytes, other layout
    assert digits.refused(digits.file(meta)).field == "tensors.logits.device.hwc"


# --------------------------------------------------------------------------- the sections
def _records(net: NetFile) -> list[bytearray]:
    return [bytearray(r) + bytearray(-len(r) % 8) for r in net.command_records()]


def _cmds(records: list[bytearray]) -> bytes:
    return b"".join(bytes(r) for r in records)


V0 = SPEC.struct("conv_v0")
WEIGHT_BUF = V0.offset("run") + SPEC.struct("conv_run").offset("weight_buf")


@pytest.mark.parametrize("pos,value,field", [
    (V0.offset("input_buf") + 8, 1, "CMDS[0].input_buf.offs"),          # odd (§6.8)
    (V0.offset("output_buf") + 8, 2**40, "CMDS[0].output_buf"),          # past 4 GiB
    (V0.offset("output_buf") + 8, 1 << 20, "CMDS[0].output_buf"),        # past the arena
    (V0.offset("input_buf"), 2, "CMDS[0].input_buf"),                    # in the weights
    (V0.offset("output_buf"), 9, "CMDS[0].mem"),                         # no such region
    (WEIGHT_BUF + 8, 8, "CMDS[0].run[0].weight_buf.offs"),               # not 16-aligned
    (WEIGHT_BUF + 8, 1 << 20, "CMDS[0].run[0].weight_buf"),              # past WGTS
    (WEIGHT_BUF, 1, "CMDS[0].run[0].weight_buf"),                        # in the arena
])
def test_relocations_lie_in_their_region_and_are_aligned(smx, pos, value, field):
    """Record 0 edited in place (u64 handle or offset), CMDS CRC recomputed."""
    recs = _records(smx.net)
    recs[0][pos : pos + 8] = value.to_bytes(8, "little")
    e = smx.refused(smx.file(CMDS=_cmds(recs)))
    assert e.field == field, e


def test_records_must_be_conv_commands_of_their_size(smx):
    for pos, value, field in ((4, 4, "CMDS[0].header.device_type"),
                              (5, 7, "CMDS[0].header.version")):
        recs = _records(smx.net)
        recs[0][pos] = value
        assert smx.refused(smx.file(CMDS=_cmds(recs))).field == field
    recs = _records(smx.net)
    recs[0] = recs[0][:48]                              # a maximizer-sized record
    recs[0][0:4] = (48).to_bytes(4, "little")
    assert smx.refused(smx.file(CMDS=_cmds(recs))).field == "CMDS[0].header.size"


def test_step_command_ranges_lie_in_cmds(smx):
    meta = smx.meta()
    for rng, field in (([1, 2], "program[3].commands"), ([-1, 1], "program[3].commands[0]"),
                       ([0, 0], "program[3].commands[1]"), ([2**64, 1], "program[3].commands[0]")):
        meta["program"][3]["commands"] = rng
        assert smx.refused(smx.file(meta)).field == field


def test_cpu_steps_name_kernels_and_known_tensors(smx):
    # Conv's kernel meets a (1, 8, 6, 6) input and int64 "weights": refused when it runs
    cases = [("op", "NoSuchOp", "program[1].op"), ("op", "Conv", "program.Pad9"),
             ("inputs", ["relu_out5", "nope"], "program[1].inputs[1]"),
             ("inputs", ["pad_out8", "pads7"], "program[1].inputs[0]"),   # no value yet
             ("outputs", ["pads7"], "program[1].outputs[0]"),
             ("outputs", ["x"], "program[1].outputs[0]")]       # the input: written twice
    for key, value, field in cases:
        meta = smx.meta()
        meta["program"][1][key] = value
        assert smx.refused(smx.file(meta)).field == field, (key, value)


@pytest.mark.parametrize("attr,value", [
    ("perm", [0, 1, 2, 2]), ("perm", [0, 1, 2]), ("perm", [0, 1, 2, 4]), ("perm", 3),
    ("perm", [0, 1, 2, 3.0])])
def test_transpose_perm_must_be_a_permutation_of_the_input_axes(smx, attr, value):
    meta = smx.meta()
    i = next(i for i, s in enumerate(meta["program"]) if s.get("op") == "Transpose")
    meta["program"][i]["attrs"][attr] = value
    assert smx.refused(smx.file(meta)).field.startswith(f"program[{i}].attrs.{attr}")


def test_cpu_output_of_another_shape_is_refused_when_it_runs(smx):
    """A valid permutation that makes another shape than the file records: the runtime
    refuses the result instead of uploading or returning it."""
    meta = smx.meta()
    i = next(i for i, s in enumerate(meta["program"]) if s.get("op") == "Transpose")
    meta["program"][i]["attrs"]["perm"] = [0, 1, 3, 2]
    e = smx.refused(smx.file(meta))
    assert e.field == f"tensors.{meta['program'][i]['outputs'][0]}.shape"
    assert e.value == [1, 4, 6, 6] and e.limit == [1, 6, 6, 4]


def test_pad_mode_must_be_one_the_kernel_has(smx):
    meta = smx.meta()
    meta["program"][1]["attrs"]["mode"] = "mirror"
    e = smx.refused(smx.file(meta))
    assert e.field == "program[1].attrs.mode" and "reflect" in e.limit


# --------------------------------------------------------------------------- the CLI
FINDINGS = {
    "shape_2_pow_64": lambda c: c.file(_edit(c, ["tensors", "logits", "shape"], [2**64])),
    "nested_1000": lambda c: c.file(raw=json.dumps(c.meta())[:-1].encode() + b',"d":'
                                    + b"[" * 1000 + b"]" * 1000 + b"}"),
    "digits_5000": lambda c: c.file(raw=json.dumps(c.meta()).replace(
        f'"size": {c.meta()["arena"]["size"]}', '"size": ' + "7" * 5000).encode()),
    "dtype_S0": lambda c: c.file(_edit(c, ["golden", "inputs", "image", "dtype"], "S0")),
    "golden_2_pow_64_elements": lambda c: c.file(_edit(c, ["golden", "outputs", "probs",
                                                           "shape"], [2**32, 2**32])),
    "attr_ragged": lambda c: c.file(_edit(c, ["program", 1, "attrs", "axis"], {
        "__array__": [[1], [2, 3]], "dtype": "<i8", "shape": [2]})),
    "two_meta": lambda c: container([("META", json.dumps(c.meta()).encode())] * 2),
    "axis_2_pow_63": lambda c: c.file(_edit(c, ["program", 1, "attrs", "axis"], 2**63)),
    "odd_offset": lambda c: c.file(_edit(_edit(c, ["arena", "offsets", "logits"], 1),
                                         ["tensors", "logits", "device", "offset"], 1)),
}


def _edit(c: Case | dict, path: list, value) -> dict:
    meta = c.meta() if isinstance(c, Case) else c
    node = meta
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return meta


def test_dvsdk_run_exits_2_on_every_finding(digits, tmp_path, capsys):
    """In process through the CLI's own entry point: one line, exit 2, never 1."""
    for name, make in FINDINGS.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(make(digits))
        assert dvsdk_run([str(path), "--selftest", "--device", SIM]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("dvsdk-run: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err and len(err) < 1000, err


# --------------------------------------------------------------------------- the fuzzer
def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _get(node, path):
    for key in path:
        node = node[key]
    return node


def _set(node, path, value) -> bool:
    """Replace the value at ``path``; False if a previous edit removed the path."""
    try:
        parent = _get(node, path[:-1])
        parent[path[-1]] = value
        return True
    except (KeyError, IndexError, TypeError):
        return False


def _mutant(rng: random.Random, meta: dict, paths: list) -> tuple[dict, list]:
    """1-2 edits: a junk value, a neighbour of a number (off by one, sign, 2**k), or the
    edits of the findings (huge shapes, odd offsets, bad dtypes, deep nesting)."""
    meta = copy.deepcopy(meta)
    done = []
    for _ in range(rng.choice((1, 1, 2))):
        path = rng.choice(paths)
        old = _get(meta, path) if _set(meta, path, None) else None
        kind = rng.random()
        if isinstance(old, int) and not isinstance(old, bool) and kind < 0.5:
            new = rng.choice([old + 1, old - 1, old + 2, -old, old * 2, old + 64, 2**63 - 1,
                              old + 2**32, 0, 1])
        elif isinstance(old, list) and old and all(isinstance(x, int) for x in old) \
                and kind < 0.5:
            new = list(old)
            j = rng.randrange(len(new))
            new[j] = rng.choice([new[j] + 1, 0, 2**32, 2**64, -1, new[j] * 2])
            if kind < 0.1:
                new = new[::-1]
        elif isinstance(old, str) and kind < 0.3:
            new = rng.choice(["S0", old + "x", "", old.upper(), "x" * (LIMITS["string_chars"]
                                                                       + 1)])
        else:
            new = rng.choice(JUNK)
        _set(meta, path, old)
        if _set(meta, path, new):
            done.append(path)
    return meta, done


#: Paths whose value only the file records: a new value the kernel accepts legitimately
#: computes something else (e.g. Softmax over another valid axis, LeakyRelu with another
#: slope).  Every other edit must be refused or change nothing.
def _meaningful(path: tuple) -> bool:
    return len(path) >= 3 and path[0] == "program" and path[2] == "attrs"


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzzed_meta_loads_the_same_or_is_refused(case, seed):
    """CRC-valid META edits (bounded: 150 per net and seed, ~2 s in all): refused with NetFileError,
    or the same outputs bit for bit; never another exception."""
    rng = random.Random(seed * 7919 + len(case.net.commands))
    paths = [p for p in _paths(case.net.meta) if p[0] != "report"]
    counts = {"refused": 0, "same": 0, "different": 0}
    for _ in range(150):
        meta, edited = _mutant(rng, case.net.meta, paths)
        try:
            raw = json.dumps(meta).encode()
        except ValueError:
            continue
        result = case.outcome(case.file(raw=raw))
        counts[result] += 1
        if result == "different":
            assert edited and all(_meaningful(p) for p in edited), (edited, meta)
    assert counts["refused"] > 50 and counts["same"] >= 1, counts


def test_fuzzed_files_exit_0_or_2_through_the_cli(smx, tmp_path, capsys):
    """A sample of the fuzzed files through ``dvsdk-run --selftest``: a refused file exits 2
    with one line, an accepted one runs its self-test."""
    rng = random.Random(5)
    paths = [p for p in _paths(smx.net.meta) if p[0] not in ("report", "golden")]
    codes = []
    for k in range(13):
        meta, edited = _mutant(rng, smx.net.meta, paths) if k else (smx.meta(), [])
        path = tmp_path / f"m{k}.bin"
        path.write_bytes(smx.file(meta))
        code = dvsdk_run([str(path), "--selftest", "--device", SIM, "-q"])
        err = capsys.readouterr().err
        want = 2 if smx.outcome(path.read_bytes()) == "refused" else 0
        assert code == want or (code == 1 and all(_meaningful(p) for p in edited)), (
            edited, code, err)
        assert err.count("\n") == (1 if code == 2 else 0), err
        codes.append(code)
    assert codes[0] == 0 and 2 in codes, codes


def test_meta_limits_are_what_netbin_yaml_says():
    assert LIMITS["json_depth"] == 32 and LIMITS["int_abs"] == 2**63 - 1
    assert math.prod([LIMITS["dim"]] * 2) > LIMITS["elements"]


# --------------------------------------------------------------------------- command streams
def _kick(sim, words: np.ndarray) -> int:
    buf = sim.alloc(max(words.nbytes, 8) + 8, align=64)
    buf.write(0, words.astype("<u4"))
    buf.sync_for_device()
    sim.write32("conv", SPEC.reg("conv", "SIM_STATUS"), 0)
    kick_stream(sim, buf.phys, -(-words.nbytes // 8))
    status = sim.read32("conv", SPEC.reg("conv", "SIM_STATUS"))
    buf.free()
    return status


def test_garbage_streams_set_a_status(sim):
    rng = np.random.default_rng(3)
    statuses = set()
    for i in range(300):
        n = int(rng.integers(1, 64))
        words = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        if i % 2:  # plausible write headers with random targets and counts
            words[0] = (words[0] & 0xFFFF0FF8) | 0xF004
        statuses.add(_kick(sim, words))
    assert statuses - {0}, "garbage should be reported"
    assert statuses <= set(SPEC.status.codes.values())


def test_garbage_configuration_images_set_a_status(sim):
    """A valid stream that loads a random configuration image and starts it: the conv
    engine reports bad_config / bad_address (or runs); it never raises or runs away."""
    from dvsdk.driver.stream import write_header, write_packet

    rng = np.random.default_rng(11)
    seen = set()
    for _ in range(150):
        nruns = int(rng.integers(1, 5))
        image = rng.integers(0, 2**32, 8 + 11 * nruns, dtype=np.uint64).astype(np.uint32)
        image[0] = int(rng.integers(1, 1 << nruns))          # topo with 1..nruns runs
        if rng.random() < 0.5:                                # small dimensions sometimes
            image[1] = int(rng.integers(1, 16)) | int(rng.integers(1, 16)) << 16
            image[2] = 1 | int(rng.integers(1, 40)) << 16
        words = np.concatenate([
            np.array(write_packet(SPEC.stream_reg("cfg_addr"), 0x2000), np.uint32),
            np.array([write_header(SPEC.stream_reg("cfg_data"), image.size)], np.uint32),
            image,
            np.array(write_packet(SPEC.stream_reg("start"), 1), np.uint32),
            np.array(write_packet(SPEC.stream_reg("irq"), 1), np.uint32)])
        seen.add(_kick(sim, words))
    assert seen - {0}
    assert seen <= set(SPEC.status.codes.values())


@pytest.mark.parametrize("key, value, message", [
    ("command_outputs", ["nope"], "names no tensor"),
    ("command_outputs", [], "needs one entry per command"),
    ("command_inputs", [["nope"]], "names no tensor"),
    ("command_inputs", [5], "command_inputs"),
])
def test_per_command_tensor_names_are_checked(key, value, message):
    """What ``dvsdk analyze`` reads back per command must name tensors the net has."""
    import dvsdk
    from dvsdk.errors import NetFileError
    from dvsdk.netfile import decode, encode

    from .onnx_models import conv_bn_relu

    net = dvsdk.compile(conv_bn_relu().SerializeToString(), golden=False)
    step = next(s for s in net.meta["program"] if s["kind"] == "hw")
    assert step["commands"][1] == 1
    step[key] = value
    with pytest.raises(NetFileError, match=message):
        decode(encode(net))

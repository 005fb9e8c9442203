"""The simulator's fast paths change no bit, and coherence problems are still caught.

* Prepared run steps with fused epilogues (``sim/kernels.py``) against the numpy paths
  (``DVSDK_NATIVE=0``'s ``conv_unit._run``), on a spread of test_ops_conv's matrices
  (every kernel, stride and activation, PReLU, leaky slopes, rectify, Q8; depthwise,
  deconv, dilated, max-pool between conv and activation),
  element-wise adds with pools and upsampling, standalone max and average pools (every
  activation) and upsampling, and multi-run commands; each set also with
  the decoded-stream and configuration-plan caches off.  The cases themselves check
  their outputs against the independent references of tests/refs.py.
* Decoded stream chunks: kept per address and content; the watchdog's step limit met in
  the middle of a chunk stops the kick at that very word.
* Coherence with write spans instead of whole-buffer compares: a CPU store through
  ``write()`` or through the raw view without ``sync_for_device``, and a device store read
  without ``sync_for_cpu``, are reported with the buffer and byte range.
"""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk import native
from dvsdk.driver.stream import write_header, write_packet
from dvsdk.errors import CoherenceError, DeviceTimeout
from dvsdk.hw.spec import SPEC
from dvsdk.sim.core import SimParams, Watchdog
from dvsdk.sim.decode import decode
from dvsdk.sim.device import SimDevice

from .hw import upload
from .refs import GUARD_NAN, assert_no_failures, run_cases
from .test_ops_conv import (
    conv_matrix_float,
    conv_matrix_int,
    conv_pool_act_cases,
    deconv_cases,
    depthwise_cases,
    dilated_cases,
)
from .test_ops_multirun import chain_cases
from .test_ops_pool import add_cases, pool_cases, upsample_cases
from .test_sim_faults import _tiny_conv

pytestmark = pytest.mark.filterwarnings("ignore::dvsdk.native.NativeFallbackWarning")
NATIVE = native.NATIVE
needs_native = pytest.mark.skipif(NATIVE is None, reason="dvsdk._native not built")


class NoStore(dict):
    """A cache that keeps nothing: every command is planned and every chunk decoded anew."""

    def __setitem__(self, key, value) -> None:
        pass


def conv_cases() -> list:
    """A spread of the conv matrices of test_ops_conv: float data, every kernel, stride,
    pads, activation (PReLU, leaky slopes), rectify, FP16 and Q8 weights; depthwise,
    deconv, dilated, and max-pools between the conv and the activation."""
    cases = list(conv_matrix_float())[::3] + list(conv_matrix_int())[::40]
    for more in (depthwise_cases(), deconv_cases(), dilated_cases(), conv_pool_act_cases()):
        cases += list(more)[::4]
    return cases


def _outputs(sim, cases, monkeypatch, compiled: bool, caches: bool):
    monkeypatch.setattr(native, "NATIVE", NATIVE if compiled else None)
    if not caches:
        sim.core.conv_plans = NoStore()
        sim.core._chunks = NoStore()
    res = run_cases(sim, cases, per_list=17, seed=3, guard=GUARD_NAN)
    assert_no_failures(res, len(cases))
    return res


@needs_native
@pytest.mark.parametrize("which", ["conv", "add", "multirun", "pool"])
def test_fused_steps_and_caches_change_no_bit(which, monkeypatch):
    cases = {"conv": conv_cases, "add": lambda: list(add_cases()),
             "multirun": lambda: list(chain_cases()),
             "pool": lambda: list(pool_cases())[::2] + list(upsample_cases())[::5]}[which]()
    shas = {}
    for compiled in (True, False):
        for caches in (True, False):
            sim = SimDevice()
            try:
                shas[compiled, caches] = _outputs(sim, cases, monkeypatch, compiled, caches).sha
            finally:
                sim.close()
    assert len(set(shas.values())) == 1, shas


def test_a_stream_is_decoded_once_per_address_and_content(sim, monkeypatch):
    calls = []
    import dvsdk.sim.engine as engine

    monkeypatch.setattr(engine, "decode", lambda *a: calls.append(a) or decode(*a))
    cl, _ = _tiny_conv(sim)   # (decoded when committed: sim/warm.py)
    cl.run()
    first = len(calls)
    cl.run()
    cl.run()
    assert first == 1 and len(calls) == 1  # replayed from the first decode
    # the same address with other words is decoded again
    words = np.zeros(cl.stream.lengths[0] // 4, np.uint32)   # the interrupt write, pads
    words[:2] = write_packet(SPEC.stream_reg("irq"), 1)
    chunk = cl.stream.chunks[0]
    chunk.write(0, words)
    chunk.sync_for_device()
    cl.run()
    assert len(calls) == 2 and calls[-1][0].tolist() == words.tolist()


def test_the_step_limit_in_the_middle_of_a_chunk_stops_at_that_word():
    sim = SimDevice(SimParams(watchdog=Watchdog(stream_steps=10)), dram_mb=16)
    try:
        words = np.zeros(40, np.uint32)   # 40 pad words: step 11 is the word at byte 40
        buf = upload(sim, words.view(np.uint8))
        sim.write32("conv", SPEC.reg("conv", "CMD_ADDR"), buf.phys)
        sim.write32("conv", SPEC.reg("conv", "CMD_LEN"), words.size // 2)
        for _ in range(2):  # the second kick replays the decoded chunk
            sim.write32("conv", SPEC.reg("conv", "KICK"), 1)
            with pytest.raises(DeviceTimeout) as e:
                sim.wait_irq("conv", 0.01)
            assert f"SIM_FAULT_ADDR={buf.phys + 40:#010x}" in str(e.value)
            assert "10 packets decoded" in sim.errors[-1]
            sim.reset()
    finally:
        sim.close()


# -- coherence ------------------------------------------------------------------------------

def _committed_conv(sim):
    cl, _ = _tiny_conv(sim)
    return cl, cl.commands[0]


def test_a_cpu_store_through_write_is_caught_where_the_device_reads_it(sim):
    cl, cmd = _committed_conv(sim)
    buf = cmd.input_buf.buffer
    cl.run()
    buf.write(4, np.array([1, 2, 3], np.uint8))       # no sync_for_device
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert (e.value.buffer, e.value.start, e.value.end) == (buf.name, 4, 7)
    assert not buf.raw                                 # found by its span, no comparison
    buf.sync_for_device(0, 5)                          # a part of the stores
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert (e.value.start, e.value.end) == (5, 7)
    buf.sync_for_device()
    cl.run()


def test_a_store_through_the_raw_view_is_caught_by_comparison(sim):
    cl, cmd = _committed_conv(sim)
    buf = cmd.input_buf.buffer
    cl.run()
    view = buf.view                                    # handed out: comparing from now on
    assert buf.raw
    view[6] ^= 0xFF                                    # no sync_for_device
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert (e.value.start, e.value.end) == (6, 7)
    buf.sync_for_device()
    cl.run()
    view[2:4] = 9                                      # the same view, later
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert (e.value.start, e.value.end) == (2, 4)


def test_device_output_read_without_sync_is_caught_and_runtime_buffers_stay_uncompared(sim):
    cl, cmd = _committed_conv(sim)
    out = cmd.output_buf.buffer
    cl.run()
    with pytest.raises(CoherenceError, match="sync_for_cpu"):
        out.read(0, 2)                                 # the one FP16 output
    out.sync_for_cpu(0, 1)
    out.read(0, 1)
    with pytest.raises(CoherenceError) as e:
        out.read(0, 4)                                 # byte 1 is still the device's
    assert (e.value.start, e.value.end) == (1, 2)
    assert not any(b.raw for b in sim.buffers.values())  # no view handed out here


def test_a_plan_kept_with_its_chunk_follows_later_writes_of_the_image():
    """A configuration image written whole by a CFG packet has its plan kept with the
    decoded chunk; a later write into controller memory (another packet, from the image
    address or inside it) is seen by the next START, kick after kick."""
    from dvsdk.driver.cmdlist import CommandList
    from dvsdk.driver.commands import ConvCommand, ConvRun
    from dvsdk.driver.stream import CONFIG, REG_CFG_ADDR, REG_CFG_DATA, REG_IRQ, REG_START
    from dvsdk.hw.weights import pack_conv_weights

    from .hw import download_tensor
    from .test_sim_faults import _kick

    sim = SimDevice(dram_mb=16)
    try:
        cl, command = _tiny_conv(sim)
        outs = [sim.alloc(64) for _ in range(2)]
        image = 0x2000 + CONFIG.offset("output_base_addr")
        words = list(command)
        for out in outs:  # the same command again, its output moved by a one-word packet
            words += write_packet(REG_CFG_ADDR, image) + write_packet(REG_CFG_DATA, out.phys)
            words += write_packet(REG_START, 1)
        words += write_packet(REG_IRQ, 1)
        for _ in range(3):
            for out in outs:
                out.write(0, np.zeros(64, np.uint8))
                out.sync_for_device()
            assert _kick(sim, words) == ("irq", "ok")
            for out in outs:
                np.testing.assert_array_equal(download_tensor(out, (1, 1, 8))[..., 0], 8.0)
        # a stream writing only the header's first words from the image address: its
        # plan depends on the runs an earlier stream left there (not kept with its chunk)
        head = sim.core.cfg_mem[0x2000 : image + 4].view("<u4").copy()
        head[-1] = outs[0].phys
        short = write_packet(REG_CFG_ADDR, 0x2000) + [write_header(REG_CFG_DATA, head.size),
                                                       *head.tolist()]
        short += write_packet(REG_START, 1) + write_packet(REG_IRQ, 1)
        for scale in (1.0, 2.0, 1.0, 2.0):
            weights = upload(sim, pack_conv_weights(np.full((1, 8, 1, 1), scale, np.float32),
                                                    np.zeros(1, np.float32)))
            other = CommandList(sim)
            other.add(ConvCommand(input_buf=cl.commands[0].input_buf, output_buf=outs[1],
                                  w=1, h=1, c=8, runs=[ConvRun.make(1, conv="conv", kernel=1,
                                                                    weights=weights)]))
            other.commit()
            other.run()
            outs[0].write(0, np.zeros(64, np.uint8))
            outs[0].sync_for_device()
            assert _kick(sim, short) == ("irq", "ok")
            np.testing.assert_array_equal(download_tensor(outs[0], (1, 1, 8))[..., 0],
                                          8.0 * scale)
            other.close()
    finally:
        sim.close()

"""firmware_spec layouts and the command-stream encoding against the numbers of §3, §5, §10."""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.driver.stream import config_image, conv_words, hw_run_fields, write_header
from dvsdk.errors import InvalidArgument
from dvsdk.hw.spec import SPEC, load_spec


@pytest.mark.parametrize("name,size", [
    ("conv_v0", 1864), ("conv_v1", 1896), ("conv_run", 56), ("fc_v0", 72),
    ("maximizer_v0", 48), ("ipu_v0", 224), ("kipu_v0", 232), ("kconv_v0", 1864),
    ("kconv_v1", 1888), ("cmdraw_header", 8), ("dv_buf", 16), ("kbuf", 16),
    ("kcmdraw_header", 8), ("conv_config", 32), ("conv_config_run", 44),
])
def test_struct_sizes_match_dmp_asserts(name, size):
    assert SPEC.struct(name).size == size
    assert SPEC.struct(name).dtype.itemsize == size


@pytest.mark.parametrize("runs", [1, 2, 7, 32])
def test_kernel_conv_and_config_sizes(runs):
    assert SPEC.struct("kconv_v0").bytes_sent(runs) == 72 + 56 * runs
    assert SPEC.struct("kconv_v1").bytes_sent(runs) == 96 + 56 * runs


def test_field_offsets_from_the_reference():
    v0, run = SPEC.struct("conv_v0"), SPEC.struct("conv_run")
    assert [v0.offset(f) for f in ("input_buf", "output_buf", "eltwise_buf", "topo", "w",
                                   "input_circular_offset", "output_mode", "run")] == \
        [8, 24, 40, 56, 60, 68, 70, 72]
    assert run.offset("lrn") == 52 and run.offset("pool_avg_param") == 40
    ipu, kipu = SPEC.struct("ipu_v0"), SPEC.struct("kipu_v0")
    assert ipu.offset("stride_rd") == 68 and kipu.offset("stride_rd") == 76
    assert ipu.offset("cnv_param") == 216 and kipu.offset("cnv_param") == 224
    assert SPEC.struct("kconv_v1").offset("topo") == 80


def test_register_offsets():
    assert SPEC.reg("conv", "KICK") == 0x408
    assert SPEC.reg("conv", "CMD_LEN") == 0x404
    assert SPEC.reg("conv", "IRQ") == 0x420
    assert SPEC.reg("ipu", "START") == 0x2A0
    assert SPEC.reg("maximizer", "START") == 0x008
    assert SPEC.stream_reg("irq") * 4 == 0x420


def test_packet_headers_match_reference_examples():
    assert write_header(0x20, 1) == 0x0020F004
    assert write_header(0x21, 19) == 0x0021F094      # 1-run configuration image
    assert write_header(0x11, 2, increment=True) == 0x0011F00E  # old FC example
    assert write_header(0x13, 256) == 0x0013F7FC
    assert write_header(0x108, 1) == 0x0108F004
    with pytest.raises(InvalidArgument):
        write_header(0x21, 513)


def test_bitfields_roundtrip_and_reject_overflow():
    pad = SPEC.bits("pad7")
    word = pad.pack(left=3, right=200, top=5, bottom=255)
    assert word == 3 | 200 << 8 | 5 << 16 | 255 << 24
    assert pad.unpack(word) == {"left": 3, "right": 200, "top": 5, "bottom": 255}
    with pytest.raises(InvalidArgument, match="7 bits"):
        pad.pack(left=128)


def test_struct_pack_unpack_and_range_errors():
    st = SPEC.struct("maximizer_v0")
    raw = st.pack({"width": 640, "height": 480, "nclass": 12, "input_buf": {"offs": 64}})
    assert len(raw) == 48
    assert raw[40:42] == (640).to_bytes(2, "little") and raw[44] == 12
    back = st.unpack(raw)
    assert back["input_buf"]["offs"] == 64 and back["height"] == 480
    with pytest.raises(InvalidArgument, match="does not fit"):
        st.pack({"nclass": 300})
    with pytest.raises(InvalidArgument, match="no field"):
        st.pack({"colour": 1})
    with pytest.raises(InvalidArgument):
        st.unpack(raw[:40])


def test_spec_reload_from_installed_copy(tmp_path):
    import shutil

    from dvsdk.hw.spec import spec_dir

    for f in spec_dir().glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    assert load_spec(str(tmp_path)).struct("conv_v0").size == 1864


class _Buf:  # a stand-in with the two attributes the encoder reads
    def __init__(self, phys):
        self.phys, self.size, self.freed, self.name = phys, 1 << 20, False, "b"


def _ref(phys):
    from dvsdk.driver.commands import BufferRef

    return BufferRef(_Buf(phys), 0)


def test_conv_words_layout_one_run():
    run = ConvRun.make(16, conv="conv", kernel=3, weights=_ref(0x1000), pads=1, act="relu")
    cmd = ConvCommand(input_buf=_ref(0x2000), output_buf=_ref(0x8000), w=8, h=6, c=4,
                      runs=[run])
    words = conv_words(cmd, tiles=1)
    assert words.nbytes == 52 + 44                         # §11: 52 + 44·runs bytes
    assert list(words[:3]) == [0x0020F004, 0x2000, 0x0021F094]
    assert list(words[-2:]) == [0x0010F004, 1]
    image = words[3:-2].tobytes()
    hdr = SPEC.struct("conv_config").unpack(image)
    assert (hdr["w"], hdr["h"], hdr["c"], hdr["tiles"]) == (8, 6, 4, 1)
    assert hdr["input_base_addr"] == 0x2000 and hdr["output_base_addr"] == 0x8000
    assert hdr["eltwise_base_addr"] == 0xDEADBEEF           # no eltwise buffer (§6.8)
    r = SPEC.struct("conv_config_run").unpack(image, 32)
    assert (r["m"], r["p"], r["conv_pad"], r["weight_base_addr"]) == (16, 0x0303, 0x01010101,
                                                                      0x1000)
    assert r["actfunc"] == 2 and r["actfunc_param"] == 0


def test_config_image_size_and_dummy_pool():
    runs = [ConvRun.make(8, act="relu") for _ in range(3)]   # activation-only runs
    cmd = ConvCommand(input_buf=_ref(0), output_buf=_ref(64), w=2, h=2, c=8, runs=runs,
                      topo=0b100)
    assert len(config_image(cmd, 1)) == 32 + 44 * 3
    rec = hw_run_fields(runs[0])
    # §4.3: conv and pool both off -> 1x1 average pool with scale 1.0 (identity)
    assert (rec["pool_enable"], rec["pool_size"], rec["pool_avg_param"]) == (2, 0x0101, 0x3C00)
    lrn = ConvRun.make(16, lrn=True)
    assert hw_run_fields(lrn)["pool_enable"] == 0            # §15.1: LRN stays standalone


def test_dilation_zero_patched_to_one():
    run = ConvRun(m=1, conv_enable=1, p=0x0303, conv_dilation=0x0200)
    assert hw_run_fields(run)["conv_dilation"] == 0x0201


def test_v1_command_prefix():
    run = ConvRun.make(8, conv="conv", kernel=1, weights=_ref(0x100))
    cmd = ConvCommand(input_buf=_ref(0x2000), output_buf=_ref(0x4000), w=4, h=4, c=3,
                      runs=[run], u8tofp16_table=_ref(0x3000), to_bgr=1)
    words = conv_words(cmd, 1)
    assert list(words[:2]) == [0x2000F004, 0x3001]
    assert words.nbytes == 52 + 44 + 8


def test_raw_roundtrip_preserves_every_field():
    bufs = {1: _Buf(0x1000), 2: _Buf(0x9000)}
    from dvsdk.driver.commands import BufferRef

    run = ConvRun.make(64, conv="depthwise", kernel=(3, 2), weights=BufferRef(bufs[1], 32),
                       pads=(1, 0, 2, 1), stride=(2, 1), pool="max", pool_size=2,
                       pool_stride=2, act="sigmoid", rectify=True)
    cmd = ConvCommand(input_buf=BufferRef(bufs[2], 2), output_buf=BufferRef(bufs[2], 4096),
                      w=17, h=9, c=64, runs=[run], input_circular_offset=3)
    ids = {id(b): k for k, b in bufs.items()}
    raw = cmd.to_raw(lambda b: ids[id(b)])
    assert len(raw) == 1864
    back = ConvCommand.from_raw(raw, lambda mem, offs: BufferRef(bufs[mem], offs))
    assert back.runs[0] == run
    assert (back.w, back.h, back.c, back.batch) == (17, 9, 64, 3)
    assert back.input_buf.offset == 2 and back.output_buf.offset == 4096
    assert back.runs[0].kx == 3 and back.runs[0].ky == 2 and back.runs[0].pads == (1, 0, 2, 1)


def test_stream_chunks_chain_with_jumps(sim):
    from dvsdk.driver.stream import build_stream

    cmds = [np.arange(1, 41, dtype="<u4") | 0x0010F004 for _ in range(5)]
    stream = build_stream(sim, cmds, chunk_bytes=256)
    assert len(stream.chunks) == 5                          # 40 words + 3 reserved per 64
    for i, (buf, n) in enumerate(zip(stream.chunks, stream.lengths)):
        assert n % 8 == 0
        words = buf.read(0, n).view("<u4")
        if i + 1 < len(stream.chunks):
            jump = words[40:42]
            assert jump[0] == stream.lengths[i + 1] | 1 and jump[1] == stream.chunks[i + 1].phys
        else:
            assert list(words[40:42]) == [0x0108F004, 1]
    stream.free()

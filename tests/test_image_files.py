"""Common image files decode as people expect (issue 25, item 12).

The bundled "seven" saved as a 16-bit PNG ran as 69.5% "eight" (clipped at 255), as a
float TIFF as 61.7% "one" (decoded black), as a phone JPEG stored rotated with EXIF
orientation 6 as 99.5% "nine", all with exit status 0.  Each file here is made from that
sample with Pillow; every decoding must equal the 8-bit original's (with and without the
IPU), an image over the pixel limit is an ImageError naming the limit and how to raise it,
and a tensor input holding complex, NaN or infinite values is refused as such.
"""

from __future__ import annotations

import struct
import warnings
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

import dvsdk
from dvsdk.errors import ImageError, InvalidArgument
from dvsdk.runtime.images import as_rgb

from .conftest import ROOT
from .test_cli_run import call

MODELS = ROOT / "examples" / "models"
DIGITS = MODELS / "digits.bin"
SEVEN = MODELS / "samples" / "seven_1442.png"
ORIENTATION = 0x0112


@pytest.fixture(autouse=True)
def _sim(monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")


def gray() -> np.ndarray:
    return np.asarray(Image.open(SEVEN).convert("L"))


def exif(orientation: int) -> Image.Exif:
    e = Image.Exif()
    e[ORIENTATION] = orientation
    return e


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The sample as the three files of the issue, and a few more modes."""
    d = tmp_path_factory.mktemp("images")
    g = gray()
    out = {"png16": d / "seven16.png", "tiff_float": d / "seven_float.tif",
           "jpeg_exif6": d / "seven_phone.jpg", "png_exif6": d / "seven_exif6.png",
           "tiff16": d / "seven16.tif", "palette": d / "seven_p.png",
           "cmyk": d / "seven_cmyk.jpg", "la": d / "seven_la.png"}
    Image.fromarray(g.astype(np.uint16) * 257).save(out["png16"])
    Image.fromarray((g / 255.0).astype(np.float32)).save(out["tiff_float"])
    Image.fromarray(g.astype(np.uint16) * 257).save(out["tiff16"])
    rgb = Image.open(SEVEN).convert("RGB")
    # orientation 6: the stored image is the upright one turned 90 degrees counterclockwise
    stored = rgb.transpose(Image.Transpose.ROTATE_90)
    stored.save(out["jpeg_exif6"], quality=95, exif=exif(6))
    stored.save(out["png_exif6"], exif=exif(6))
    rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=256).save(out["palette"])
    rgb.convert("CMYK").save(out["cmyk"], quality=95)
    Image.open(SEVEN).convert("LA").save(out["la"])
    assert Image.open(out["png16"]).mode.startswith("I")
    assert Image.open(out["tiff_float"]).mode == "F"
    return out


# --------------------------------------------------------------------------- the three files
@pytest.mark.parametrize("kind", ["png16", "tiff_float", "jpeg_exif6"])
def test_the_issues_three_files_give_seven(files, kind, capsys):
    rc, out, err = call([DIGITS, files[kind], "-k", "1"], capsys)
    assert rc == 0, err
    assert out.strip().splitlines()[-1].split()[-1] == "seven", out


@pytest.mark.parametrize("kind", ["png16", "tiff_float", "png_exif6", "tiff16", "palette",
                                  "cmyk", "la"])
def test_decoded_pixels_equal_the_8bit_original(files, kind):
    want = np.asarray(Image.open(SEVEN).convert("RGB"))
    got = as_rgb(files[kind])
    if kind == "cmyk":   # Pillow's CMYK round trip and JPEG: close, not exact
        assert np.abs(got.astype(int) - want).max() <= 8
    else:
        np.testing.assert_array_equal(got, want)


def test_every_exif_orientation_is_applied(tmp_path):
    """Orientations 2-8 store the upright image flipped/turned; each decodes upright."""
    rgb = Image.fromarray(np.arange(3 * 4 * 3, dtype=np.uint8).reshape(3, 4, 3) * 7)
    stored = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
              4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
              6: Image.Transpose.ROTATE_90, 7: Image.Transpose.TRANSVERSE,
              8: Image.Transpose.ROTATE_270}
    for orientation, how in stored.items():
        path = tmp_path / f"o{orientation}.png"
        rgb.transpose(how).save(path, exif=exif(orientation))
        np.testing.assert_array_equal(as_rgb(path), np.asarray(rgb), err_msg=str(orientation))


def three_channel_net():
    """A 3-channel net whose preprocessing (x / 255) the IPU can do."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return dvsdk.compile(m.SerializeToString(), golden=False, scale=1 / 255)


@pytest.mark.parametrize("ipu", [False, True])
def test_run_image_with_and_without_the_ipu_decodes_the_same(files, ipu):
    net = three_channel_net()
    with dvsdk.load(net, "sim://") as n:
        want = n.run_image(SEVEN, ipu=ipu)["y"]
        for kind in ("png16", "tiff_float", "png_exif6"):
            np.testing.assert_array_equal(n.run_image(files[kind], ipu=ipu)["y"], want,
                                          err_msg=kind)


# --------------------------------------------------------------------------- refused
def test_float_image_outside_0_1_is_refused(tmp_path):
    path = tmp_path / "f255.tif"
    Image.fromarray(gray().astype(np.float32)).save(path)   # 0..255 as float
    with pytest.raises(ImageError, match=r"values span \[0, 255\]") as e:
        as_rgb(path)
    assert e.value.field == "image" and e.value.value == str(path) and e.value.limit == "[0, 1]"


def test_float_image_with_nan_is_refused(tmp_path):
    a = (gray() / 255.0).astype(np.float32)
    a[3, 4] = np.nan
    path = tmp_path / "nan.tif"
    Image.fromarray(a).save(path)
    with pytest.raises(ImageError, match=r"NaN or infinity \(1 of 1024 pixels\)"):
        as_rgb(path)


def test_32bit_integer_image_is_refused(tmp_path):
    path = tmp_path / "i32.tif"
    Image.fromarray(gray().astype(np.int32) * 1000).save(path)
    with pytest.raises(ImageError, match="32-bit integer pixels"):
        as_rgb(path)


def test_arrays_uint16_scale_and_nan_is_refused():
    g = gray()
    np.testing.assert_array_equal(as_rgb(g.astype(np.uint16) * 257)[..., 0], g)
    with pytest.raises(ImageError, match="NaN or infinity"):
        as_rgb(np.full((4, 4), np.nan, np.float32))
    with pytest.raises(ImageError, match="real numbers"):
        as_rgb(np.ones((4, 4), np.complex64))


# --------------------------------------------------------------------------- pixel limit
def png_header(width: int, height: int) -> bytes:
    """A PNG that claims width x height (1-bit gray) and holds almost no data: Pillow
    reads the size from the header before decoding anything."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


@pytest.fixture
def bomb(tmp_path):
    path = tmp_path / "huge.png"
    path.write_bytes(png_header(20000, 20000))
    return path


def test_20000_square_png_names_the_limit_and_how_to_raise_it(bomb, capsys):
    """An internal error in the CLI, a raw DecompressionBombError in the API."""
    with dvsdk.load(DIGITS, "sim://") as n, pytest.raises(ImageError) as e:
        n.run_image(bomb)
    assert "400,000,000 pixels" in str(e.value) and e.value.limit == "178,956,970 pixels"
    assert "DVSDK_MAX_IMAGE_PIXELS" in str(e.value)
    rc, _, err = call([DIGITS, bomb], capsys)
    assert rc == 2 and err.count("\n") == 1 and "image too large" in err
    assert "internal error" not in err


def test_the_pixel_limit_is_raised_by_the_environment(bomb, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # restored after
    monkeypatch.setenv("DVSDK_MAX_IMAGE_PIXELS", "500000000")
    with pytest.raises(ImageError) as e:       # within the limit now: decoded, and the
        as_rgb(bomb)                           # file holds no real data
    assert "too large" not in str(e.value) and "cannot decode" in str(e.value)
    monkeypatch.setenv("DVSDK_MAX_IMAGE_PIXELS", "1000")
    with pytest.raises(ImageError, match="image too large: 32x32 = 1,024 pixels"):
        as_rgb(SEVEN)
    monkeypatch.setenv("DVSDK_MAX_IMAGE_PIXELS", "many")
    with pytest.raises(ImageError, match="whole number"):
        as_rgb(SEVEN)


def test_eval_reports_the_huge_image_and_scores_the_others(bomb, tmp_path, capsys):
    """It killed the whole `dvsdk eval` run."""
    from dvsdk.cli.main import run as main_run

    for cls, src in (("seven", SEVEN), ("one", MODELS / "samples" / "one_1457.png")):
        (tmp_path / "ds" / cls).mkdir(parents=True)
        (tmp_path / "ds" / cls / src.name).write_bytes(src.read_bytes())
    (tmp_path / "ds" / "seven" / "huge.png").write_bytes(bomb.read_bytes())
    rc = main_run(["eval", str(DIGITS), str(tmp_path / "ds"), "-q"])
    out, err = capsys.readouterr()
    assert rc == 2 and "top-1 100.00%" in out and "on 2 images" in out
    assert "huge.png: image too large" in err and "internal error" not in err


def test_a_12000_square_image_runs_without_pillow_warnings(tmp_path):
    path = tmp_path / "big.png"
    Image.new("1", (12000, 12000), 0).save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dvsdk.load(DIGITS, "sim://") as n:
            y = n.run_image(path)
    assert np.isfinite(next(iter(y.values()))).all()


# --------------------------------------------------------------------------- tensors
def test_complex_npy_is_refused_not_cast(tmp_path, capsys):
    path = tmp_path / "c.npy"
    np.save(path, np.full((1, 1, 16, 16), 1 + 2j, np.complex64))
    rc, _, err = call([DIGITS, "--input", path], capsys)
    assert rc == 2 and err.count("\n") == 1 and "complex numbers" in err and str(path) in err
    with dvsdk.load(DIGITS, "sim://") as n, pytest.raises(InvalidArgument, match="complex"):
        n.run(np.load(path))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_in_an_input_says_so(tmp_path, capsys, bad):
    """It ran to non-finite outputs blamed on FP16 overflow and the input scaling."""
    x = np.zeros((1, 1, 16, 16), np.float32)
    x[0, 0, 3, 5] = bad
    path = tmp_path / "x.npy"
    np.save(path, x)
    rc, _, err = call([DIGITS, "--input", path], capsys)
    assert rc == 2 and err.count("\n") == 1 and "NaN or infinity (1 of 256 values)" in err
    assert "FP16" not in err and "scaling" not in err and str(path) in err
    with dvsdk.load(DIGITS, "sim://") as n, pytest.raises(InvalidArgument) as e:
        n.run(x)
    assert e.value.field == "image" and "[0, 0, 3, 5]" in e.value.value


def test_an_input_only_cpu_steps_read_keeps_nan_and_infinity():
    """ONNX gives NaN and -inf meaning (an attention mask, a Cast); only the DV700's inputs
    are refused."""
    g = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    net = dvsdk.compile(m.SerializeToString(), golden=False)
    assert "device" not in net.meta["tensors"]["x"]
    with dvsdk.load(net, "sim://") as n:
        y = n.run(np.array([[-np.inf, 1.0, -np.inf, 2.0]], np.float32))["y"]
    assert float(y) == 2.0

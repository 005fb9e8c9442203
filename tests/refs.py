"""Independent plain-numpy references for the DV700 operation tests, and a small harness.

Everything in the first part is written from dv700-interface.md (§1 layout, §4 conv
semantics, §4.7 LRN, §9 IPU/maximizer) and framework definitions; nothing here imports
``dvsdk.sim``.  The references compute in float64 (float32 where the reference text
says the hardware formula is float32, i.e. LRN) on FP16-representable inputs and round
to FP16 once where the hardware stores a tensor.

The second part is the device harness used by the ``test_ops_*`` files, modelled on
DMP's tests (§12): many configurations share one input, one weight and one output
arena at random offsets, grouped N per command list; the output arena is pre-filled
with a guard value and every byte outside the outputs must survive; a committed list
re-runs to the same SHA-256.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import BufferRef

# =========================================================================================
# FP16 and the WHC8 layout (§1), written from the formula
# =========================================================================================

F16 = np.dtype("<f2")
PURE_INTS = np.array([-2.0, -1.0, 1.0, 2.0])  # §12 generate_data.py "pure_ints"


def f16_cast(x) -> np.ndarray:
    """numpy's cast to binary16, with every NaN made the canonical quiet NaN 0x7E00: the
    one NaN dvsdk stores (firmware_spec/arithmetic.md; numpy keeps a NaN's payload)."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = np.array(x, dtype=F16)
    h[np.isnan(h)] = np.uint16(0x7E00).view(F16)
    return h


def fp16(x) -> np.ndarray:
    """Round to binary16 (nearest even) and back, as float64."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(F16).astype(np.float64)


def f16_bits(v: float) -> int:
    return int(np.array(v, F16).view("<u2"))


def whc8_offsets(h: int, w: int, c: int) -> np.ndarray:
    """Element offset of every (y, x, c) of one sample, shape (h, w, c) (§1)."""
    y = np.arange(h)[:, None, None]
    x = np.arange(w)[None, :, None]
    ch = np.arange(c)[None, None, :]
    c0 = ch & ~7
    cs = np.minimum(c - c0, 8)
    return c0 * (w * h) + (x * h + y) * cs + (ch & 7)


def to_whc8(x: np.ndarray) -> bytes:
    """(H, W, C) or (N, H, W, C) floats -> little-endian FP16 bytes in WHC8 order."""
    a = np.asarray(x, np.float64)
    if a.ndim == 3:
        a = a[None]
    n, h, w, c = a.shape
    out = np.empty(n * h * w * c, F16)
    off = whc8_offsets(h, w, c)
    for i in range(n):
        out[i * h * w * c + off] = a[i]
    return out.tobytes()


def from_whc8(raw, shape: Sequence[int]) -> np.ndarray:
    """WHC8 FP16 bytes -> float64 (N, H, W, C) (or (H, W, C) for a 3-tuple shape)."""
    shp = tuple(shape)
    n, h, w, c = (1, *shp) if len(shp) == 3 else shp
    flat = np.frombuffer(bytes(raw), F16).astype(np.float64)
    assert flat.size == n * h * w * c, (flat.size, shp)
    off = whc8_offsets(h, w, c)
    out = np.stack([flat[i * h * w * c + off] for i in range(n)])
    return out[0] if len(shp) == 3 else out


# =========================================================================================
# Conv-engine references (§4)
# =========================================================================================


def out_size(n: int, k_eff: int, pad_a: int, pad_b: int, stride: int) -> int:
    """§4.2: (pad_a + in + pad_b - k_eff) // stride + 1."""
    return (pad_a + n + pad_b - k_eff) // stride + 1


def conv_ref(x, w, b, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), depthwise=False):
    """Cross-correlation (§4.2): x (H, W, C), w (M, C, ky, kx) or (C, 1, ky, kx) depthwise,
    pads (left, right, top, bottom).  Output x reads input columns x*sx - pad_l + j*dx.
    One matmul per kernel tap; returns unrounded float64 (OH, OW, M)."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    h, wd, c = x.shape
    m, _, ky, kx = w.shape
    sx, sy = stride
    dx, dy = dil
    pl, pr, pt, pb = pads
    ow = out_size(wd, (kx - 1) * dx + 1, pl, pr, sx)
    oh = out_size(h, (ky - 1) * dy + 1, pt, pb, sy)
    xp = np.zeros((pt + h + pb, pl + wd + pr, c))
    xp[pt:pt + h, pl:pl + wd] = x
    out = np.zeros((oh, ow, m))
    for i in range(ky):
        for j in range(kx):
            tap = xp[i * dy: i * dy + (oh - 1) * sy + 1: sy, j * dx: j * dx + (ow - 1) * sx + 1: sx]
            out += tap * w[:, 0, i, j] if depthwise else tap @ w[:, :, i, j].T
    return out + np.asarray(b, np.float64)


def deconv_ref(x, wf, b, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), depthwise=False):
    """Framework transposed convolution: every input pixel scatters ``x * kernel`` into
    the output at ``(iy*sy + i*dy, ix*sx + j*dx)``, then ``pads`` (l, r, t, b) are cropped.

    ``wf`` is in the framework's (C_in, C_out, kh, kw) order (Caffe/PyTorch), or
    (C, 1, kh, kw) for a depthwise (grouped) deconvolution.  Unrounded float64.
    """
    x = np.asarray(x, np.float64)
    wf = np.asarray(wf, np.float64)
    h, wd, c = x.shape
    _, mo, kh, kw = wf.shape
    m = c if depthwise else mo
    sx, sy = stride
    dx, dy = dil
    fh = (h - 1) * sy + (kh - 1) * dy + 1
    fw = (wd - 1) * sx + (kw - 1) * dx + 1
    full = np.zeros((fh, fw, m))
    for i in range(kh):
        for j in range(kw):
            contrib = x * wf[:, 0, i, j] if depthwise else x @ wf[:, :, i, j]
            full[i * dy: i * dy + (h - 1) * sy + 1: sy, j * dx: j * dx + (wd - 1) * sx + 1: sx] += \
                contrib
    pl, pr, pt, pb = pads
    return full[pt: fh - pb, pl: fw - pr] + np.asarray(b, np.float64)


def max_pool_ref(x, size, stride, pads=(0, 0, 0, 0)):
    """Max pooling with padded positions as -inf (§4.3)."""
    x = np.asarray(x, np.float64)
    kx, ky = size
    sx, sy = stride
    pl, pr, pt, pb = pads
    h, w, c = x.shape
    ow, oh = out_size(w, kx, pl, pr, sx), out_size(h, ky, pt, pb, sy)
    xp = np.full((pt + h + pb, pl + w + pr, c), -np.inf)
    xp[pt:pt + h, pl:pl + w] = x
    out = np.full((oh, ow, c), -np.inf)
    for i in range(ky):
        for j in range(kx):
            out = np.maximum(out, xp[i: i + (oh - 1) * sy + 1: sy, j: j + (ow - 1) * sx + 1: sx])
    return out


def avg_pool_ref(x, size, stride, pads=(0, 0, 0, 0), param=None):
    """Average pooling on the conv engine (§4.3): window sum (padded positions count 0)
    times the FP16 multiplier ``param`` (default FP16(1/(kx*ky)))."""
    x = np.asarray(x, np.float64)
    kx, ky = size
    if param is None:
        param = fp16(1.0 / (kx * ky))
    sx, sy = stride
    pl, pr, pt, pb = pads
    h, w, c = x.shape
    ow, oh = out_size(w, kx, pl, pr, sx), out_size(h, ky, pt, pb, sy)
    xp = np.zeros((pt + h + pb, pl + w + pr, c))
    xp[pt:pt + h, pl:pl + w] = x
    s = np.zeros((oh, ow, c))
    for i in range(ky):
        for j in range(kx):
            s += xp[i: i + (oh - 1) * sy + 1: sy, j: j + (ow - 1) * sx + 1: sx]
    return s * float(param)


def upsample_ref(x):
    """Nearest 2x: out(x, y, c) = in(x // 2, y // 2, c) (§4.3)."""
    x = np.asarray(x)
    h, w, _ = x.shape
    return x[(np.arange(2 * h) // 2)[:, None], (np.arange(2 * w) // 2)[None, :]]


ACT_NAMES = {0: "none", 1: "tanh", 2: "leaky", 3: "sigmoid", 4: "prelu", 5: "elu", 6: "relu6"}
#: activations whose result on integers is not exact (the §13 pure-int 1e-3 case)
TRANSCENDENTAL = {1, 3, 5}


def act_ref(x, code: int, param: float = 0.0, prelu=None):
    """CONV actfunc (§4.5) on float64; ``param`` is the decoded FP16 actfunc_param."""
    x = np.asarray(x, np.float64)
    if code == 0:
        return x
    if code == 1:
        return np.tanh(x)
    if code == 2:
        return np.where(x > 0, x, x * param)
    if code == 3:
        return 1.0 / (1.0 + np.exp(-x))
    if code == 4:
        return np.where(x > 0, x, x * np.asarray(prelu, np.float64))
    if code == 5:  # Caffe ELU, alpha = 1
        return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))
    if code == 6:
        return np.clip(x, 0.0, 6.0)
    raise ValueError(code)


def fc_act_ref(x, code: int, param: float = 0.0):
    """FC actfunc codes (§3.4): 0 none, 1 ReLU, 2 tanh, 3 leaky ReLU, 4 sigmoid."""
    return act_ref(x, {0: 0, 1: 2, 2: 1, 3: 2, 4: 3}[code], param if code == 3 else 0.0)


# --- LRN (§4.7): the hardware formula, tables rebuilt from their definitions -------------
LRN_I = np.arange(13, dtype=np.float64)
_COEF0_13 = (1.0 + 2e-5 * 4.0 ** LRN_I) ** -0.75  # Caffe LRN, alpha 1e-4, n 5, beta 0.75
LRN_X_SAMPLE = (4.0 ** LRN_I[:12]).astype(np.float32)
LRN_H_INV = (1.0 / (3.0 * 4.0 ** LRN_I[:12])).astype(np.float32)
LRN_COEF0 = _COEF0_13[:12].astype(np.float32)
LRN_COEF1 = (_COEF0_13[1:] - _COEF0_13[:12]).astype(np.float32)  # differenced in float64


def lrn_ref(v, sf: int = 5) -> np.ndarray:
    """§4.7 in float32: s = sum over channels j-2..j+2 (clipped) of (v/2^sf)^2;
    addr = max(0, e + 2sf) >> 1 with e the float32 exponent of s;
    out = ((s*2^(2sf) - x_sample[a]) * coef1[a] * h_inv[a] + coef0[a]) * v."""
    v = np.asarray(v, np.float32)
    c = v.shape[-1]
    sq = np.square(v * np.float32(2.0 ** -sf))
    s = np.zeros_like(sq)
    for j in range(c):
        lo, hi = max(0, j - 2), min(c, j + 3)
        s[..., j] = sq[..., lo:hi].sum(axis=-1, dtype=np.float32)
    e = ((s.view(np.uint32) >> 23) & 0xFF).astype(np.int64) - 127
    a = np.maximum(0, e + 2 * sf) >> 1
    assert a.max() <= 11, "input outside the specified LRN table range (§4.7 [AMBIG])"
    big = s * np.float32(2.0 ** (2 * sf))
    f = (big - LRN_X_SAMPLE[a]) * LRN_COEF1[a] * LRN_H_INV[a] + LRN_COEF0[a]
    return (f * v).astype(np.float64)


# --- maximizer (§9.2) and IPU (§9.1) -----------------------------------------------------


def maximizer_ref(scores_hwc) -> np.ndarray:
    """uint8 argmax per pixel (lowest index wins a tie), stored x-major out[x*H + y]."""
    s = np.asarray(scores_hwc, F16)
    return np.argmax(s, axis=2).astype(np.uint8).T.reshape(-1)


def ipu_ref(tex, rect_w, rect_h, *, swizzle=(0, 1, 2), transpose=False, cnv="div255",
            cnv_param=(0, 0, 0)) -> np.ndarray:
    """RGB888 texture -> (rect_h, rect_w, 3) FP16 values, from §9.1's documented intent.

    Assumptions ([AMBIG] in §9.1): transpose swaps the texture's x/y before sampling;
    the texture is scaled to cover the rectangle and nearest sampling takes the texel
    containing the output pixel centre, ``floor((X + 0.5) * tw / rw)``; swizzle reads
    channel R from byte ``ridx`` of a texel (likewise G, B); output pixels are packed
    R, G, B FP16 rows top-down; DIV_255 is F16(v / 255), SUB is F16(v - param[ch]).
    """
    t = np.asarray(tex, np.uint8)
    if transpose:
        t = t.transpose(1, 0, 2)
    th, tw = t.shape[:2]
    ys = ((2 * np.arange(rect_h) + 1) * th) // (2 * rect_h)
    xs = ((2 * np.arange(rect_w) + 1) * tw) // (2 * rect_w)
    px = t[ys[:, None], xs[None, :]].astype(np.float64)
    rgb = px[:, :, list(swizzle)]
    out = rgb / 255.0 if cnv == "div255" else rgb - np.asarray(cnv_param, np.float64)
    return fp16(out)


# =========================================================================================
# Tolerances (§13)
# =========================================================================================


def conv_tolerance(t: np.ndarray, n: int) -> np.ndarray:
    """§12/§13 check_err for general data: 0.03 if |t| < 0.09 else 0.33|t|,
    scaled by 1.4*sqrt(n/1600) when n = P^2*C >= 1600."""
    t = np.abs(np.asarray(t, np.float64))
    d = np.where(t < 0.09, 0.03, 0.33 * t)
    if n >= 1600:
        d = d * 1.4 * np.sqrt(n / 1600.0)
    return d


def lrn_ok(y, t) -> np.ndarray:
    """§4.7: |y - t| < 0.001 if |t| < 0.1 else |y/t - 1| < 0.01."""
    y, t = np.asarray(y, np.float64), np.asarray(t, np.float64)
    small = np.abs(t) < 0.1
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(small, np.abs(y - t) < 1e-3, np.abs(y / np.where(small, 1, t) - 1) < 0.01)


def mismatch(name: str, y, t, tol) -> str | None:
    """None if ``|y - t| < tol`` everywhere (NaN fails), else a one-line report."""
    y, t = np.asarray(y, np.float64), np.asarray(t, np.float64)
    if y.shape != t.shape:
        return f"{name}: shape {y.shape} != reference {t.shape}"
    with np.errstate(invalid="ignore"):
        d = np.abs(y - t)
        bad = ~(d < tol)
    if not bad.any():
        return None
    i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(d, nan=np.inf), -1)), d.shape)
    return (f"{name}: {int(bad.sum())}/{bad.size} elements off, e.g. at {tuple(map(int, i))} "
            f"got {y[i]!r} want {t[i]!r}")


# =========================================================================================
# Device harness
# =========================================================================================

GUARD_1000 = np.array(1000.0, F16).tobytes()  # test_conv's output pre-fill
GUARD_NAN = b"\xff\xff"  # test_add_act_pool's pre-fill
GUARD_LRN = np.array(-65497.0, F16).tobytes()  # test_lrn's guard value


class Arena:
    """Regions laid out one after another in one DMA buffer, with random guard gaps."""

    def __init__(self, rng: np.random.Generator, align: int, max_gap: int) -> None:
        self.rng, self.align, self.max_gap = rng, align, max_gap
        self.size = 0
        self.items: list[tuple[int, bytes | int]] = []

    def _place(self, nbytes: int, align: int) -> int:
        align = max(align, self.align)
        gap = align * int(self.rng.integers(0, self.max_gap // align + 1))
        off = -(-(self.size + gap) // align) * align
        self.size = off + nbytes
        return off

    def put(self, data: bytes, align: int = 0) -> int:
        off = self._place(len(data), align)
        self.items.append((off, data))
        return off

    def reserve(self, nbytes: int, align: int = 0) -> int:
        off = self._place(nbytes, align)
        self.items.append((off, nbytes))
        return off

    def materialize(self, dev, name: str, fill: bytes = b"\0\0"):
        size = -(-(self.size + 64) // 64) * 64
        img = np.frombuffer(fill * (size // len(fill)), np.uint8).copy()
        for off, data in self.items:
            if isinstance(data, bytes):
                img[off:off + len(data)] = np.frombuffer(data, np.uint8)
        buf = dev.alloc(size, align=64, name=name)
        buf.write(0, img)  # one write: remote backends move it in large frames
        buf.sync_for_device()
        return buf


@dataclass
class Case:
    """One command: its blobs (name -> bytes; names starting with "w" are 16-byte aligned
    weight-like blobs, the others ``in_align``-aligned inputs), the output bytes it writes
    (``out_align``-aligned), how to build it from buffer refs ("out" is the output) and
    how to check its raw output.  ``check`` returns None or a failure message."""

    name: str
    blobs: dict[str, bytes]
    out_bytes: int
    build: Callable[[Callable[[str], BufferRef]], object]
    check: Callable[[np.ndarray], str | None]
    out_align: int = 2
    in_align: int = 2
    meta: dict = field(default_factory=dict)


@dataclass
class RunResult:
    failures: list[str]
    outputs: dict[str, np.ndarray]
    sha: str
    lists: int
    exec_us: float
    chunks: list[int] = field(default_factory=list)  # stream chunks per conv list


def run_cases(dev, cases: Sequence[Case], *, per_list: int | Sequence[int] = 50,
              seed: int = 0, guard: bytes = GUARD_1000, rerun: bool = True,
              timeout: float = 60.0, keep: bool = False) -> RunResult:
    """Run ``cases`` on ``dev``: arenas at random offsets, ``per_list`` commands per list
    (or a sequence of list lengths, cycled), guard-filled outputs.  Fails (assert) on any
    guard byte overwritten, and, with ``rerun``, if re-executing the committed lists over
    a different pre-fill changes the SHA-256 of the outputs.  Returns the per-case
    failure messages for the caller."""
    rng = np.random.default_rng(seed)
    order = list(cases)
    rng.shuffle(order)  # DMP shuffles its configurations
    ins = Arena(rng, 2, 96)
    wts = Arena(rng, 16, 64)
    outs = Arena(rng, 2, 128)
    where: dict[tuple[int, str], tuple[str, int]] = {}
    out_at: list[int] = []
    for k, case in enumerate(order):
        for name, data in case.blobs.items():
            if name.startswith("w"):
                where[k, name] = ("w", wts.put(data, 16))
            else:
                where[k, name] = ("i", ins.put(data, case.in_align))
        out_at.append(outs.reserve(case.out_bytes, case.out_align))
    ibuf = ins.materialize(dev, "ops-inputs") if ins.size else None
    wbuf = wts.materialize(dev, "ops-weights") if wts.size else None
    obuf = outs.materialize(dev, "ops-outputs", guard)
    bufs = {"i": ibuf, "w": wbuf}
    lists: list[CommandList] = []
    try:
        total_us = 0.0
        chunks: list[int] = []
        sizes = [per_list] if isinstance(per_list, int) else list(per_list)
        start = 0
        while start < len(order):
            stop = min(start + sizes[len(lists) % len(sizes)], len(order))
            cl = CommandList(dev)
            lists.append(cl)
            for k in range(start, stop):
                case = order[k]

                def ref(name: str, k=k) -> BufferRef:
                    if name == "out":
                        return BufferRef(obuf, out_at[k])
                    kind, off = where[k, name]
                    return BufferRef(bufs[kind], off)

                cl.add(case.build(ref))
            cl.commit()
            stream = cl.stream
            chunks.append(len(stream.chunks) if stream is not None else 0)
            total_us += cl.run(timeout=timeout)
            start = stop
        obuf.sync_for_cpu()
        raw = obuf.read()
        failures, outputs = [], {}
        covered = np.zeros(raw.size, bool)
        for k, case in enumerate(order):
            a, n = out_at[k], case.out_bytes
            covered[a:a + n] = True
            got = raw[a:a + n]
            if keep:
                outputs[case.name] = got.copy()
            msg = case.check(got)
            if msg:
                failures.append(msg)
        pat = np.frombuffer(guard * (raw.size // len(guard)), np.uint8)
        touched = np.flatnonzero((raw != pat) & ~covered)
        assert touched.size == 0, (
            f"{touched.size} guard bytes outside the outputs changed, first at {touched[0]}")
        def outputs_sha(buf: np.ndarray) -> str:
            h = hashlib.sha256()
            for a, c in zip(out_at, order, strict=True):
                h.update(buf[a:a + c.out_bytes].tobytes())
            return h.hexdigest()

        digest = outputs_sha(raw)
        if rerun:
            other = b"\x5a\xa5" if guard != b"\x5a\xa5" else b"\x00\x7c"
            obuf.write(0, np.frombuffer(other * (raw.size // 2), np.uint8))
            obuf.sync_for_device()
            for cl in lists:
                cl.run(timeout=timeout)
            obuf.sync_for_cpu()
            assert outputs_sha(obuf.read()) == digest, \
                "re-running the committed lists changed the output SHA-256"
        return RunResult(failures, outputs, digest, len(lists), total_us, chunks)
    finally:
        for cl in lists:
            cl.close()
        for b in (ibuf, wbuf, obuf):
            if b is not None:
                b.free()


def assert_no_failures(res: RunResult, total: int) -> None:
    assert not res.failures, (f"{len(res.failures)}/{total} cases failed:\n"
                              + "\n".join(res.failures[:15]))

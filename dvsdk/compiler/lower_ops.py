"""Lowering of the op families beyond conv: FC, pools, element-wise, views, concat.

A mixin of :class:`dvsdk.compiler.lower.Lowering`; every method returns True when
the op became hardware work (or a free view), and raises :class:`NoMapping`
with the reason when it stays on the CPU.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..cpu import ops as cpu_ops
from ..driver.commands import ConvRun
from ..hw import layout
from ..hw.weights import pack_conv_weights
from . import hwmap
from .batch import BATCH_REASON
from .hwmap import NoMapping, hwc
from .ir import Op
from .program import HwCmd

#: why a zero-copy channel view needs one sample: a part of N samples is N pieces one
#: whole-tensor stride apart, and a command reads or writes its N samples back to back (§4.10)
#: (the prefix marks a placement the batch made: :func:`.batch.batch_fallbacks`)
_ONE_SAMPLE = (BATCH_REASON + "zero-copy {} needs one sample ({} here): a channel slice of "
               "a batch is not back to back")


class OpLowerings:
    # -- FC ------------------------------------------------------------------------------
    def lower_gemm(self, op: Op) -> bool:
        """§6.4 / dmp-convertor §2.6: an FC is a 1x1 conv on a 1x1xN input.  A flattened
        conv output is read in place: the weight columns follow its chunked layout (§1)."""
        a, bname = op.inputs[0], op.input(1)
        wt = self.g.const(bname)
        if wt is None or op.attrs.get("transA", 0) or not op.attrs.get("transB", 0):
            raise NoMapping("Gemm is not in canonical A·Bᵀ form with constant B")
        wt = np.asarray(wt, np.float32)
        n_out, k = wt.shape
        if op.input(2) and self.g.const(op.input(2)) is None:
            raise NoMapping("Gemm bias C is not constant")
        cvec = self.g.const(op.input(2))
        if cvec is not None and cvec.size not in (1, n_out):
            # a 2-D C with one row per batch item: only a per-column bias is a run's bias
            raise NoMapping(f"Gemm bias C {tuple(cvec.shape)} is not a per-column vector")
        b = np.zeros(n_out, np.float32) if cvec is None else np.broadcast_to(
            np.asarray(cvec, np.float32).reshape(-1), (n_out,)).copy()
        src, cols = a, None
        if hwc(self.shape(a)) is None:
            raise NoMapping("Gemm input is not a matrix of rows (one a sample)")
        p = self.prod.get(a)
        if p is not None and p.type in ("Flatten", "Reshape") and hwc(self.shape(p.inputs[0])):
            h, w, c = self.dev_shape(p.inputs[0])
            if h * w * c == k and (h, w) != (1, 1) and len(self.shape(p.inputs[0])) == 4:
                src = p.inputs[0]
                # NCHW flatten index j = (ch, y, x) -> element offset in the chunked layout
                offs = layout.offsets((h, w, c))            # (h, w, c) -> element offset
                cols = offs.transpose(2, 0, 1).reshape(-1)  # in NCHW order
        if cols is not None:
            wk = np.zeros_like(wt)
            wk[:, cols] = wt
        else:
            wk = wt
        run = ConvRun(pool_stride=0x0101)
        run, out, fused, _, act = self.fuse_tail(run, op.outputs[0], n_out, False, False,
                                                 self.order[op.name])
        prelu = act.prelu if act is not None and act.code == 4 else None
        blob, fmt = self._pack(wk.reshape(n_out, k, 1, 1), b, prelu,
                               quantizable=self.quantizes(op))
        run = replace(run, m=n_out, conv_enable=1, p=0x0101, pz=1, conv_stride=0x0101,
                      weight_fmt=fmt)
        kind = f"fc {k}->{n_out}" + (" (reads flattened conv output in place)" if cols
                                     is not None else "")
        if run.actfunc:
            kind += " +" + hwmap.act_words(run.actfunc, run.actfunc_param)
        cmd = HwCmd(src, out, 1, 1, k, [run], [blob], None, 1, [op.name, *fused], kind)
        if src == a and a in self.deferred:
            raise NoMapping("the flattened input cannot be read in place")
        return self._finish(cmd, act)

    # -- pools ---------------------------------------------------------------------------
    def lower_maxpool(self, op: Op) -> bool:
        x = op.inputs[0]
        h, w, c = self.dev_shape(x)
        try:
            run = self.maxpool_fields(ConvRun(m=c, pool_stride=0x0101), op, self.shape(x))
        except NoMapping as single:
            try:
                return self._staged_maxpool(op, (h, w, c))
            except NoMapping:
                pass
            try:
                return self._cascade_maxpool(op, (h, w, c))
            except NoMapping as e:
                raise NoMapping(f"{single}; as a cascade: {e}") from None
        run, out, fused, _, act = self.fuse_tail(run, op.outputs[0], c, False, False,
                                                 self.order[op.name])
        kx, ky = run.pool_kernel
        cmd = HwCmd(x, out, w, h, c, [run], [None], None, 1, [op.name, *fused],
                    f"max-pool {kx}x{ky}" + (" +" + hwmap.act_words(run.actfunc,
                                                                    run.actfunc_param)
                                               if run.actfunc else ""))
        return self._finish(cmd, act)

    def _staged_maxpool(self, op: Op, shape: tuple[int, int, int]) -> bool:
        """A k x k / k max-pool with k > 3 as stages of 2 and 3 (max of block maxima is
        the block max): k must factor into 2s and 3s, no padding, no dilation."""
        (kx, ky), (sx, sy), (dx, dy) = hwmap.window(op)
        pads = hwmap.pads_lrtb(op)
        if (kx, ky) != (sx, sy) or (dx, dy) != (1, 1) or any(pads) \
                or op.attrs.get("ceil_mode", 0) or op.attrs.get("storage_order", 0):
            raise NoMapping(f"max-pool window {kx}x{ky} outside 2..3 x 1..3 and not a "
                            "non-overlapping window that splits into 2x2/3x3 stages")

        def factors(k: int) -> list[int]:
            out = []
            for f in (3, 2):
                while k % f == 0 and k > 1:
                    out.append(f)
                    k //= f
            if k != 1:
                raise NoMapping(f"max-pool window {kx}x{ky} does not factor into 2s and 3s")
            return out

        fx, fy = factors(kx), factors(ky)
        n = max(len(fx), len(fy))
        fx, fy = fx + [1] * (n - len(fx)), fy + [1] * (n - len(fy))
        h, w, c = shape
        src, final = op.inputs[0], op.outputs[0]
        cmds = []
        for i, (a, b) in enumerate(zip(fx, fy)):
            if a == 1:  # the hardware's max-pool width is 2..3; pair a 1 with a 2 or 3 column
                raise NoMapping("max-pool stage with a 1-wide window")
            last = i == n - 1
            oh, ow = h // b, w // a
            dst = final if last else self.g.add_tensor(f"{final}_stage{i}",
                                                       (self.samples(src), c, oh, ow),
                                                       np.float32)
            run = ConvRun.make(c, pool="max", pool_size=(a, b), pool_stride=(a, b))
            cmd = HwCmd(src, dst, w, h, c, [run], [None], None, 1,
                             [op.name] if last else [], f"max-pool stage {a}x{b} of {kx}x{ky}")
            self.check(cmd)
            cmds.append(cmd)
            src, h, w = dst, oh, ow
        for cmd in cmds[:-1]:
            self.emit(cmd)
        return self._finish(cmds[-1], None)

    def _cascade_maxpool(self, op: Op, shape: tuple[int, int, int]) -> bool:
        """A max-pool window beyond the hardware's 3x3 (YOLO's SPPF 5x5, SPP 9x9 and 13x13)
        as a cascade of hardware max-pools.

        Max is idempotent, so a k2 window over k1-window maxima (stride 1) is one
        (k1 + k2 - 1) window.  The stages grow the window by 1 or 2 per axis each (widths
        2..3, heights 1..3, §6 f); all but the last have stride 1 and the last takes the
        op's stride.  Padding is -inf on the hardware (§4.3) as in ONNX, and a stage's
        padded border only ever adds -inf (or maxima of real elements inside the op's
        window) to a later window, so the op's pads (ceil_mode's extra right/bottom ones
        included) can be spread over the stages: each takes up to k_i - 1 per side, the
        last the rest.  The one thing a cascade cannot reproduce is an output window with
        no real element in it; the op stays on the CPU if it has one."""
        (kx, ky), (sx, sy), (dx, dy) = hwmap.window(op)
        if (dx, dy) != (1, 1) or op.attrs.get("storage_order", 0):
            raise NoMapping("dilated max-pool")
        h, w, c = shape
        oh, ow = self.shape(op.outputs[0])[2:]
        l, r, t, b = hwmap.pads_lrtb(op)
        r += hwmap.extra_pad(w, kx, l, r, sx, ow)
        b += hwmap.extra_pad(h, ky, t, b, sy, oh)
        if l >= kx or t >= ky or (ow - 1) * sx - l >= w or (oh - 1) * sy - t >= h:
            raise NoMapping("an output window lies entirely in the padding")
        n = max(-(-(kx - 1) // 2), -(-(ky - 1) // 2))
        if n < 2 or n > kx - 1:
            raise NoMapping(f"window {kx}x{ky} does not split into 2..3 x 1..3 stages")

        def kernels(k: int) -> list[int]:  # n stage windows growing the window to k
            base, extra = divmod(k - 1, n)
            return [1 + base + (i < extra) for i in range(n)]

        def spread(pad: int, ks: list[int]) -> list[int]:
            out = []
            for k in ks:
                out.append(min(pad, k - 1))
                pad -= out[-1]
            out[-1] += pad
            return out

        kxs, kys = kernels(kx), kernels(ky)
        pl, pr, pt, pb = spread(l, kxs), spread(r, kxs), spread(t, kys), spread(b, kys)
        src, final = op.inputs[0], op.outputs[0]
        cmds = []
        for i in range(n):
            last = i == n - 1
            a, bb = kxs[i], kys[i]
            st = (sx, sy) if last else (1, 1)
            pads = (pl[i], pr[i], pt[i], pb[i])
            hwmap.check_pads(pads, "max-pool", seven_bit=False)
            oh_i = (pads[2] + h + pads[3] - bb) // st[1] + 1
            ow_i = (pads[0] + w + pads[1] - a) // st[0] + 1
            dst = final if last else self.g.add_tensor(f"{final}_cascade{i}",
                                                       (self.samples(src), c, oh_i, ow_i),
                                                       np.float32)
            run = ConvRun.make(c, pool="max", pool_size=(a, bb), pool_stride=st,
                               pool_pads=pads)
            cmd = HwCmd(src, dst, w, h, c, [run], [None], None, 1, [op.name] if last else [],
                        f"max-pool {kx}x{ky} cascade stage {i + 1}/{n}: {a}x{bb}")
            self.check(cmd)
            cmds.append(cmd)
            src, h, w = dst, oh_i, ow_i
        if (h, w) != (oh, ow):
            raise NoMapping(f"cascade gives {h}x{w}, the model {oh}x{ow}")
        for cmd in cmds[:-1]:
            self.emit(cmd)
        return self._finish_with_act(cmds[-1])

    def _avg_stage(self, x: str, out: str, hwc_in: tuple[int, int, int], k: tuple[int, int],
                   s: tuple[int, int], pads: tuple[int, int, int, int], scale: float,
                   sources: list[str], kind: str) -> HwCmd:
        h, w, c = hwc_in
        run = ConvRun.make(c, pool="avg", pool_size=k, pool_stride=s, pool_pads=pads,
                           pool_scale=scale)
        return HwCmd(x, out, w, h, c, [run], [None], None, 1, sources, kind)

    def lower_avgpool(self, op: Op) -> bool:
        x = op.inputs[0]
        h, w, c = self.dev_shape(x)
        kmax = min(self.info.max_kernel_size, 7)
        if op.type == "GlobalAveragePool":
            return self._global_pool(op, (h, w, c), "avg", kmax)
        (kx, ky), (sx, sy), (dx, dy) = hwmap.window(op)
        if (dx, dy) != (1, 1):
            raise NoMapping("dilated average pool")
        if max(kx, ky) > kmax:
            raise NoMapping(f"average-pool window {kx}x{ky} larger than {kmax}")
        l, r, t, b = hwmap.pads_lrtb(op)
        oh, ow = self.shape(op.outputs[0])[2:]
        if hwmap.extra_pad(w, kx, l, r, sx, ow) or hwmap.extra_pad(h, ky, t, b, sy, oh):
            raise NoMapping("ceil_mode average pool: the extra cells are not in the divisor")
        if any((l, r, t, b)) and not op.attrs.get("count_include_pad", 0):
            raise NoMapping("average pool with padding and count_include_pad=0")
        hwmap.check_pads((l, r, t, b), "average-pool", seven_bit=False)
        cmd = self._avg_stage(x, op.outputs[0], (h, w, c), (kx, ky), (sx, sy), (l, r, t, b),
                              1.0 / (kx * ky), [op.name], f"avg-pool {kx}x{ky}")
        return self._finish_with_act(cmd)

    def _finish_with_act(self, cmd: HwCmd) -> bool:
        run, out, fused, _, act = self.fuse_tail(cmd.runs[0], cmd.output, cmd.runs[0].m or
                                                 cmd.c, False, False, 1 << 30)
        if fused and (act is None or act.prelu is None):
            cmd = replace(cmd, runs=[run], output=out, sources=cmd.sources + fused,
                          kind=f"{cmd.kind} +{hwmap.act_words(run.actfunc, run.actfunc_param)}")
        return self._finish(cmd, None)

    def _global_pool(self, op: Op, shape: tuple[int, int, int], kind: str, kmax: int) -> bool:
        """Global pooling as stages of windows no larger than the hardware allows.

        Max: 3x3/3 stages with -inf padding.  Average: stages of at most kmax x kmax with
        zero padding, the scales multiplying to 1/(H*W), so sums of padded zeros cancel."""
        h, w, c = shape
        x, final = op.inputs[0], op.outputs[0]
        cap = 3 if kind == "max" else kmax
        stages = []
        while (h, w) != (1, 1):
            kx, ky = min(w, cap), min(h, cap)
            if kind == "max" and kx == 1:
                kx = 2 if w > 1 else 1
            ow, oh = -(-w // kx), -(-h // ky)
            stages.append(((kx, ky), (ow * kx - w, oh * ky - h), (h, w)))
            h, w = oh, ow
        if kind == "max" and any(k[0] < 2 for k, _, _ in stages):
            raise NoMapping("global max-pool over a single column")
        total = shape[0] * shape[1]
        src = x
        cmds = []
        for i, ((kx, ky), (er, eb), (hh, ww)) in enumerate(stages):
            last = i == len(stages) - 1
            dst = final if last else self.g.add_tensor(
                f"{final}_stage{i}", (self.samples(src), c, -(-hh // ky), -(-ww // kx)),
                np.float32)
            if kind == "max":
                run = ConvRun.make(c, pool="max", pool_size=(kx, ky), pool_stride=(kx, ky),
                                   pool_pads=(0, er, 0, eb))
                cmd = HwCmd(src, dst, ww, hh, c, [run], [None], None, 1,
                            [op.name] if last else [], f"global max-pool stage {kx}x{ky}")
            else:
                scale = 1.0 / (kx * ky) if not last else (
                    float(np.prod([k[0] * k[1] for k, _, _ in stages[:-1]])) / total)
                cmd = self._avg_stage(src, dst, (hh, ww, c), (kx, ky), (kx, ky),
                                      (0, er, 0, eb), scale, [op.name] if last else [],
                                      f"global avg-pool stage {kx}x{ky}")
            self.check(cmd)
            cmds.append(cmd)
            src = dst
        if not cmds:
            raise NoMapping("global pool over 1x1 is an identity")
        for cmd in cmds[:-1]:
            self.emit(cmd)
        if kind == "max":
            return self._finish(cmds[-1], None)
        return self._finish_with_act(cmds[-1])

    def lower_global_max(self, op: Op) -> bool:
        return self._global_pool(op, self.dev_shape(op.inputs[0]), "max", 3)

    # -- element-wise ----------------------------------------------------------------------
    def lower_elementwise(self, op: Op) -> bool:
        consts = [self.g.is_const(i) for i in op.inputs[:2]]
        if op.type == "Add" and not any(consts):
            a, b = op.inputs[0], op.inputs[1]
            if self.shape(a) != self.shape(b) or a == b:
                raise NoMapping("element-wise add of differently shaped tensors")
            h, w, c = self.dev_shape(a)
            self.dev_shape(b)
            run = ConvRun.make(c, pool="avg", pool_size=1, pool_stride=1, pool_scale=1.0)
            cmd = HwCmd(a, op.outputs[0], w, h, c, [run], [None], b, 1, [op.name],
                        "element-wise add")
            return self._finish_with_act(cmd)
        # per-channel affine -> depthwise 1x1 conv
        x = op.inputs[0]
        h, w, c = self.dev_shape(x)
        scale, shift = np.ones(c, np.float32), np.zeros(c, np.float32)
        if op.type == "BatchNormalization":
            g, bb, mean, var = (self.g.const(i) for i in op.inputs[1:5])
            if any(v is None for v in (g, bb, mean, var)):
                raise NoMapping("BatchNormalization parameters are not constant")
            eps = float(op.attrs.get("epsilon", 1e-5))
            scale = (np.asarray(g, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps))
            shift = (np.asarray(bb, np.float64) - np.asarray(mean, np.float64) * scale)
        else:
            if consts[0] or not consts[1]:
                raise NoMapping(f"{op.type} of two tensors")
            k = np.asarray(self.g.const(op.inputs[1]), np.float32)
            if k.size == 1:
                k = np.full(c, float(k.reshape(-1)[0]), np.float32)
            elif k.size == c and k.shape[-2:] in ((1, 1),) and len(self.shape(x)) == 4:
                k = k.reshape(-1)
            elif k.size == c and len(self.shape(x)) == 2:
                k = k.reshape(-1)
            else:
                raise NoMapping(f"{op.type} constant is not per-channel")
            if op.type == "Add":
                shift = k
            elif op.type == "Sub":
                shift = -k
            elif op.type == "Mul":
                scale = k
            else:
                if np.any(k == 0):
                    raise NoMapping("division by zero")
                scale = 1.0 / k
        blob, fmt = self._pack(np.asarray(scale, np.float32).reshape(c, 1, 1, 1),
                               np.asarray(shift, np.float32), quantizable=False)
        run = ConvRun.make(c, conv="depthwise", kernel=1)
        run = replace(run, weight_fmt=fmt)
        cmd = HwCmd(x, op.outputs[0], w, h, c, [run], [blob], None, 1, [op.name],
                    f"{op.type} as depthwise 1x1")
        return self._finish_with_act(cmd)

    def lower_activation(self, op: Op) -> bool:
        x = op.inputs[0]
        h, w, c = self.dev_shape(x)
        act = hwmap.activation(op, self.g, c)
        if act.prelu is not None:
            blob, fmt = self._pack(np.ones((c, 1, 1, 1), np.float32), np.zeros(c, np.float32),
                                   act.prelu)
            if fmt != 1:
                blob, fmt = pack_conv_weights(np.ones((c, 1, 1, 1), np.float32),
                                              np.zeros(c, np.float32), prelu=act.prelu), 1
            run = replace(ConvRun.make(c, conv="depthwise", kernel=1), weight_fmt=fmt,
                          actfunc=4)
            cmd = HwCmd(x, op.outputs[0], w, h, c, [run], [blob], None, 1, [op.name],
                        "PReLU on a depthwise 1x1")
            return self._finish(cmd, None)
        run = ConvRun(m=c, actfunc=act.code, actfunc_param=hwmap.fp16_param(act.param),
                      pool_stride=0x0101)
        cmd = HwCmd(x, op.outputs[0], w, h, c, [run], [None], None, 1, [op.name],
                    f"activation {op.type}")
        return self._finish(cmd, None)

    def lower_upsample(self, op: Op) -> bool:
        x = op.inputs[0]
        h, w, c = self.dev_shape(x)
        out = self.shape(op.outputs[0])
        f = out[2] // h if len(out) == 4 else 0
        if len(out) != 4 or out[2:] != (f * h, f * w) or out[:2] != (self.samples(x), c) \
                or f < 2 or f & (f - 1):
            raise NoMapping("only 2x, 4x, 8x ... spatial upsampling (2x stages) maps to the "
                            "hardware")
        mode = op.attrs.get("mode", "nearest")
        ctm = op.attrs.get("coordinate_transformation_mode", "half_pixel")
        near = op.attrs.get("nearest_mode", "round_prefer_floor")
        if mode != "nearest":
            raise NoMapping(f"{mode} resize")
        # The hardware replicates, y[i, j] = x[i // 2, j // 2].  Whether the op does depends
        # on the coordinate mode, the rounding and the exact scale (half_pixel + floor/ceil,
        # tf_half_pixel_for_nn + round/ceil, or scale 2.1 with a 2x output size are not), so
        # run the op's own index map (the CPU kernel's ONNX semantics) on a probe of indices.
        # (one sample, one channel: N and C are unchanged, checked above)
        probe = np.arange(h * w, dtype=np.float32).reshape(1, 1, h, w)
        args = [probe] + [self.g.const(n) if n else None for n in op.inputs[1:]]
        if any(a is None for a, n in zip(args[1:], op.inputs[1:]) if n):
            raise NoMapping("Resize scales/sizes are not constant")
        if len(args) > 3 and args[3] is not None and np.size(args[3]) == 4:
            args[3] = np.asarray(args[3]).copy()
            args[3][:2] = 1                    # sizes (N, C, H, W) for the 1x1-channel probe
        try:
            got = cpu_ops.run_op("Resize", args, op.attrs)[0]
        except Exception as e:  # noqa: BLE001 - the CPU step reports it properly
            raise NoMapping(f"Resize index map: {e}") from None
        if not np.array_equal(got, probe.repeat(f, axis=2).repeat(f, axis=3)):
            raise NoMapping(f"nearest resize with {ctm}/{near} is not a {f}x replicate")
        # a 2^k x replicate is k 2x replicates (PaddleOCR's DBNet upsamples by 4 and 8)
        src, cmds = x, []
        while w < out[3]:
            last = 2 * w == out[3]
            dst = op.outputs[0] if last else self.g.add_tensor(
                f"{op.outputs[0]}_x{2 * w // self.shape(x)[3]}",
                (self.samples(x), c, 2 * h, 2 * w), np.float32)
            run = ConvRun.make(c, pool="upsample", pool_size=2, pool_stride=1)
            cmds.append(HwCmd(src, dst, w, h, c, [run], [None], None, 1,
                              [op.name] if last else [],
                              "2x nearest upsample" + (f" (stage of {f}x)" if f > 2 else "")))
            self.check(cmds[-1])
            src, h, w = dst, 2 * h, 2 * w
        for cmd in cmds[:-1]:
            self.emit(cmd)
        return self._finish_with_act(cmds[-1])

    # -- views and concat ------------------------------------------------------------------
    def lower_view(self, op: Op) -> bool:
        x, y = op.inputs[0], op.outputs[0]
        hx, hy = hwc(self.shape(x)), hwc(self.shape(y))
        if hx and hy and hx[:2] == (1, 1) and hy == hx and x not in self.aliases \
                and not self.g.is_const(x):
            self.aliases[y] = (x, 0)
            self.note(op, "hw", "free view (same bytes)")
            self.placements.append((op, [x], [y, x], self.position()))
            return True
        users = self.cons.get(y, [])
        if hx and users and y not in self.g.outputs and all(
                u.type == "Gemm" and u.inputs[0] == y for u in users):
            self.deferred[y] = op  # the Gemm reads x in place; CPU only if it cannot
            self.note(op, "hw", "absorbed: the following FC reads the chunked layout in place")
            return True
        return False

    def lower_split(self, op: Op) -> bool:
        """A channel Split of a device tensor as zero-copy views: each part is the byte
        range of its channels in the chunked layout (§1), whole 8-channel chunks for every
        part but the last, so the parts need no copy and no CPU step."""
        x = op.inputs[0]
        rank = len(self.shape(x))
        if rank not in (2, 4) or int(op.attrs.get("axis", 0)) % rank != 1:
            raise NoMapping("split on an axis other than channels")
        h, w, _ = self.dev_shape(x)
        if self.g.is_const(x):
            raise NoMapping("split of a constant")
        if self.samples(x) != 1:
            raise NoMapping(_ONE_SAMPLE.format("split", self.samples(x)))
        offset, parts = 0, []
        for i, name in enumerate(op.outputs):
            if not name:
                raise NoMapping("a split output is unused")
            ph, pw, c = self.dev_shape(name)
            if (ph, pw) != (h, w):
                raise NoMapping("split parts differ in size")
            if i < len(op.outputs) - 1 and c % 8:
                raise NoMapping(f"split part {name} has C={c}, not a multiple of 8")
            parts.append((name, offset))
            offset += h * w * c * 2
        for name, off in parts:
            self.aliases[name] = (x, off)
            self.split_parts[name] = op
        self.note(op, "hw", f"zero-copy: {len(parts)} views of the input's channel chunks")
        return True

    def _concat_members(self, op: Op) -> list[str]:
        """The concat's inputs, a complete in-order run of a Split's parts (views) replaced
        by the split's input: YOLO's C2f concatenates both halves of a split first, so the
        split tensor itself is placed in the concat and its halves stay views of it."""
        members, i = [], 0
        while i < len(op.inputs):
            split = self.split_parts.get(op.inputs[i])
            if split is None:
                members.append(op.inputs[i])
                i += 1
                continue
            n = len(split.outputs)
            if op.inputs[i:i + n] != split.outputs:
                raise NoMapping(f"concat input {op.inputs[i]} is one part of a split, not "
                                "all of them in order")
            members.append(split.inputs[0])
            i += n
        return members

    def lower_concat(self, op: Op) -> bool:
        axis = int(op.attrs.get("axis", 1))
        shapes = [self.shape(i) for i in op.inputs]
        if axis != 1 or any(len(s) != 4 for s in shapes):
            raise NoMapping("concat on an axis other than channels")
        if self.samples(op.outputs[0]) != 1:
            raise NoMapping(_ONE_SAMPLE.format("concat", self.samples(op.outputs[0])))
        offset = 0
        members = []
        names = self._concat_members(op)
        for i, name in enumerate(names):
            h, w, c = self.dev_shape(name)
            p = self.prod.get(name)
            if p is None or name in self.aliases or name in self.g.outputs \
                    or names.count(name) > 1:
                raise NoMapping(f"concat input {name} cannot be placed in the output")
            if any(u.type == "Concat" and u is not op for u in self.cons.get(name, [])):
                raise NoMapping(f"{name} feeds two concats")
            if i < len(names) - 1 and c % 8:
                raise NoMapping(f"concat input {name} has C={c}, not a multiple of 8")
            members.append((name, offset))
            offset += h * w * c * 2
        for name, off in members:
            self.aliases[name] = (op.outputs[0], off)
        self.written.add(op.outputs[0])
        names = [name for name, _ in members]
        self.placements.append((op, names, names + [op.outputs[0]], self.position()))
        self.note(op, "hw", f"zero-copy: {len(members)} producers write into place")
        return True

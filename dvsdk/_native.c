/*
 * dvsdk._native: optional compiled loops for the simulator's and the layout's hottest
 * data paths.
 *
 * Each has a numpy implementation that is the reference (dvsdk/hw/fp16.py, dvsdk/hw/
 * layout.py, dvsdk/sim/ops.py); these give the same bits (NaN payloads aside where said:
 * which of two NaN operands survives may differ), one pass over memory instead of
 * numpy's several.  The package works without this module (it is an optional extension:
 * a machine without a C compiler gets the numpy paths).
 *
 * Exactness: built with -ffp-contract=off, so a*b+c is a float32 multiply rounded, then
 * an add rounded, as numpy computes it (no fused multiply-add), in the same order.
 *
 * This file: FP16 rounding, the conv engine's epilogue (bias, addend, activation,
 * rounding: finish, epilogue) and the depthwise convolution; _native_f16.c: binary16
 * conversions and the chunked layout (pack, unpack); _native_conv.c: im2col, average
 * pooling, the tails of sigmoid and ELU; _native_ew.c: the runtime's element-wise CPU
 * steps from binary16 to binary16 (numpy's NaN payloads kept: the first NaN operand).
 */
#include "_native.h"

PyDoc_STRVAR(round_f16_doc,
"round_f16(src, dst)\n\nRound float32 ``src`` to the nearest binary16 values into float32 "
"``dst`` (same size, a different buffer).");

HOT static void round_all(const u32a *s, u32a *d, Py_ssize_t n)
{
    round_block(s, d, n);  /* (in a clone: the baseline build of the loop is SSE2) */
}

static PyObject *round_f16(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *src_obj, *dst_obj;
    Py_buffer src, dst;
    if (!PyArg_ParseTuple(args, "OO", &src_obj, &dst_obj))
        return NULL;
    if (get_f32(src_obj, &src, 0, "src") < 0)
        return NULL;
    if (get_f32(dst_obj, &dst, 1, "dst") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (src.len != dst.len || src.buf == dst.buf) {
        PyErr_SetString(PyExc_ValueError, "src and dst must be distinct, of one size");
    } else {
        Py_BEGIN_ALLOW_THREADS
        round_all((const u32a *)src.buf, (u32a *)dst.buf, src.len / 4);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}


HOT static void finish_all(float *v, Py_ssize_t n, int act, float slope)
{
    epilogue_run(v, n, NULL, NULL, act, slope, NULL);
}

PyDoc_STRVAR(finish_doc,
"finish(y, act, slope)\n\nIn place on float32 ``y``: the activation ``act`` (0 none, 2 "
"leaky ReLU with ``slope``, 6 ReLU6) as numpy computes it, then rounding to binary16 "
"values; one pass over memory (blocks that stay in cache).");

static PyObject *finish(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj;
    int act;
    float slope;
    Py_buffer y;
    if (!PyArg_ParseTuple(args, "Oif", &obj, &act, &slope))
        return NULL;
    if (act != 0 && act != 2 && act != 6) {
        PyErr_Format(PyExc_ValueError, "finish: activation %d is not compiled", act);
        return NULL;
    }
    if (get_f32(obj, &y, 1, "y") < 0)
        return NULL;
    {
        float *v = (float *)y.buf;
        Py_ssize_t n = y.len / 4;
        Py_BEGIN_ALLOW_THREADS
        finish_all(v, n, act, slope);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&y);
    Py_RETURN_NONE;
}

/* The epilogue of a conv stage on ``rows`` rows of ``m`` channels, in place:
 * v = y + bias[ch]; v = v + addend (if any); then, if ``act`` >= 0, the activation and
 * the rounding to binary16 values -- each step one float32 operation, in numpy's order
 * (ops._add_per_channel, the element-wise add, ops.activation, fp16). */
HOT static void epilogue_all(float *restrict y, Py_ssize_t rows, Py_ssize_t m,
                             const float *restrict bias, const float *restrict addend,
                             int act, float slope, const float *restrict prelu)
{
    if (m <= FINISH_BLOCK / 2) {
        /* few channels: several rows per run, the per-channel vectors tiled to the run
         * (a run of one short row cost more in loop overhead than in work) */
        float bt[FINISH_BLOCK], pt[FINISH_BLOCK];
        Py_ssize_t per = FINISH_BLOCK / m < rows ? FINISH_BLOCK / m : rows;
        for (Py_ssize_t r = 0; r < per; r++) {  /* (only as many rows as there are) */
            if (bias)
                memcpy(bt + r * m, bias, (size_t)m * 4);
            if (prelu)
                memcpy(pt + r * m, prelu, (size_t)m * 4);
        }
        for (Py_ssize_t r = 0; r < rows; r += per)
            epilogue_run(y + r * m, (rows - r < per ? rows - r : per) * m, bias ? bt : NULL,
                         addend ? addend + r * m : NULL, act, slope, prelu ? pt : NULL);
        return;
    }
    for (Py_ssize_t r = 0; r < rows; r++)
        epilogue_run(y + r * m, m, bias, addend ? addend + r * m : NULL, act, slope, prelu);
}

/* an optional float32 vector argument (None allowed) of exactly n elements */
int opt_vec(PyObject *obj, Py_buffer *b, Py_ssize_t n, const char *name, int *got)
{
    *got = 0;
    if (obj == Py_None)
        return 0;
    if (get_f32(obj, b, 0, name) < 0)
        return -1;
    *got = 1;
    if (b->len / 4 != n) {
        PyErr_Format(PyExc_ValueError, "%s must have %zd elements", name, n);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(epilogue_doc,
"epilogue(y, bias, addend, act, slope, prelu, parts=1)\n\n"
"In place on float32 ``y`` (rows, M): ``y + bias`` (``bias`` (M,) or None), then "
"``+ addend`` (``y``'s shape, or None); then, for ``act`` >= 0, the activation (0 none, "
"2 leaky ReLU with ``slope``, 4 PReLU with per-channel ``prelu`` (M,), 6 ReLU6) and "
"rounding to binary16 values.  Each a float32 operation in numpy's order; one pass over "
"memory; ``parts`` 2: the rows in two parts, the second on the worker thread.");

typedef struct {
    float *y;
    Py_ssize_t m;
    const float *bias, *addend, *prelu;
    int act;
    float slope;
} EpiPart;

static void epilogue_part(void *ctx, Py_ssize_t lo, Py_ssize_t hi, int who)
{
    (void)who;
    const EpiPart *e = ctx;
    epilogue_all(e->y + lo * e->m, hi - lo, e->m, e->bias,
                 e->addend ? e->addend + lo * e->m : NULL, e->act, e->slope, e->prelu);
}

static PyObject *epilogue(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *yo, *bo, *ao, *po;
    int act, gb = 0, ga = 0, gp = 0, parts = 1;
    float slope;
    Py_buffer y, b, a, p;
    if (!PyArg_ParseTuple(args, "OOOifO|i", &yo, &bo, &ao, &act, &slope, &po, &parts))
        return NULL;
    if (act >= 0 && !act_compiled(act)) {
        PyErr_Format(PyExc_ValueError, "epilogue: activation %d is not compiled", act);
        return NULL;
    }
    if (get_f32(yo, &y, 1, "y") < 0)
        return NULL;
    if (y.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "epilogue: y must be 2-D (rows, channels)");
        goto done;
    }
    Py_ssize_t rows = y.shape[0], m = y.shape[1];
    if (m == 0 || rows == 0)  /* nothing to do (and no division by zero channels) */
        goto done;
    if (opt_vec(bo, &b, m, "bias", &gb) < 0 || opt_vec(ao, &a, rows * m, "addend", &ga) < 0
        || opt_vec(po, &p, m, "prelu", &gp) < 0)
        goto done;
    if (act == 4 && !gp) {
        PyErr_SetString(PyExc_ValueError, "epilogue: PReLU needs slopes");
        goto done;
    }
    if (ga && bufs_overlap(&a, &y)) {
        PyErr_SetString(PyExc_ValueError, "epilogue: addend must not overlap y");
        goto done;
    }
    {
        EpiPart part = {(float *)y.buf, m, gb ? (const float *)b.buf : NULL,
                        ga ? (const float *)a.buf : NULL, gp ? (const float *)p.buf : NULL, act,
                        slope};
        Py_BEGIN_ALLOW_THREADS
        team_run(epilogue_part, &part, rows, parts);
        Py_END_ALLOW_THREADS
    }
done:
    if (gp) PyBuffer_Release(&p);
    if (ga) PyBuffer_Release(&a);
    if (gb) PyBuffer_Release(&b);
    PyBuffer_Release(&y);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* Depthwise correlation: acc = 0 + tap0*w0 + tap1*w1 + ... (row-major taps, each product
 * rounded before its add; a padded position reads zeros, so 0*w is added as
 * ops._depthwise does), + bias, then the optional epilogue (activation, rounding).
 * Up to eight output pixels of one row are computed together (as many as are left), 16
 * channels at a time (then 8, then one by one), so that many independent sums are in
 * flight and each weight load serves that many products; their epilogue then runs over
 * the pixels at once (adjacent in ``out``). */
#if defined(__GNUC__)
typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
#define DW_VECTOR 1
#define LOADV(T, p) __extension__({ T v_; memcpy(&v_, (p), sizeof v_); v_; })
#else
#define DW_VECTOR 0
#endif
#define DW_PX 8

typedef struct {
    const float *x, *wt, *bias, *zeros, *prelu;
    Py_ssize_t h, w, c, ky, kx, ow;
    int sx, sy, dx, dy, pl, pt, act;
    float slope;
} DwArgs;

/* np output pixels (1 <= np <= DW_PX) whose taps are src[p * ntaps + t] */
/* tap t of pixel p: inside the input, at a fixed step from the first pixel's taps (no
 * table of pointers to load); at a border, from the table */
#define DW_TAP(p, t) (inside ? base0 + (p) * pstep + toff[t] : src[(p) * ntaps + (t)])

static inline __attribute__((always_inline)) void dw_pixels(
    const DwArgs *a, const float **src, const float *base0, Py_ssize_t pstep,
    const Py_ssize_t *toff, float **outs, const int np, const int inside, Py_ssize_t ch)
{
    Py_ssize_t ntaps = a->ky * a->kx, c = a->c;
    float tmp[DW_PX][16];
#if DW_VECTOR
    for (; ch + 16 <= c; ch += 16) {
        v16f acc[DW_PX];
        for (int p = 0; p < np; p++)
            acc[p] = (v16f){0};
        for (Py_ssize_t t = 0; t < ntaps; t++) {
            v16f wk = LOADV(v16f, a->wt + t * c + ch);
            for (int p = 0; p < np; p++)
                acc[p] = acc[p] + LOADV(v16f, DW_TAP(p, t) + ch) * wk;
        }
        v16f b = LOADV(v16f, a->bias + ch);
        for (int p = 0; p < np; p++) {
            acc[p] = acc[p] + b;
            memcpy(outs[p] + ch, &acc[p], sizeof acc[p]);
        }
    }
    for (; ch + 8 <= c; ch += 8) {
        v8f acc[DW_PX];
        for (int p = 0; p < np; p++)
            acc[p] = (v8f){0};
        for (Py_ssize_t t = 0; t < ntaps; t++) {
            v8f wk = LOADV(v8f, a->wt + t * c + ch);
            for (int p = 0; p < np; p++)
                acc[p] = acc[p] + LOADV(v8f, DW_TAP(p, t) + ch) * wk;
        }
        v8f b = LOADV(v8f, a->bias + ch);
        for (int p = 0; p < np; p++) {
            acc[p] = acc[p] + b;
            memcpy(outs[p] + ch, &acc[p], sizeof acc[p]);
        }
    }
#endif
    for (; ch < c; ch += 16) {
        Py_ssize_t n = c - ch < 16 ? c - ch : 16;
        for (int p = 0; p < np; p++) {
            for (Py_ssize_t l = 0; l < n; l++)
                tmp[p][l] = 0.0f;
            for (Py_ssize_t t = 0; t < ntaps; t++) {
                const float *px = DW_TAP(p, t) + ch, *wk = a->wt + t * c + ch;
                for (Py_ssize_t l = 0; l < n; l++) {
                    float prod = px[l] * wk[l];
                    tmp[p][l] = tmp[p][l] + prod;
                }
            }
            for (Py_ssize_t l = 0; l < n; l++)
                outs[p][ch + l] = tmp[p][l] + a->bias[ch + l];
        }
    }
}

#include "_native_dw.h"

HOT static void depthwise_rows(const DwArgs *a, float *restrict out, Py_ssize_t oy0,
                               Py_ssize_t oy1, const float **src, Py_ssize_t *toff)
{
    Py_ssize_t ntaps = a->ky * a->kx, c = a->c;
#if DW_VECTOR
    const int shape = dws_shape(a), wide = dws_wide_flag > 0;
#endif
    for (Py_ssize_t i = 0; i < a->ky; i++)
        for (Py_ssize_t j = 0; j < a->kx; j++)
            toff[i * a->kx + j] = (i * a->dy * a->w + j * a->dx) * c;
    for (Py_ssize_t oy = oy0; oy < oy1; oy++) {
        Py_ssize_t iy0 = oy * a->sy - a->pt;
        int rows_in = iy0 >= 0 && iy0 + (a->ky - 1) * a->dy < a->h;
        for (Py_ssize_t ox0 = 0; ox0 < a->ow; ox0 += DW_PX) {
            int np = a->ow - ox0 < DW_PX ? (int)(a->ow - ox0) : DW_PX;
            float *outs[DW_PX];
            Py_ssize_t ix0 = ox0 * a->sx - a->pl;
            int inside = rows_in && ix0 >= 0
                && ix0 + (np - 1) * a->sx + (a->kx - 1) * a->dx < a->w;
            const float *base0 = inside ? a->x + (iy0 * a->w + ix0) * c : NULL;
            Py_ssize_t pstep = a->sx * c;
            for (int p = 0; p < np; p++)
                outs[p] = out + (oy * a->ow + ox0 + p) * c;
            Py_ssize_t ch0 = 0;  /* the channels done by the column sweep (_native_dw.h) */
#if DW_VECTOR
            ch0 = dws_pixels(a, oy, ox0, np, outs, shape, wide);
#endif
            for (int p = 0; p < np && ch0 < c; p++) {
                Py_ssize_t ox = ox0 + p;
                if (inside)  /* the whole window is in the input: taps at fixed steps */
                    continue;
                for (Py_ssize_t i = 0; i < a->ky; i++) {
                    Py_ssize_t iy = iy0 + i * a->dy;
                    for (Py_ssize_t j = 0; j < a->kx; j++) {
                        Py_ssize_t ix = ox * a->sx + j * a->dx - a->pl;
                        src[p * ntaps + i * a->kx + j] =
                            (iy >= 0 && iy < a->h && ix >= 0 && ix < a->w)
                            ? a->x + (iy * a->w + ix) * c : a->zeros;
                    }
                }
            }
#define DW_CALL(n)                                                                     \
    (inside ? dw_pixels(a, src, base0, pstep, toff, outs, (n), 1, ch0)                     \
            : dw_pixels(a, src, base0, pstep, toff, outs, (n), 0, ch0))
            switch (ch0 < c ? np : 0) {  /* as many independent sums as pixels left */
            case 0: break;
            case DW_PX: DW_CALL(DW_PX); break;
#if DW_PX > 4
            case 7: DW_CALL(7); break;
            case 6: DW_CALL(6); break;
            case 5: DW_CALL(5); break;
            case 4: DW_CALL(4); break;
#endif
            case 3: DW_CALL(3); break;
            case 2: DW_CALL(2); break;
            default: DW_CALL(1); break;
            }
#undef DW_CALL
            if (a->act >= 0 && !a->prelu)  /* the epilogue on the np pixels just written
                                              * (in cache; adjacent in out: one run) */
                epilogue_run(outs[0], np * c, NULL, NULL, a->act, a->slope, NULL);
            else if (a->act >= 0)  /* pixel by pixel (PReLU's slopes are per channel) */
                for (int p = 0; p < np; p++)
                    epilogue_run(outs[p], c, NULL, NULL, a->act, a->slope, a->prelu);
        }
    }
}

PyDoc_STRVAR(depthwise_doc,
"depthwise(x, taps, bias, out, sx, sy, dx, dy, pad_left, pad_top, act=-1, slope=0, "
"prelu=None, row0=0, row1=-1, parts=1)\n\n"
"Depthwise correlation: ``x`` (H, W, C) input, zero-padded by ``pad_left``/``pad_top`` "
"(and as far right and down as the output needs), ``taps`` (ky, kx, C) weights, "
"``bias`` (C,), ``out`` (OH, OW, C); all float32 C-contiguous.  out = 0 + tap0*w0 + "
"tap1*w1 + ... (taps in row-major order, each product rounded before its add; a padded "
"position contributes 0*w) + bias.  With ``act`` >= 0, the activation (see epilogue) "
"and the rounding to binary16 values follow.  Only output rows ``row0``..``row1`` (-1: "
"the last) are written: two threads may each write a part of one ``out``; ``parts`` 2: "
"those rows in two parts, the second on the worker thread (_native_team.c).");

/* rows [row0 + lo, row0 + hi) for the second core; the caller's chunks use the first
 * scratch tables, the worker's the second */
typedef struct {
    const DwArgs *da;
    float *out;
    Py_ssize_t row0;
    const float **src[2];
    Py_ssize_t *toff[2];
} DwPart;

static void depthwise_part(void *ctx, Py_ssize_t lo, Py_ssize_t hi, int who)
{
    const DwPart *d = ctx;
    depthwise_rows(d->da, d->out, d->row0 + lo, d->row0 + hi, d->src[who], d->toff[who]);
}

static PyObject *depthwise(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4], *po = Py_None;
    Py_buffer b[4], p;
    int sx, sy, dx, dy, pl, pt, act = -1, gp = 0, parts = 1;
    float slope = 0.0f;
    Py_ssize_t h, w, c, ky, kx, oh, ow, row0 = 0, row1 = -1;
    float *zeros = NULL;
    const float **src = NULL;
    Py_ssize_t *toff = NULL;
    if (!PyArg_ParseTuple(args, "OOOOiiiiii|ifOnni", &objs[0], &objs[1], &objs[2], &objs[3],
                          &sx, &sy, &dx, &dy, &pl, &pt, &act, &slope, &po, &row0, &row1,
                          &parts))
        return NULL;
    if (act >= 0 && !act_compiled(act)) {
        PyErr_Format(PyExc_ValueError, "depthwise: activation %d is not compiled", act);
        return NULL;
    }
    static const char *names[4] = {"x", "taps", "bias", "out"};
    int got = 0;
    for (; got < 4; got++)
        if (get_f32(objs[got], &b[got], got == 3, names[got]) < 0)
            goto done;
    if (b[0].ndim != 3 || b[1].ndim != 3 || b[2].ndim != 1 || b[3].ndim != 3) {
        PyErr_SetString(PyExc_ValueError, "depthwise: x, taps, out must be 3-D, bias 1-D");
        goto done;
    }
    h = b[0].shape[0]; w = b[0].shape[1]; c = b[0].shape[2];
    ky = b[1].shape[0]; kx = b[1].shape[1];
    oh = b[3].shape[0]; ow = b[3].shape[1];
    if (row1 < 0 || row1 > oh)
        row1 = oh;
    if (row0 < 0 || row0 > row1) {
        PyErr_SetString(PyExc_ValueError, "depthwise: row0 outside 0..row1");
        goto done;
    }
    if (b[1].shape[2] != c || b[2].shape[0] != c || b[3].shape[2] != c || sx < 1 || sy < 1
        || dx < 1 || dy < 1 || pl < 0 || pt < 0 || ky < 1 || kx < 1) {
        PyErr_SetString(PyExc_ValueError, "depthwise: inconsistent shapes or steps");
        goto done;
    }
    if (opt_vec(po, &p, c, "prelu", &gp) < 0)
        goto done;
    if (act == 4 && !gp) {
        PyErr_SetString(PyExc_ValueError, "depthwise: PReLU needs slopes");
        goto done;
    }
    if (b[3].buf == b[0].buf) {
        PyErr_SetString(PyExc_ValueError, "depthwise: out must not be x");
        goto done;
    }
    zeros = PyMem_Calloc((size_t)c, sizeof(float));
    src = PyMem_Malloc((size_t)(2 * DW_PX * ky * kx) * sizeof(float *));
    toff = PyMem_Malloc((size_t)(2 * ky * kx) * sizeof(Py_ssize_t));
    if (!zeros || !src || !toff) {
        PyErr_NoMemory();
        goto done;
    }
    {
        DwArgs da = {(const float *)b[0].buf, (const float *)b[1].buf,
                     (const float *)b[2].buf, zeros, gp ? (const float *)p.buf : NULL,
                     h, w, c, ky, kx, ow, sx, sy, dx, dy, pl, pt, act, slope};
        DwPart part = {&da, (float *)b[3].buf, row0, {src, src + DW_PX * ky * kx},
                       {toff, toff + ky * kx}};
#if DW_VECTOR
        dws_init();
#endif
        Py_BEGIN_ALLOW_THREADS
        team_run(depthwise_part, &part, row1 - row0, parts);
        Py_END_ALLOW_THREADS
    }
done:
    PyMem_Free(zeros);
    PyMem_Free(src);
    PyMem_Free(toff);
    if (gp)
        PyBuffer_Release(&p);
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&b[k]);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"round_f16", round_f16, METH_VARARGS, round_f16_doc},
    {"finish", finish, METH_VARARGS, finish_doc},
    {"epilogue", epilogue, METH_VARARGS, epilogue_doc},
    {"depthwise", depthwise, METH_VARARGS, depthwise_doc},
    {"f16_to_f32", dv_f16_to_f32, METH_VARARGS, dv_f16_to_f32_doc},
    {"f32_to_f16", dv_f32_to_f16, METH_VARARGS, dv_f32_to_f16_doc},
    {"pack", dv_pack, METH_VARARGS, dv_pack_doc},
    {"im2col", dv_im2col, METH_VARARGS, dv_im2col_doc},
    {"avgpool", dv_avgpool, METH_VARARGS, dv_avgpool_doc},
    {"maxpool", dv_maxpool, METH_VARARGS, dv_maxpool_doc},
    {"act_elem", dv_act_elem, METH_VARARGS, dv_act_elem_doc},
    {"hwc_to_chw", dv_hwc_to_chw, METH_VARARGS, dv_hwc_to_chw_doc},
    {"unpack", dv_unpack, METH_VARARGS, dv_unpack_doc},
    {"ew_f16", dv_ew_f16, METH_VARARGS, dv_ew_f16_doc},
    {"lookup16", dv_lookup16, METH_VARARGS, dv_lookup16_doc},
    {"gemm", dv_gemm, METH_VARARGS, dv_gemm_doc},
    {"elem", dv_elem, METH_VARARGS, dv_elem_doc},
    {"team_stats", dv_team_stats, METH_VARARGS, dv_team_stats_doc},
    {"gemm_isa", dv_gemm_isa, METH_NOARGS, dv_gemm_isa_doc},
    {"span_add", (PyCFunction)(void (*)(void))dv_span_add, METH_FASTCALL, dv_span_add_doc},
    {"span_remove", (PyCFunction)(void (*)(void))dv_span_remove, METH_FASTCALL,
     dv_span_remove_doc},
    {"span_overlap", (PyCFunction)(void (*)(void))dv_span_overlap, METH_FASTCALL,
     dv_span_overlap_doc},
    {"span_cover", (PyCFunction)(void (*)(void))dv_span_cover, METH_FASTCALL,
     dv_span_cover_doc},
    {"dram_stamp", (PyCFunction)(void (*)(void))dv_dram_stamp, METH_FASTCALL,
     dv_dram_stamp_doc},
    {"dram_version", (PyCFunction)(void (*)(void))dv_dram_version, METH_FASTCALL,
     dv_dram_version_doc},
    {"live_clip", (PyCFunction)(void (*)(void))dv_live_clip, METH_FASTCALL, dv_live_clip_doc},
    {"live_insert", (PyCFunction)(void (*)(void))dv_live_insert, METH_FASTCALL,
     dv_live_insert_doc},
    {"live_unpacked", (PyCFunction)(void (*)(void))dv_live_unpacked, METH_FASTCALL,
     dv_live_unpacked_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dvsdk._native",
    "Optional compiled loops for the simulator (see dvsdk/_native.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    dv_f16_init();
    return PyModule_Create(&module);
}

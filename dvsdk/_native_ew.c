/*
 * dvsdk._native: the runtime's element-wise CPU steps on binary16 tensors (ew_f16), see
 * _native.c.  One op between two hardware segments, from the arena's FP16 bytes to FP16
 * bytes in one pass (dvsdk/runtime/cpusteps.py, FusedPlan).
 */
#include "_native.h"

/* Element-wise ops of the runtime's CPU steps (runtime/cpusteps.py) on binary16 tensors
 * in the chunked layout (section 1): each value widened to float32, the op computed in
 * float32 as dvsdk/cpu/ops.py computes it (the same operations in the same order, built
 * without contraction; HardSwish's clamp the comparisons of arith.clip), and rounded back
 * to binary16 (a NaN, whatever its payload, to the canonical one). */
enum { EW_HARDSWISH = 0, EW_MUL = 1, EW_ADD = 2 };
#define EW_BLOCK 512

/* The op on a block, vectorized, into r.  Built assuming no floating-point trap is
 * enabled (none is): only so may the compiler turn HardSwish's clamps into selects and
 * vectorize them for AVX2 and SSE too; the values are the same.  (Only here: the same
 * attribute on every hot loop made the depthwise loop, whose helpers are inlined, 3-4x
 * slower.) */
HOT __attribute__((optimize("no-trapping-math"))) static void ew_apply(
    int op, const float *restrict x, const float *restrict y, float *restrict r,
    Py_ssize_t n, int y_first)
{
    if (op == EW_HARDSWISH) {
        const float sixth = (float)(1.0 / 6.0);
        for (Py_ssize_t i = 0; i < n; i++) {
            float v = x[i], t = v * sixth;
            t = t + 0.5f;
            t = t < 0.0f ? 0.0f : t;       /* arith.clip(t, 0, 1) */
            t = t > 1.0f ? 1.0f : t;
            r[i] = v * t;
        }
    } else if (op == EW_MUL) {
        for (Py_ssize_t i = 0; i < n; i++)
            r[i] = y_first ? y[i] * x[i] : x[i] * y[i];
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            r[i] = y_first ? y[i] + x[i] : x[i] + y[i];
    }
}

/* y: NULL, n binary16 values (yh), or c float32 values by channel (yc; chunked geometry) */
static void ew_run(int op, const uint16_t *x, uint16_t *out, const uint16_t *yh,
                   const float *yc, Py_ssize_t n, Py_ssize_t c, Py_ssize_t wh, int y_first)
{
    float a[EW_BLOCK], b[EW_BLOCK], r[EW_BLOCK];
    if (yc == NULL) {
        for (Py_ssize_t i = 0; i < n; i += EW_BLOCK) {
            Py_ssize_t m = n - i < EW_BLOCK ? n - i : EW_BLOCK;
            to_f32_run(x + i, a, m);
            if (yh)
                to_f32_run(yh + i, b, m);
            ew_apply(op, a, b, r, m, y_first);
            to_f16_run(r, out + i, m);
        }
        return;
    }
    for (Py_ssize_t c0 = 0; c0 < c; c0 += 8) {   /* chunk by chunk: cs channels a position */
        Py_ssize_t cs = c - c0 < 8 ? c - c0 : 8, len = cs * wh, step = cs * (EW_BLOCK / 8);
        const uint16_t *xs = x + c0 * wh;
        uint16_t *os = out + c0 * wh;
        /* every block starts at a position: the chunk's cs values, once per position of
         * a block (of the chunk's, if shorter; no division per value) */
        for (Py_ssize_t e = 0, fill = len < step ? len : step; e < fill; e += cs)
            for (Py_ssize_t k = 0; k < cs; k++)
                b[e + k] = yc[c0 + k];
        for (Py_ssize_t i = 0; i < len; i += step) {
            Py_ssize_t m = len - i < step ? len - i : step;
            to_f32_run(xs + i, a, m);
            ew_apply(op, a, b, r, m, y_first);
            to_f16_run(r, os + i, m);
        }
    }
}

const char dv_ew_f16_doc[] =
    "ew_f16(op, x, out, y=None, c=0, wh=0, y_first=False)\n\n"
    "An element-wise op on binary16 ``x`` (2-byte items, contiguous) into ``out`` (as many): "
    "0 HardSwish, 1 Mul, 2 Add; the second operand ``y`` is binary16 like ``x``, or float32 "
    "with one value per channel of a chunked (section 1) tensor of ``c`` channels and "
    "``wh`` positions; ``y_first``: y is the op's first operand.  Computed in float32 as "
    "dvsdk.cpu.ops computes it, rounded to binary16 (every NaN the canonical one).";

PyObject *dv_ew_f16(PyObject *self, PyObject *args)
{
    (void)self;
    int op, y_first = 0;
    PyObject *xo, *oo, *yo = Py_None;
    Py_ssize_t c = 0, wh = 0;
    Py_buffer x, o, y;
    int gy = 0, per_channel = 0;
    if (!PyArg_ParseTuple(args, "iOO|Onnp", &op, &xo, &oo, &yo, &c, &wh, &y_first))
        return NULL;
    if (op < EW_HARDSWISH || op > EW_ADD) {
        PyErr_Format(PyExc_ValueError, "ew_f16: unknown op %d", op);
        return NULL;
    }
    if (get_buf(xo, &x, PyBUF_C_CONTIGUOUS, 2, "eHh", "x") < 0)
        return NULL;
    if (get_buf(oo, &o, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, 2, "eHh", "out") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    Py_ssize_t n = x.len / 2;
    if (o.len / 2 != n) {
        PyErr_SetString(PyExc_ValueError, "ew_f16: x and out sizes differ");
        goto done;
    }
    if ((yo == Py_None) != (op == EW_HARDSWISH)) {
        PyErr_SetString(PyExc_ValueError, "ew_f16: HardSwish takes one operand, Mul/Add two");
        goto done;
    }
    if (yo != Py_None) {
        per_channel = c > 0;
        if (get_buf(yo, &y, PyBUF_C_CONTIGUOUS, per_channel ? 4 : 2, per_channel ? "f" : "eHh",
                    "y") < 0)
            goto done;
        gy = 1;
        if (per_channel ? (y.len / 4 != c || wh < 1 || c * wh != n) : y.len / 2 != n) {
            PyErr_SetString(PyExc_ValueError, "ew_f16: y does not match x (n, or c * wh)");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    ew_run(op, (const uint16_t *)x.buf, (uint16_t *)o.buf,
           gy && !per_channel ? (const uint16_t *)y.buf : NULL,
           gy && per_channel ? (const float *)y.buf : NULL, n, c, wh, y_first);
    Py_END_ALLOW_THREADS
done:
    if (gy)
        PyBuffer_Release(&y);
    PyBuffer_Release(&x);
    PyBuffer_Release(&o);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* -- Fp16Table: a 65,536-entry table indexed by binary16 bits ------------------------- */

HOT static void lookup_run(const void *table, const uint16_t *x, void *out, Py_ssize_t n,
                           Py_ssize_t itemsize)
{
    if (itemsize == 2) {
        const uint16_t *t = table;
        uint16_t *o = out;
        for (Py_ssize_t i = 0; i < n; i++)
            o[i] = t[x[i]];
    } else {
        const uint32_t *t = table;
        uint32_t *o = out;
        for (Py_ssize_t i = 0; i < n; i++)
            o[i] = t[x[i]];
    }
}

const char dv_lookup16_doc[] =
    "lookup16(table, x, out)\n\n``out[i] = table[x[i]]``: ``x`` binary16 bits (2-byte "
    "items, contiguous), ``table`` 65536 items of 2 or 4 bytes, ``out`` as many items as "
    "``x`` of the table's size (contiguous; it may be ``x`` itself, never overlap it "
    "otherwise).  A copy of bits: numpy's ``take`` gives the same.";

PyObject *dv_lookup16(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *to, *xo, *oo;
    Py_buffer t, x, o;
    if (!PyArg_ParseTuple(args, "OOO", &to, &xo, &oo))
        return NULL;
    if (PyObject_GetBuffer(to, &t, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (get_buf(xo, &x, PyBUF_C_CONTIGUOUS, 2, "eHh", "x") < 0) {
        PyBuffer_Release(&t);
        return NULL;
    }
    if (PyObject_GetBuffer(oo, &o, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&x);
        PyBuffer_Release(&t);
        return NULL;
    }
    Py_ssize_t isz = t.len / 65536, n = x.len / 2;
    const char *xb = x.buf, *ob = o.buf;
    if ((isz != 2 && isz != 4) || t.len != 65536 * isz)
        PyErr_SetString(PyExc_ValueError, "lookup16: table must hold 65536 items of 2 or 4 "
                        "bytes");
    else if (o.len != n * isz)
        PyErr_SetString(PyExc_ValueError, "lookup16: out must hold as many items as x, "
                        "each of the table's size");
    else if (xb != ob && xb < ob + o.len && ob < xb + x.len)
        PyErr_SetString(PyExc_ValueError, "lookup16: out overlaps x");
    else {
        Py_BEGIN_ALLOW_THREADS
        lookup_run(t.buf, (const uint16_t *)x.buf, o.buf, n, isz);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&o);
    PyBuffer_Release(&x);
    PyBuffer_Release(&t);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/*
 * dvsdk._native: optional compiled loops for the simulator's two hottest data paths.
 *
 * Both have a numpy implementation that is the reference (dvsdk/hw/fp16.py round_f16,
 * dvsdk/sim/ops.py _depthwise); these give the same bits (NaN payloads aside: which
 * of two NaN operands survives may differ), one pass over memory instead
 * of numpy's five to eighteen.  The package works without this module (it is an
 * optional extension: a machine without a C compiler gets the numpy paths).
 *
 * Exactness: built with -ffp-contract=off, so a*b+c is a float32 multiply rounded, then
 * an add rounded, as numpy computes it (no fused multiply-add).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The hot loops are also compiled for AVX2 where the toolchain can pick the variant at
 * load time (x86-64 Linux); the results are the same bits, only wider vectors. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

/* float32 -> nearest binary16 (ties to even), as binary16 bits; numpy's
 * npy_floatbits_to_halfbits semantics: overflow -> inf, NaN keeps its top payload bits
 * (0x7c01 if they are all zero), subnormal results rounded at 2**-24. */
static inline uint16_t f32_to_f16_bits(uint32_t f)
{
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t a = f & 0x7fffffffu;
    if (a >= 0x7f800000u) {                     /* inf or NaN */
        if (a == 0x7f800000u)
            return sign | 0x7c00u;
        uint16_t r = (uint16_t)(0x7c00u + ((a & 0x007fffffu) >> 13));
        return sign | (r == 0x7c00u ? 0x7c01u : r);
    }
    if (a >= 0x477ff000u)                       /* rounds to 65536 and beyond: inf */
        return sign | 0x7c00u;
    if (a >= 0x38800000u) {                     /* normal binary16 */
        uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
        return sign | (uint16_t)((r - 0x38000000u) >> 13);
    }
    if (a < 0x33000000u)                        /* below half the smallest subnormal */
        return sign;
    /* subnormal: significand with its hidden bit, shifted to units of 2**-24 */
    uint32_t e = a >> 23;                       /* 102 .. 112 */
    uint32_t sig = (a & 0x007fffffu) | 0x00800000u;
    uint32_t shift = 126u - e;                  /* 14 .. 24 */
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q += 1u;
    return sign | (uint16_t)q;
}

static inline uint32_t f16_bits_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu)
        return sign | 0x7f800000u | (m << 13);
    if (e != 0)
        return sign | ((e + 112u) << 23) | (m << 13);
    if (m == 0)
        return sign;
    float v = (float)m * (1.0f / 16777216.0f);   /* m * 2**-24, exact */
    uint32_t u;
    memcpy(&u, &v, 4);
    return sign | u;
}

static int get_f32(PyObject *obj, Py_buffer *view, int writable, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT |
                           (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != 4 || strcmp(view->format ? view->format : "B", "f") != 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous float32 buffer", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Round n float32 patterns to binary16 values (as float32 patterns), s -> d (must not
 * overlap), in chunks: a branch-free loop that vectorizes does integer rounding at
 * mantissa bit 13, right for zero and every normal binary16 result; only a chunk where
 * something else occurred (subnormal result, overflow, inf, NaN) is gone over again with
 * the general conversion. */
#define ROUND_CHUNK 64

static inline void round_block(const uint32_t *s, uint32_t *d, Py_ssize_t n)
{
    for (Py_ssize_t c0 = 0; c0 < n; c0 += ROUND_CHUNK) {
        Py_ssize_t m = n - c0 < ROUND_CHUNK ? n - c0 : ROUND_CHUNK;
        const uint32_t *sc = s + c0;
        uint32_t *dc = d + c0;
        uint32_t others = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            uint32_t u = sc[i], a = u & 0x7fffffffu;
            others |= (uint32_t)(a - 1u < 0x387fffffu) | (uint32_t)(a >= 0x477ff000u);
            dc[i] = (u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u;
        }
        if (!others)
            continue;
        for (Py_ssize_t i = 0; i < m; i++) {
            uint32_t a = sc[i] & 0x7fffffffu;
            if ((a - 1u < 0x387fffffu) | (a >= 0x477ff000u))
                dc[i] = f16_bits_to_f32(f32_to_f16_bits(sc[i]));
        }
    }
}

PyDoc_STRVAR(round_f16_doc,
"round_f16(src, dst)\n\nRound float32 ``src`` to the nearest binary16 values into float32 "
"``dst`` (same size, a different buffer).");

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
        round_block((const uint32_t *)src.buf, (uint32_t *)dst.buf, src.len / 4);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* numpy's semantics, element by element: maximum/minimum return a NaN operand unchanged
 * and +0 for max(-0, 0); where(a > 0, a, a * slope) */
static inline float act_relu6(float a)
{
    float m = (a != a) ? a : (a > 0.0f ? a : 0.0f);
    return (m != m) ? m : (m < 6.0f ? m : 6.0f);
}

static inline float act_leaky(float a, float slope)
{
    return a > 0.0f ? a : a * slope;
}

#define FINISH_BLOCK 4096

HOT static void finish_all(float *v, Py_ssize_t n, int act, float slope)
{
    float tmp[FINISH_BLOCK];
    for (Py_ssize_t b0 = 0; b0 < n; b0 += FINISH_BLOCK) {
        Py_ssize_t m = n - b0 < FINISH_BLOCK ? n - b0 : FINISH_BLOCK;
        float *blk = v + b0;
        if (act == 6)
            for (Py_ssize_t i = 0; i < m; i++) tmp[i] = act_relu6(blk[i]);
        else if (act == 2)
            for (Py_ssize_t i = 0; i < m; i++) tmp[i] = act_leaky(blk[i], slope);
        else
            memcpy(tmp, blk, (size_t)m * 4);
        round_block((const uint32_t *)tmp, (uint32_t *)blk, m);
    }
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

HOT static void depthwise_all(const float *restrict x, Py_ssize_t h, Py_ssize_t w,
                              Py_ssize_t c, const float *restrict wt, Py_ssize_t ky,
                              Py_ssize_t kx, const float *restrict bias,
                              float *restrict out, Py_ssize_t oh, Py_ssize_t ow, int sx,
                              int sy, int dx, int dy, int pl, int pt,
                              const float *restrict zeros)
{
    for (Py_ssize_t oy = 0; oy < oh; oy++) {
        for (Py_ssize_t ox = 0; ox < ow; ox++) {
            float *restrict o = out + (oy * ow + ox) * c;
            for (Py_ssize_t ch = 0; ch < c; ch++)
                o[ch] = 0.0f;
            for (Py_ssize_t i = 0; i < ky; i++) {
                Py_ssize_t iy = oy * sy + i * dy - pt;
                for (Py_ssize_t j = 0; j < kx; j++) {
                    Py_ssize_t ix = ox * sx + j * dx - pl;
                    const float *restrict px = (iy >= 0 && iy < h && ix >= 0 && ix < w)
                        ? x + (iy * w + ix) * c : zeros;
                    const float *restrict wk = wt + (i * kx + j) * c;
                    for (Py_ssize_t ch = 0; ch < c; ch++) {
                        float p = px[ch] * wk[ch];
                        o[ch] = o[ch] + p;
                    }
                }
            }
            for (Py_ssize_t ch = 0; ch < c; ch++)
                o[ch] = o[ch] + bias[ch];
        }
    }
}

PyDoc_STRVAR(depthwise_doc,
"depthwise(x, taps, bias, out, sx, sy, dx, dy, pad_left, pad_top)\n\n"
"Depthwise correlation: ``x`` (H, W, C) input, zero-padded by ``pad_left``/``pad_top`` "
"(and as far right and down as the output needs), ``taps`` (ky, kx, C) weights, "
"``bias`` (C,), ``out`` (OH, OW, C); all float32 C-contiguous.  out = 0 + tap0*w0 + "
"tap1*w1 + ... (taps in row-major order, each product rounded before its add; a padded "
"position contributes 0*w) + bias.");

static PyObject *depthwise(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4];
    Py_buffer b[4];
    int sx, sy, dx, dy, pl, pt;
    Py_ssize_t h, w, c, ky, kx, oh, ow;
    float *zeros = NULL;
    if (!PyArg_ParseTuple(args, "OOOOiiiiii", &objs[0], &objs[1], &objs[2], &objs[3],
                          &sx, &sy, &dx, &dy, &pl, &pt))
        return NULL;
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
    if (b[1].shape[2] != c || b[2].shape[0] != c || b[3].shape[2] != c || sx < 1 || sy < 1
        || dx < 1 || dy < 1 || pl < 0 || pt < 0 || ky < 1 || kx < 1) {
        PyErr_SetString(PyExc_ValueError, "depthwise: inconsistent shapes or steps");
        goto done;
    }
    zeros = PyMem_Calloc((size_t)c, sizeof(float));
    if (!zeros) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    depthwise_all((const float *)b[0].buf, h, w, c, (const float *)b[1].buf, ky, kx,
                  (const float *)b[2].buf, (float *)b[3].buf, oh, ow, sx, sy, dx, dy, pl, pt,
                  zeros);
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(zeros);
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&b[k]);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"round_f16", round_f16, METH_VARARGS, round_f16_doc},
    {"finish", finish, METH_VARARGS, finish_doc},
    {"depthwise", depthwise, METH_VARARGS, depthwise_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dvsdk._native",
    "Optional compiled loops for the simulator (see dvsdk/_native.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    return PyModule_Create(&module);
}

/*
 * dvsdk._native: the conv engine's data movement and the activations that need numpy's
 * transcendental functions (dvsdk/sim/ops.py is the reference; see _native.c).
 *
 * im2col: the matrix ops.conv2d builds from a padded copy and a sliding-window view, in
 * one pass and without the padded copy: the same values, the same (rows, ky*kx*C) shape,
 * so numpy's matrix product on it is the same call with the same sums.
 * avgpool: ops.avg_pool's sum over the window taps in row-major order (padded positions
 * add 0), then the multiplication by the parameter.
 * act_elem: ops.activation's tanh, sigmoid and ELU (the float64 functions of
 * dvsdk/hw/elementary.py, _native_elem.h) and the rounding, in one pass.
 */
#include "_native.h"
#include "_native_elem.h"

static int buf_f32(PyObject *obj, Py_buffer *b, int writable, int ndim, const char *name)
{
    if (get_f32(obj, b, writable, name) < 0)
        return -1;
    if (ndim && b->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must be %d-D", name, ndim);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

HOT static void im2col_rows(const float *restrict x, Py_ssize_t h, Py_ssize_t w,
                            Py_ssize_t c, float *restrict out, Py_ssize_t oy0,
                            Py_ssize_t rows, Py_ssize_t ow, int kx, int ky, int sx, int sy,
                            int dx, int dy, int pl, int pt, int ux, int uy)
{
    size_t bytes = (size_t)c * 4;
    Py_ssize_t zh = (h - 1) * uy + 1, zw = (w - 1) * ux + 1;  /* the zero-inserted input */
    if (ux == 1 && uy == 1 && dx == 1) {
        /* no zeros inserted, taps adjacent along x: a window row inside the input is kx*C
         * contiguous floats, copied at once (the same values as tap by tap) */
        size_t run = (size_t)kx * bytes;
        for (Py_ssize_t r = 0; r < rows; r++) {
            Py_ssize_t oy = oy0 + r;
            for (Py_ssize_t ox = 0; ox < ow; ox++) {
                float *o = out + ((r * ow + ox) * ky * kx) * c;
                Py_ssize_t zx0 = ox * sx - pl;
                int cols_in = zx0 >= 0 && zx0 + kx - 1 < w;
                for (int i = 0; i < ky; i++, o += (Py_ssize_t)kx * c) {
                    Py_ssize_t zy = oy * sy + (Py_ssize_t)i * dy - pt;
                    if (zy < 0 || zy >= h) {
                        memset(o, 0, run);
                    } else if (cols_in) {
                        memcpy(o, x + (zy * w + zx0) * c, run);
                    } else {
                        for (int j = 0; j < kx; j++) {
                            Py_ssize_t zx = zx0 + j;
                            if (zx >= 0 && zx < w)
                                memcpy(o + (Py_ssize_t)j * c, x + (zy * w + zx) * c, bytes);
                            else
                                memset(o + (Py_ssize_t)j * c, 0, bytes);
                        }
                    }
                }
            }
        }
        return;
    }
    for (Py_ssize_t r = 0; r < rows; r++) {
        Py_ssize_t oy = oy0 + r;
        for (Py_ssize_t ox = 0; ox < ow; ox++) {
            float *o = out + ((r * ow + ox) * ky * kx) * c;
            for (int i = 0; i < ky; i++) {
                Py_ssize_t zy = oy * sy + (Py_ssize_t)i * dy - pt;
                int row_in = zy >= 0 && zy < zh && zy % uy == 0;
                for (int j = 0; j < kx; j++, o += c) {
                    Py_ssize_t zx = ox * sx + (Py_ssize_t)j * dx - pl;
                    if (row_in && zx >= 0 && zx < zw && zx % ux == 0)
                        memcpy(o, x + ((zy / uy) * w + zx / ux) * c, bytes);
                    else
                        memset(o, 0, bytes);
                }
            }
        }
    }
}

const char dv_im2col_doc[] =
    "im2col(x, out, oy0, kx, ky, sx, sy, dx, dy, pad_left, pad_top, ux=1, uy=1, parts=1)\n\n"
    "Output rows oy0.. of ``x`` (H, W, C), with ux-1 / uy-1 zeros inserted between its "
    "columns / rows (a deconvolution's input) and zero-padded by pad_left/pad_top (and as "
    "far as needed right and down), as the matrix ``out`` (rows, OW, ky*kx*C): row (r, ox) "
    "holds the window of output pixel (oy0 + r, ox), taps in row-major order, C fastest; "
    "``parts`` 2: the rows in two parts, the second on the worker thread.";

typedef struct {
    const float *x;
    Py_ssize_t h, w, c;
    float *out;
    Py_ssize_t oy0, ow;
    int kx, ky, sx, sy, dx, dy, pl, pt, ux, uy;
} Im2colPart;

static void im2col_part(void *ctx, Py_ssize_t lo, Py_ssize_t hi, int who)
{
    (void)who;
    const Im2colPart *q = ctx;
    im2col_rows(q->x, q->h, q->w, q->c, q->out + lo * q->ow * q->ky * q->kx * q->c,
                q->oy0 + lo, hi - lo, q->ow, q->kx, q->ky, q->sx, q->sy, q->dx, q->dy, q->pl,
                q->pt, q->ux, q->uy);
}

PyObject *dv_im2col(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *oo;
    Py_ssize_t oy0;
    int kx, ky, sx, sy, dx, dy, pl, pt, ux = 1, uy = 1, parts = 1;
    Py_buffer x, o;
    if (!PyArg_ParseTuple(args, "OOniiiiiiii|iii", &xo, &oo, &oy0, &kx, &ky, &sx, &sy, &dx,
                          &dy, &pl, &pt, &ux, &uy, &parts))
        return NULL;
    if (buf_f32(xo, &x, 0, 3, "x") < 0)
        return NULL;
    if (buf_f32(oo, &o, 1, 3, "out") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    Py_ssize_t h = x.shape[0], w = x.shape[1], c = x.shape[2];
    Py_ssize_t rows = o.shape[0], ow = o.shape[1];
    if (kx < 1 || ky < 1 || sx < 1 || sy < 1 || dx < 1 || dy < 1 || pl < 0 || pt < 0
        || ux < 1 || uy < 1 || oy0 < 0 || o.shape[2] != (Py_ssize_t)kx * ky * c
        || x.buf == o.buf) {
        PyErr_SetString(PyExc_ValueError, "im2col: inconsistent shapes or steps");
    } else {
        Im2colPart part = {(const float *)x.buf, h, w, c, (float *)o.buf, oy0, ow, kx, ky,
                           sx, sy, dx, dy, pl, pt, ux, uy};
        Py_BEGIN_ALLOW_THREADS
        team_run(im2col_part, &part, rows, parts);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&o);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* Max pooling's order (firmware_spec/arithmetic.md; ops.max_pool): float32 values ordered
 * as signed integers after flipping the magnitude bits of negative ones, so -0 < +0 and a
 * NaN (made the canonical quiet NaN first) above +inf: the maximum of keys, mapped back,
 * is the window's maximum with +0 over -0 and NaN winning. */
static inline int32_t total_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u = 0x7fc00000u;
    int32_t i = (int32_t)u;
    return i ^ (int32_t)((uint32_t)(i >> 31) & 0x7fffffffu);
}

static inline float total_value(int32_t k)
{
    int32_t i = k ^ (int32_t)((uint32_t)(k >> 31) & 0x7fffffffu);
    float f;
    memcpy(&f, &i, 4);
    return f;
}

/* Pooling over each output pixel's window, taps in row-major order (ops.avg_pool /
 * ops.max_pool): average, acc = 0 + every tap (padded positions 0), times ``param``;
 * max, the largest key (total_key) of the taps (padded: -inf). */
HOT static void pool_all(const float *restrict x, Py_ssize_t h, Py_ssize_t w, Py_ssize_t c,
                         float *restrict out, Py_ssize_t oh, Py_ssize_t ow, int kx, int ky,
                         int sx, int sy, int pl, int pt, int is_max, float param,
                         float *restrict acc, int32_t *restrict keys)
{
    const int32_t pad_key = total_key(-INFINITY);
    if (kx == 1 && ky == 1 && sx == 1 && sy == 1 && pl == 0 && pt == 0 && oh == h
        && ow == w) {  /* one tap per output (the compiler's copy and add commands): flat */
        Py_ssize_t n = h * w * c;
        if (is_max)
            for (Py_ssize_t i = 0; i < n; i++)
                out[i] = total_value(total_key(x[i]));
        else
            for (Py_ssize_t i = 0; i < n; i++)
                out[i] = (0.0f + x[i]) * param;
        return;
    }
    for (Py_ssize_t oy = 0; oy < oh; oy++) {
        for (Py_ssize_t ox = 0; ox < ow; ox++) {
            float *o = out + (oy * ow + ox) * c;
            for (int i = 0; i < ky; i++) {
                Py_ssize_t iy = oy * sy + i - pt;
                for (int j = 0; j < kx; j++) {
                    Py_ssize_t ix = ox * sx + j - pl;
                    int in = iy >= 0 && iy < h && ix >= 0 && ix < w;
                    const float *px = in ? x + (iy * w + ix) * c : NULL;
                    int first = i == 0 && j == 0;
                    if (is_max && in)
                        for (Py_ssize_t ch = 0; ch < c; ch++) {
                            int32_t k = total_key(px[ch]);
                            keys[ch] = first || k > keys[ch] ? k : keys[ch];
                        }
                    else if (is_max)
                        for (Py_ssize_t ch = 0; ch < c; ch++)
                            keys[ch] = first || pad_key > keys[ch] ? pad_key : keys[ch];
                    else if (in)
                        for (Py_ssize_t ch = 0; ch < c; ch++)
                            acc[ch] = (first ? 0.0f : acc[ch]) + px[ch];
                    else
                        for (Py_ssize_t ch = 0; ch < c; ch++)
                            acc[ch] = (first ? 0.0f : acc[ch]) + 0.0f;
                }
            }
            if (is_max)
                for (Py_ssize_t ch = 0; ch < c; ch++)
                    o[ch] = total_value(keys[ch]);
            else
                for (Py_ssize_t ch = 0; ch < c; ch++)
                    o[ch] = acc[ch] * param;
        }
    }
}

/* avgpool(x, out, kx, ky, sx, sy, pl, pt, param) / maxpool(x, out, kx, ky, sx, sy, pl, pt) */
static PyObject *pool_entry(PyObject *args, int is_max)
{
    PyObject *xo, *oo;
    int kx, ky, sx, sy, pl, pt;
    float param = 1.0f;
    Py_buffer x, o;
    float *acc = NULL;
    int ok = is_max ? PyArg_ParseTuple(args, "OOiiiiii", &xo, &oo, &kx, &ky, &sx, &sy, &pl,
                                       &pt)
                    : PyArg_ParseTuple(args, "OOiiiiiif", &xo, &oo, &kx, &ky, &sx, &sy, &pl,
                                       &pt, &param);
    if (!ok)
        return NULL;
    if (buf_f32(xo, &x, 0, 3, "x") < 0)
        return NULL;
    if (buf_f32(oo, &o, 1, 3, "out") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    Py_ssize_t c = x.shape[2];
    if (kx < 1 || ky < 1 || sx < 1 || sy < 1 || pl < 0 || pt < 0 || o.shape[2] != c
        || x.buf == o.buf) {
        PyErr_Format(PyExc_ValueError, "%s: inconsistent shapes or steps",
                     is_max ? "maxpool" : "avgpool");
    } else if (!(acc = PyMem_Malloc((size_t)(c ? c : 1) * 2 * sizeof(float)))) {
        PyErr_NoMemory();
    } else {
        Py_BEGIN_ALLOW_THREADS
        pool_all((const float *)x.buf, x.shape[0], x.shape[1], c, (float *)o.buf,
                 o.shape[0], o.shape[1], kx, ky, sx, sy, pl, pt, is_max, param, acc,
                 (int32_t *)(acc + (c ? c : 1)));
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(acc);
    PyBuffer_Release(&x);
    PyBuffer_Release(&o);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

const char dv_avgpool_doc[] =
    "avgpool(x, out, kx, ky, sx, sy, pad_left, pad_top, param)\n\n"
    "Average pooling as ops.avg_pool: out (OH, OW, C) = (0 + sum of the window's taps in "
    "row-major order, padded positions 0) * param, float32 throughout.";

PyObject *dv_avgpool(PyObject *self, PyObject *args)
{
    (void)self;
    return pool_entry(args, 0);
}

const char dv_maxpool_doc[] =
    "maxpool(x, out, kx, ky, sx, sy, pad_left, pad_top)\n\n"
    "Max pooling as ops.max_pool: out (OH, OW, C) = the window's maximum in the total "
    "order of firmware_spec/arithmetic.md (+0 over -0, a NaN above all: the canonical NaN), "
    "padded positions -inf.";

PyObject *dv_maxpool(PyObject *self, PyObject *args)
{
    (void)self;
    return pool_entry(args, 1);
}

/* tanh, sigmoid and ELU as ops.activation computes them (dvsdk/hw/elementary.py: the
 * function in float64, rounded to float32) */
static inline __attribute__((always_inline)) float act_elem_one(float x, int act,
                                                                 double alpha)
{
    double v = x;
    if (act == 1)
        return (float)el_tanh(v);
    if (act == 3)
        return (float)el_sigmoid(v);
    return v > 0.0 ? (float)v : (float)(alpha * el_expm1(v));
}

/* The same results for every binary16 input, worked out once per function: a standalone
 * activation command reads binary16 values from DRAM, so a block of them is a table
 * lookup.  Each entry is the function's value rounded to binary16 (what the element
 * computes and then rounds).  [0]: tanh, [1]: sigmoid, [2]: ELU with alpha 1 (other
 * alphas compute). */
static float *act_table[3];

static inline __attribute__((always_inline)) const float *act_table_of(int act,
                                                                           double alpha)
{
    return act == 5 && alpha != 1.0 ? NULL : act_table[act == 1 ? 0 : act == 3 ? 1 : 2];
}

/* called with the GIL held (one builder at a time); a table, once built, never changes */
static int act_table_ready(int act, double alpha)
{
    int slot = act == 1 ? 0 : act == 3 ? 1 : 2;
    if (act_table[slot] || (act == 5 && alpha != 1.0))
        return 0;
    float *t = PyMem_Malloc(65536 * sizeof(float)), *v = PyMem_Malloc(65536 * sizeof(float));
    if (!t || !v) {
        PyMem_Free(t);
        PyMem_Free(v);
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t u = f16_bits_to_f32((uint16_t)h);
        float x;
        memcpy(&x, &u, 4);
        v[h] = act_elem_one(x, act, 1.0);
    }
    round_block((const u32a *)v, (u32a *)t, 65536);
    PyMem_Free(v);
    act_table[slot] = t;
    return 0;
}

/* The binary16 bits of the float32 pattern u if it is a binary16 value (zero, subnormal,
 * normal, infinity or a NaN whose payload fits), else 0x10000: branch-free, so the loop
 * that calls it vectorizes */
static inline __attribute__((always_inline)) int32_t f16_index(uint32_t u)
{
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    uint32_t low13 = a & 0x1fffu;
    uint32_t normal = (low13 == 0) & (a >= 0x38800000u) & (a <= 0x477fe000u);
    uint32_t special = (low13 == 0) & (a >= 0x7f800000u);          /* inf, NaN */
    uint32_t e = a >> 23;                                           /* subnormal: 103..112 */
    uint32_t shift = 126u - (e < 103u ? 103u : e > 112u ? 112u : e);
    uint32_t sig = (a & 0x007fffffu) | 0x00800000u;
    uint32_t sub = (a >= 0x33800000u) & (a < 0x38800000u) & ((sig & ((1u << shift) - 1u)) == 0);
    uint32_t bits = normal ? (a - 0x38000000u) >> 13
                    : special ? 0x7c00u | ((a >> 13) & 0x3ffu)
                    : sub ? sig >> shift : 0u;
    return (normal | special | sub | (a == 0)) ? (int32_t)(sign | bits) : 0x10000;
}

/* then the rounding to binary16 values: an element that is a binary16 value takes its
 * result from the table (the same bits), any other computes; y = f(x) (x may be y) */
HOT __attribute__((optimize("no-trapping-math"))) static void act_elem_all(
    const float *x, float *y, Py_ssize_t n, int act, double alpha)
{
    float tmp[FINISH_BLOCK];
    int32_t idx[FINISH_BLOCK];
    const float *tab = act_table_of(act, alpha);
    for (Py_ssize_t b0 = 0; b0 < n; b0 += FINISH_BLOCK) {
        Py_ssize_t m = n - b0 < FINISH_BLOCK ? n - b0 : FINISH_BLOCK;
        const float *blk = x + b0;
        const u32a *bits = (const u32a *)blk;
        int32_t other = tab == NULL ? 0x10000 : 0;  /* no table: every one computes */
        for (Py_ssize_t i = 0; i < m; i++)
            idx[i] = f16_index(bits[i]);
        for (Py_ssize_t i = 0; i < m; i++)
            other |= idx[i];
        if (!(other & 0x10000)) {  /* every one from the table, rounded already */
            float *out = y + b0;
            for (Py_ssize_t i = 0; i < m; i++)
                out[i] = tab[idx[i]];
            continue;
        }
        /* else every element computes (a table entry is the same function of the same
         * value, rounded: the same bits), in a loop of one function */
        if (act == 1) {
            for (Py_ssize_t i = 0; i < m; i++)
                tmp[i] = act_elem_one(blk[i], 1, alpha);
        } else if (act == 3) {
            for (Py_ssize_t i = 0; i < m; i++)
                tmp[i] = act_elem_one(blk[i], 3, alpha);
        } else {
            for (Py_ssize_t i = 0; i < m; i++)
                tmp[i] = act_elem_one(blk[i], 5, alpha);
        }
        round_block((const u32a *)tmp, (u32a *)(y + b0), m);
    }
}

const char dv_act_elem_doc[] =
    "act_elem(y, act, alpha, x=None)\n\nOn float32 ``y``: tanh (``act`` 1), sigmoid (3) "
    "or ELU (5, with ``alpha``) as ops.activation computes them, then rounding to binary16 "
    "values; of ``x`` (as many float32 values) into ``y`` where given, else in place.";

PyObject *dv_act_elem(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *yo, *xo = Py_None;
    int act;
    double alpha;
    Py_buffer y, x;
    if (!PyArg_ParseTuple(args, "Oid|O", &yo, &act, &alpha, &xo))
        return NULL;
    if (act != 1 && act != 3 && act != 5) {
        PyErr_Format(PyExc_ValueError, "act_elem: activation %d is not tanh, sigmoid or ELU",
                     act);
        return NULL;
    }
    if (act_table_ready(act, alpha) < 0)
        return NULL;
    if (buf_f32(yo, &y, 1, 0, "y") < 0)
        return NULL;
    if (xo != Py_None) {
        if (buf_f32(xo, &x, 0, 0, "x") < 0) {
            PyBuffer_Release(&y);
            return NULL;
        }
        if (x.len != y.len || (x.buf != y.buf && bufs_overlap(&x, &y))) {
            PyErr_SetString(PyExc_ValueError, "act_elem: x must have y's size, and be y "
                            "or not overlap it");
            PyBuffer_Release(&x);
            PyBuffer_Release(&y);
            return NULL;
        }
    }
    {
        const float *src = xo != Py_None ? (const float *)x.buf : (const float *)y.buf;
        Py_BEGIN_ALLOW_THREADS
        act_elem_all(src, (float *)y.buf, y.len / 4, act, alpha);
        Py_END_ALLOW_THREADS
    }
    if (xo != Py_None)
        PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    Py_RETURN_NONE;
}

/* -- the (N, R, C) -> (N, C, R) copy of a device tensor's (N, H*W, C) values into the NCHW
 * order the CPU steps hand on (numpy's transposing copy walks one side a value at a time:
 * ~1 ns a value) -------------------------------------------------------------------------- */
#define SWAP_BLOCK 16

HOT static void swap_last2(const uint32_t *restrict s, uint32_t *restrict d, Py_ssize_t n,
                           Py_ssize_t r, Py_ssize_t c)
{
    for (Py_ssize_t b = 0; b < n; b++, s += r * c, d += r * c)
        for (Py_ssize_t i0 = 0; i0 < r; i0 += SWAP_BLOCK) {
            Py_ssize_t i1 = i0 + SWAP_BLOCK < r ? i0 + SWAP_BLOCK : r;
            for (Py_ssize_t j0 = 0; j0 < c; j0 += SWAP_BLOCK) {
                Py_ssize_t j1 = j0 + SWAP_BLOCK < c ? j0 + SWAP_BLOCK : c;
                for (Py_ssize_t j = j0; j < j1; j++)
                    for (Py_ssize_t i = i0; i < i1; i++)
                        d[j * r + i] = s[i * c + j];
            }
        }
}

const char dv_hwc_to_chw_doc[] =
    "hwc_to_chw(src, dst)\n\n``dst`` (N, C, R) = ``src`` (N, R, C) with its last two axes "
    "swapped: 4-byte items (the same format on both), both C-contiguous, not overlapping; "
    "a copy of bits.";

PyObject *dv_hwc_to_chw(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dobj;
    Py_buffer s, d;
    if (!PyArg_ParseTuple(args, "OO", &so, &dobj))
        return NULL;
    if (PyObject_GetBuffer(so, &s, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(dobj, &d, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    const char *fs = s.format ? s.format : "B", *fd = d.format ? d.format : "B";
    if (s.itemsize != 4 || d.itemsize != 4 || strcmp(fs, fd) != 0)
        PyErr_SetString(PyExc_TypeError, "hwc_to_chw: src and dst must hold 4-byte items of "
                        "one format");
    else if (s.ndim != 3 || d.ndim != 3 || d.shape[0] != s.shape[0]
             || d.shape[1] != s.shape[2] || d.shape[2] != s.shape[1])
        PyErr_SetString(PyExc_ValueError, "hwc_to_chw: src must be (N, R, C) and dst "
                        "(N, C, R)");
    else if (bufs_overlap(&s, &d))
        PyErr_SetString(PyExc_ValueError, "hwc_to_chw: dst overlaps src");
    else {
        Py_BEGIN_ALLOW_THREADS
        swap_last2((const uint32_t *)s.buf, (uint32_t *)d.buf, s.shape[0], s.shape[1],
                   s.shape[2]);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

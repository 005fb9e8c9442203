/*
 * dvsdk._native: binary16 <-> float32 conversions and the DV700's chunked tensor layout
 * (dv700-interface.md section 1; dvsdk/hw/layout.py is the reference).
 *
 * The conversions of dvsdk/hw/fp16.py exactly: float32 -> binary16 rounds to nearest
 * even (magnitudes from 65520 become inf, every NaN the canonical 0x7e00), binary16 ->
 * float32 is exact (NaN payloads kept).  Where the CPU converts eight values at a time in
 * hardware (x86-64 F16C), that is used for every group of eight holding no NaN; such a
 * group, and every other element, goes through the bit routines of _native.h.
 */
#include "_native.h"

#if X86_F16C
#include <immintrin.h>
static int have_f16c;
#endif

void dv_f16_init(void)
{
#if X86_F16C
    __builtin_cpu_init();
    have_f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    /* DVSDK_NATIVE_F16C=0: the portable loops, as an Arm board runs them (for tests) */
    const char *env = getenv("DVSDK_NATIVE_F16C");
    if (env && env[0] == '0')
        have_f16c = 0;
#endif
}

static inline void to_f16_scalar(const float *s, Py_ssize_t ss, uint16_t *d, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, s + i * ss, 4);
        d[i] = f32_to_f16_bits(u);
    }
}

static inline void to_f32_scalar(const uint16_t *s, float *d, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t u = f16_bits_to_f32(s[i]);
        memcpy(d + i, &u, 4);
    }
}

#if X86_F16C
/* eight contiguous float32 -> binary16; a group holding a NaN goes the exact way */
__attribute__((target("avx2,f16c"))) static inline void to_f16_8(const float *s,
                                                                  uint16_t *d)
{
    __m256 v = _mm256_loadu_ps(s);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
        to_f16_scalar(s, 1, d, 8);
        return;
    }
    _mm_storeu_si128((__m128i *)d, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* eight binary16 -> float32; a group holding a NaN goes the exact way */
__attribute__((target("avx2,f16c"))) static inline void to_f32_8(const uint16_t *s,
                                                                  float *d)
{
    __m128i h = _mm_loadu_si128((const __m128i *)s);
    __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7c00)))) {
        to_f32_scalar(s, d, 8);
        return;
    }
    _mm256_storeu_ps(d, _mm256_cvtph_ps(h));
}

__attribute__((target("avx2,f16c"))) static void to_f16_run_f16c(const float *s,
                                                                  uint16_t *d, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        to_f16_8(s + i, d + i);
    to_f16_scalar(s + i, 1, d + i, n - i);
}

__attribute__((target("avx2,f16c"))) static void to_f32_run_f16c(const uint16_t *s,
                                                                  float *d, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        to_f32_8(s + i, d + i);
    to_f32_scalar(s + i, d + i, n - i);
}
#endif

/* n contiguous values (also used by _native_ew.c) */
void to_f16_run(const float *s, uint16_t *d, Py_ssize_t n)
{
#if X86_F16C
    if (have_f16c) {
        to_f16_run_f16c(s, d, n);
        return;
    }
#endif
    to_f16_scalar(s, 1, d, n);
}

void to_f32_run(const uint16_t *s, float *d, Py_ssize_t n)
{
#if X86_F16C
    if (have_f16c) {
        to_f32_run_f16c(s, d, n);
        return;
    }
#endif
    to_f32_scalar(s, d, n);
}

int get_buf(PyObject *obj, Py_buffer *view, int flags, Py_ssize_t itemsize,
                   const char *fmt, const char *name)
{
    if (PyObject_GetBuffer(obj, view, flags | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=')
        f++;
    if (view->itemsize != itemsize || strchr(fmt, f[0]) == NULL || f[1] != 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a buffer of %zd-byte items (%s)", name,
                     itemsize, fmt);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

const char dv_f16_to_f32_doc[] =
    "f16_to_f32(src, dst)\n\nbinary16 ``src`` (2-byte items, contiguous) to float32 ``dst`` "
    "(contiguous, as many elements), exactly as numpy's cast.";

PyObject *dv_f16_to_f32(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dobj;
    Py_buffer s, d;
    if (!PyArg_ParseTuple(args, "OO", &so, &dobj))
        return NULL;
    if (get_buf(so, &s, PyBUF_C_CONTIGUOUS, 2, "eHh", "src") < 0)
        return NULL;
    if (get_buf(dobj, &d, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, 4, "f", "dst") < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    if (s.len / 2 != d.len / 4) {
        PyErr_SetString(PyExc_ValueError, "f16_to_f32: src and dst sizes differ");
    } else {
        Py_BEGIN_ALLOW_THREADS
        to_f32_run((const uint16_t *)s.buf, (float *)d.buf, s.len / 2);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

const char dv_f32_to_f16_doc[] =
    "f32_to_f16(src, dst)\n\nfloat32 ``src`` (contiguous) rounded to binary16 ``dst`` "
    "(2-byte items, contiguous, as many elements), exactly as numpy's cast.";

PyObject *dv_f32_to_f16(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dobj;
    Py_buffer s, d;
    if (!PyArg_ParseTuple(args, "OO", &so, &dobj))
        return NULL;
    if (get_buf(so, &s, PyBUF_C_CONTIGUOUS, 4, "f", "src") < 0)
        return NULL;
    if (get_buf(dobj, &d, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, 2, "eHh", "dst") < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    if (s.len / 4 != d.len / 2) {
        PyErr_SetString(PyExc_ValueError, "f32_to_f16: src and dst sizes differ");
    } else {
        Py_BEGIN_ALLOW_THREADS
        to_f16_run((const float *)s.buf, (uint16_t *)d.buf, s.len / 4);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* The chunked layout (section 1): element (n, y, x, c) of an (N, H, W, C) tensor at
 * n*W*H*C + (c & ~7)*W*H + s*cs + (c & 7), s = x*H + y (y*W + x transposed), cs the
 * chunk's width (8, or what is left for the last one). */
typedef struct {
    Py_ssize_t n, h, w, c;
    Py_ssize_t sn, sh, sw, sc;  /* strides of the float32 side, in elements */
    int transpose;
} Geometry;

/* Both walk the spatial positions in the layout's order and, at each, every chunk: the
 * float32 side is read or written contiguously, the binary16 side as one sequential
 * stream per chunk.  The F16C loops take a run of ``count`` positions per call (a call per
 * position cost more than its conversion). */
#if X86_F16C
/* positions i < count: float32 at s + i*sstep (channel stride sc) -> the nfull chunks'
 * binary16 at d + i*dstep (chunk stride 8*wh) */
__attribute__((target("avx2,f16c"))) static void pack_f16c(const float *s, Py_ssize_t sstep,
                                                            Py_ssize_t sc, uint16_t *d,
                                                            Py_ssize_t dstep, Py_ssize_t count,
                                                            Py_ssize_t nfull, Py_ssize_t wh)
{
    for (Py_ssize_t k = 0; k < nfull; k++) {  /* chunk by chunk: one output stream each */
        const float *sk = s + 8 * k * sc;
        uint16_t *dk = d + 8 * k * wh;
        if (sc == 1 && sstep == 8 && dstep == 8) {  /* one contiguous run */
            to_f16_run_f16c(sk, dk, 8 * count);
        } else if (sc == 1) {
            for (Py_ssize_t i = 0; i < count; i++)
                to_f16_8(sk + i * sstep, dk + i * dstep);
        } else {  /* eight values at stride sc: gathered, then converted at once */
            for (Py_ssize_t i = 0; i < count; i++) {
                float tmp[8];
                for (int j = 0; j < 8; j++)
                    tmp[j] = sk[i * sstep + j * sc];
                to_f16_8(tmp, dk + i * dstep);
            }
        }
    }
}

/* positions i < count: the nfull chunks' binary16 at s + 8*i -> float32 at d + i*dstep */
__attribute__((target("avx2,f16c"))) static void unpack_f16c(const uint16_t *s, float *d,
                                                              Py_ssize_t dstep,
                                                              Py_ssize_t count,
                                                              Py_ssize_t nfull, Py_ssize_t wh)
{
    for (Py_ssize_t k = 0; k < nfull; k++) {
        const uint16_t *sk = s + 8 * k * wh;
        float *dk = d + 8 * k;
        if (dstep == 8)
            to_f32_run_f16c(sk, dk, 8 * count);
        else
            for (Py_ssize_t i = 0; i < count; i++)
                to_f32_8(sk + 8 * i, dk + i * dstep);
    }
}
#endif

static inline void copy_strided(const float *s, Py_ssize_t ss, float *d, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        d[i] = s[i * ss];
}

/* count positions of the last chunk's rem (< 8) values: s + i*sstep (channel stride sc) ->
 * d + i*dstep; one loop per width, so each position's copy is unrolled */
static void gather_rem(const float *s, Py_ssize_t sstep, Py_ssize_t sc, float *d,
                       Py_ssize_t dstep, Py_ssize_t count, Py_ssize_t rem)
{
#define GATHER_REM(R)                                                                      \
    case R:                                                                                \
        for (Py_ssize_t i = 0; i < count; i++)                                             \
            for (Py_ssize_t j = 0; j < R; j++)                                             \
                d[i * dstep + j] = s[i * sstep + j * sc];                                  \
        break;
    switch (rem) {
        GATHER_REM(1) GATHER_REM(2) GATHER_REM(3) GATHER_REM(4) GATHER_REM(5) GATHER_REM(6)
        GATHER_REM(7)
    default:
        for (Py_ssize_t i = 0; i < count; i++)
            copy_strided(s + i * sstep, sc, d + i * dstep, rem);
    }
#undef GATHER_REM
}

/* float32 -> float32 in the chunked order (no conversion) */
static void chunk_all(const float *src, float *dst, const Geometry *g)
{
    Py_ssize_t whc = g->w * g->h * g->c, wh = g->w * g->h, nfull = g->c / 8;
    Py_ssize_t rem = g->c - 8 * nfull;
    Py_ssize_t outer = g->transpose ? g->h : g->w, inner = g->transpose ? g->w : g->h;
    Py_ssize_t so = g->transpose ? g->sh : g->sw, si = g->transpose ? g->sw : g->sh;
    for (Py_ssize_t n = 0; n < g->n; n++) {
        float *base = dst + n * whc;
        Py_ssize_t sp = 0;
        for (Py_ssize_t a = 0; a < outer; a++) {
            for (Py_ssize_t b = 0; b < inner; b++, sp++) {
                const float *s = src + n * g->sn + a * so + b * si;
                for (Py_ssize_t k = 0; k < nfull; k++)
                    copy_strided(s + 8 * k * g->sc, g->sc, base + 8 * k * wh + sp * 8, 8);
                if (rem)
                    copy_strided(s + 8 * nfull * g->sc, g->sc,
                                 base + 8 * nfull * wh + sp * rem, rem);
            }
        }
    }
}

static void unchunk_all(const float *src, float *dst, const Geometry *g)
{
    Py_ssize_t whc = g->w * g->h * g->c, wh = g->w * g->h, nfull = g->c / 8;
    Py_ssize_t rem = g->c - 8 * nfull;
    Py_ssize_t outer = g->transpose ? g->h : g->w, inner = g->transpose ? g->w : g->h;
    Py_ssize_t sh = g->w * g->c, sw = g->c;
    Py_ssize_t dout = g->transpose ? sh : sw, din = g->transpose ? sw : sh;
    for (Py_ssize_t n = 0; n < g->n; n++) {
        const float *base = src + n * whc;
        Py_ssize_t sp = 0;
        for (Py_ssize_t a = 0; a < outer; a++) {
            for (Py_ssize_t b = 0; b < inner; b++, sp++) {
                float *d = dst + n * whc + a * dout + b * din;
                for (Py_ssize_t k = 0; k < nfull; k++)
                    memcpy(d + 8 * k, base + 8 * k * wh + sp * 8, 32);
                if (rem)
                    memcpy(d + 8 * nfull, base + 8 * nfull * wh + sp * rem, (size_t)rem * 4);
            }
        }
    }
}

/* outer positions per block: enough for each inner step to read PACK_RUN_BYTES or more
 * in a row (at least PACK_BLOCK), while the block's staging run of the last chunk stays
 * within PACK_STAGE_BYTES */
#define PACK_BLOCK 16
#define PACK_RUN_BYTES 2048
#define PACK_STAGE_BYTES (1 << 20)

static int pack_all(const float *src, uint16_t *dst, const Geometry *g)
{
    Py_ssize_t whc = g->w * g->h * g->c, wh = g->w * g->h, nfull = g->c / 8;
    Py_ssize_t rem = g->c - 8 * nfull;
    Py_ssize_t outer = g->transpose ? g->h : g->w, inner = g->transpose ? g->w : g->h;
    Py_ssize_t so = g->transpose ? g->sh : g->sw, si = g->transpose ? g->sw : g->sh;
    int fast = 0;
#if X86_F16C
    fast = have_f16c;
#endif
    /* a source whose outer walk is the shorter stride (an NCHW tensor seen as HWC, or HWC
     * in the x-major order) is read in blocks of outer positions: each inner step then
     * reads a contiguous run per channel (a few KB: the prefetchers follow runs, not a
     * stride of short reads that crosses pages) instead of one value per cache line */
    Py_ssize_t block = 1;
    if (so < si) {
        Py_ssize_t run = so > 0 ? so * 4 : 4;
        block = PACK_RUN_BYTES / run > PACK_BLOCK ? PACK_RUN_BYTES / run : PACK_BLOCK;
        if (rem && block * inner * rem * 4 > PACK_STAGE_BYTES)
            block = PACK_STAGE_BYTES / (inner * rem * 4);
        if (block < PACK_BLOCK)
            block = PACK_BLOCK;
        if (block > outer)
            block = outer;
    }
    /* the last chunk's (rem < 8 channels) values of a block of positions are one run in
     * dst: gathered as float32 first, then converted as a whole (eight at a time) */
    float *tmp = NULL;
    if (rem && !(tmp = malloc((size_t)(block * inner * rem) * sizeof(float))))
        return -1;
    for (Py_ssize_t n = 0; n < g->n; n++) {
        uint16_t *base = dst + n * whc;
        for (Py_ssize_t a0 = 0; a0 < outer; a0 += block) {
            Py_ssize_t a1 = a0 + block < outer ? a0 + block : outer;
            const float *s0 = src + n * g->sn + a0 * so;
#if X86_F16C
            if (fast && nfull) {  /* the full chunks, a run of positions per call */
                if (block == 1)
                    pack_f16c(s0, si, g->sc, base + a0 * inner * 8, 8, inner, nfull, wh);
                else
                    for (Py_ssize_t b = 0; b < inner; b++)
                        pack_f16c(s0 + b * si, so, g->sc, base + (a0 * inner + b) * 8,
                                  inner * 8, a1 - a0, nfull, wh);
            }
#endif
            if (!fast)
                for (Py_ssize_t b = 0; b < inner; b++)
                for (Py_ssize_t a = a0; a < a1; a++) {
                    Py_ssize_t sp = a * inner + b;  /* the spatial index, layout order */
                    const float *s = s0 + (a - a0) * so + b * si;
                    for (Py_ssize_t k = 0; k < nfull; k++)
                        to_f16_scalar(s + 8 * k * g->sc, g->sc, base + 8 * k * wh + sp * 8,
                                      8);
                }
            if (!rem)
                continue;
            const float *sr = s0 + 8 * nfull * g->sc;
            uint16_t *dr = base + 8 * nfull * wh + a0 * inner * rem;
            if (block == 1 && g->sc == 1 && si == rem) {  /* one contiguous run already */
                to_f16_run(sr, dr, inner * rem);
                continue;
            }
            if (block == 1)
                gather_rem(sr, si, g->sc, tmp, rem, inner, rem);
            else
                for (Py_ssize_t b = 0; b < inner; b++)
                    gather_rem(sr + b * si, so, g->sc, tmp + b * rem, inner * rem, a1 - a0,
                               rem);
            to_f16_run(tmp, dr, (a1 - a0) * inner * rem);
        }
    }
    free(tmp);
    return 0;
}

/* outer positions per block of the unpack where the inner walk is the longer stride of dst
 * (the layout's x-major order into (H, W, C): a column of positions lands on H rows) */
#define UNPACK_BLOCK 32

/* the full chunks of outer positions [a0, a1) x every inner one, inner position by inner
 * position (each writes a run of a1 - a0 positions of dst, contiguous where dout == c,
 * instead of a column of positions a row apart: pages and cache lines used up at once) */
#if X86_F16C
__attribute__((target("avx2,f16c"))) static void unpack_block_f16c(
    const uint16_t *base, float *d0, Py_ssize_t a0, Py_ssize_t a1, Py_ssize_t inner,
    Py_ssize_t nfull, Py_ssize_t wh, Py_ssize_t dout, Py_ssize_t din)
{
    for (Py_ssize_t b = 0; b < inner; b++)
        for (Py_ssize_t a = a0; a < a1; a++) {
            const uint16_t *s = base + (a * inner + b) * 8;
            float *d = d0 + a * dout + b * din;
            for (Py_ssize_t k = 0; k < nfull; k++)
                to_f32_8(s + 8 * k * wh, d + 8 * k);
        }
}
#endif

static void unpack_block_scalar(const uint16_t *base, float *d0, Py_ssize_t a0, Py_ssize_t a1,
                                Py_ssize_t inner, Py_ssize_t nfull, Py_ssize_t wh,
                                Py_ssize_t dout, Py_ssize_t din)
{
    for (Py_ssize_t b = 0; b < inner; b++)
        for (Py_ssize_t a = a0; a < a1; a++) {
            const uint16_t *s = base + (a * inner + b) * 8;
            float *d = d0 + a * dout + b * din;
            for (Py_ssize_t k = 0; k < nfull; k++)
                to_f32_scalar(s + 8 * k * wh, d + 8 * k, 8);
        }
}

static int unpack_all(const uint16_t *src, float *dst, const Geometry *g)
{
    Py_ssize_t whc = g->w * g->h * g->c, wh = g->w * g->h, nfull = g->c / 8;
    Py_ssize_t rem = g->c - 8 * nfull;
    Py_ssize_t outer = g->transpose ? g->h : g->w, inner = g->transpose ? g->w : g->h;
    /* dst is contiguous (N, H, W, C) */
    Py_ssize_t sh = g->w * g->c, sw = g->c;
    Py_ssize_t dout = g->transpose ? sh : sw, din = g->transpose ? sw : sh;
    int fast = 0;
#if X86_F16C
    fast = have_f16c;
#endif
    /* blocks of outer positions where the inner walk strides over dst's rows */
    Py_ssize_t block = din > dout ? UNPACK_BLOCK : 1;
    if (block > outer)
        block = outer;
    /* the last chunk's values of a block of outer positions are one run in src: converted
     * as a whole (eight at a time), then scattered */
    float *tmp = NULL;
    if (rem && !(tmp = malloc((size_t)(block * inner * rem) * sizeof(float))))
        return -1;
    for (Py_ssize_t n = 0; n < g->n; n++) {
        const uint16_t *base = src + n * whc;
        float *dn = dst + n * whc;
        for (Py_ssize_t a0 = 0; a0 < outer; a0 += block) {
            Py_ssize_t a1 = a0 + block < outer ? a0 + block : outer;
            if (nfull) {
#if X86_F16C
                if (fast && block == 1)
                    unpack_f16c(base + a0 * inner * 8, dn + a0 * dout, din, inner, nfull, wh);
                else if (fast)
                    unpack_block_f16c(base, dn, a0, a1, inner, nfull, wh, dout, din);
#endif
                if (!fast)
                    unpack_block_scalar(base, dn, a0, a1, inner, nfull, wh, dout, din);
            }
            if (!rem)
                continue;
            const uint16_t *sr = base + 8 * nfull * wh + a0 * inner * rem;
            float *d0 = dn + a0 * dout + 8 * nfull;
            if (nfull == 0 && din == rem && block == 1) {  /* one contiguous run already */
                to_f32_run(sr, d0, inner * rem);
                continue;
            }
            to_f32_run(sr, tmp, (a1 - a0) * inner * rem);
            if (block == 1)
                gather_rem(tmp, rem, 1, d0, din, inner, rem);
            else  /* inner position by inner position: a run of outer ones each */
                for (Py_ssize_t b = 0; b < inner; b++)
                    gather_rem(tmp + b * rem, inner * rem, 1, d0 + b * din, dout, a1 - a0,
                               rem);
        }
    }
    free(tmp);
    return 0;
}

/* the float32 side: 4-D (N, H, W, C); strided (pack) or contiguous (unpack) */
static int geometry(Py_buffer *b, Geometry *g, int transpose)
{
    if (b->ndim != 4) {
        PyErr_SetString(PyExc_ValueError, "the float32 tensor must be 4-D (N, H, W, C)");
        return -1;
    }
    Py_ssize_t st[4];
    for (int i = 0; i < 4; i++) {
        Py_ssize_t s = b->strides ? b->strides[i] : 0;
        if (!b->strides) {
            s = 4;
            for (int k = i + 1; k < 4; k++)
                s *= b->shape[k];
        }
        if (s % 4) {
            PyErr_SetString(PyExc_ValueError, "float32 strides must be whole elements");
            return -1;
        }
        st[i] = s / 4;
    }
    *g = (Geometry){b->shape[0], b->shape[1], b->shape[2], b->shape[3],
                    st[0], st[1], st[2], st[3], transpose};
    return 0;
}

const char dv_pack_doc[] =
    "pack(src, dst, transpose)\n\nfloat32 ``src`` (N, H, W, C), any strides, into ``dst`` "
    "(contiguous, N*H*W*C elements) in the chunked layout (DWHC, or DHWC with "
    "``transpose``): rounded to binary16 (numpy's cast) for a ``dst`` of 2-byte items, "
    "copied for a float32 ``dst``.";

PyObject *dv_pack(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dobj;
    int transpose;
    Py_buffer s, d;
    Geometry g;
    if (!PyArg_ParseTuple(args, "OOp", &so, &dobj, &transpose))
        return NULL;
    if (get_buf(so, &s, PyBUF_STRIDES, 4, "f", "src") < 0)
        return NULL;
    if (PyObject_GetBuffer(dobj, &d, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    const char *f = d.format ? d.format : "B";
    if (f[0] == '<' || f[0] == '=')
        f++;
    int f32 = d.itemsize == 4 && f[0] == 'f' && !f[1];
    int f16 = d.itemsize == 2 && strchr("eHh", f[0]) && !f[1];
    if (!f32 && !f16) {
        PyErr_SetString(PyExc_TypeError, "pack: dst must hold binary16 or float32 items");
    } else if (geometry(&s, &g, transpose) == 0) {
        if (g.n * g.h * g.w * g.c != d.len / d.itemsize) {
            PyErr_SetString(PyExc_ValueError, "pack: dst does not hold N*H*W*C elements");
        } else {
            int failed = 0;
            Py_BEGIN_ALLOW_THREADS
            if (f32)
                chunk_all((const float *)s.buf, (float *)d.buf, &g);
            else
                failed = pack_all((const float *)s.buf, (uint16_t *)d.buf, &g);
            Py_END_ALLOW_THREADS
            if (failed)
                PyErr_NoMemory();
        }
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

const char dv_unpack_doc[] =
    "unpack(src, dst, transpose)\n\n``src`` (contiguous; binary16 2-byte items, or "
    "float32) in the chunked layout to float32 ``dst`` (N, H, W, C), contiguous (exact).";

PyObject *dv_unpack(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dobj;
    int transpose;
    Py_buffer s, d;
    Geometry g;
    if (!PyArg_ParseTuple(args, "OOp", &so, &dobj, &transpose))
        return NULL;
    if (PyObject_GetBuffer(so, &s, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (get_buf(dobj, &d, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_STRIDES, 4, "f",
                "dst") < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    const char *f = s.format ? s.format : "B";
    if (f[0] == '<' || f[0] == '=')
        f++;
    int f32 = s.itemsize == 4 && f[0] == 'f' && !f[1];
    int f16 = s.itemsize == 2 && strchr("eHh", f[0]) && !f[1];
    if (!f32 && !f16) {
        PyErr_SetString(PyExc_TypeError, "unpack: src must hold binary16 or float32 items");
    } else if (geometry(&d, &g, transpose) == 0) {
        if (g.n * g.h * g.w * g.c != s.len / s.itemsize) {
            PyErr_SetString(PyExc_ValueError, "unpack: src does not hold N*H*W*C elements");
        } else {
            int failed = 0;
            Py_BEGIN_ALLOW_THREADS
            if (f32)
                unchunk_all((const float *)s.buf, (float *)d.buf, &g);
            else
                failed = unpack_all((const uint16_t *)s.buf, (float *)d.buf, &g);
            Py_END_ALLOW_THREADS
            if (failed)
                PyErr_NoMemory();
        }
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/*
 * Shared by the translation units of dvsdk._native (see _native.c): exact binary16 <->
 * float32 bit conversions with numpy's semantics, and the buffer helper.
 */
#ifndef DVSDK_NATIVE_H
#define DVSDK_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The loops' results are defined operation by operation (firmware_spec/arithmetic.md): a
 * build that lets the compiler reorder, contract or flush (-ffast-math, -Ofast) or that
 * evaluates in wider precision (x87) would compute other bits. */
#if defined(__FAST_MATH__)
#error "dvsdk._native must not be built with -ffast-math / -Ofast"
#endif
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "dvsdk._native needs float and double evaluated in their own precision (no x87)"
#endif

/* whether two buffers' bytes overlap (a view of the same memory, not only the same start) */
static inline int bufs_overlap(const Py_buffer *a, const Py_buffer *b)
{
    const char *a0 = a->buf, *b0 = b->buf;
    return a->len > 0 && b->len > 0 && a0 < b0 + b->len && b0 < a0 + a->len;
}

/* The hot loops are also compiled for AVX2 / AVX-512 where the toolchain can pick the
 * variant at load time (x86-64 Linux); the results are the same bits, only wider vectors. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#define X86_F16C 1
#else
#define HOT
#define X86_F16C 0
#endif

/* float32 patterns read and written as integers where the same memory is also accessed
 * as float (the rounding of a block just computed): may_alias keeps the compiler from
 * reordering the two kinds of access (the module is also built -fno-strict-aliasing) */
#if defined(__GNUC__)
typedef uint32_t __attribute__((may_alias)) u32a;
#else
typedef uint32_t u32a;
#endif

/* float32 -> nearest binary16 (ties to even), as binary16 bits: overflow -> inf, every
 * NaN -> the canonical quiet NaN 0x7e00 (firmware_spec/arithmetic.md: a NaN's sign and
 * payload depend on the machine that made it), subnormal results rounded at 2**-24. */
#define F16_NAN 0x7e00u
static inline __attribute__((always_inline)) uint16_t f32_to_f16_bits(uint32_t f)
{
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t a = f & 0x7fffffffu;
    if (a >= 0x7f800000u)                       /* inf or NaN */
        return a == 0x7f800000u ? (uint16_t)(sign | 0x7c00u) : (uint16_t)F16_NAN;
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

static inline __attribute__((always_inline)) uint32_t f16_bits_to_f32(uint16_t h)
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

static inline int get_f32(PyObject *obj, Py_buffer *view, int writable, const char *name)
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
 * the general conversion.  With ``relu6`` (a constant: each use is its own build) ReLU6
 * comes first, on the bits: a negative value (-0 included) becomes +0 and, as the order
 * of non-negative floats is that of their bits, the clamp at 6 is an unsigned minimum
 * (act_relu6's values); a NaN, which ReLU6 keeps as it is, is one of the somethings else. */
#define ROUND_CHUNK 256

static inline __attribute__((always_inline)) uint32_t relu6_bits(uint32_t u)
{
    uint32_t x = u & ~(uint32_t)((int32_t)u >> 31);
    return x < 0x40c00000u ? x : 0x40c00000u;  /* 6.0f */
}

static inline __attribute__((always_inline)) void round_run(const u32a *s, u32a *d,
                                                             Py_ssize_t n, const int relu6)
{
    for (Py_ssize_t c0 = 0; c0 < n; c0 += ROUND_CHUNK) {
        Py_ssize_t m = n - c0 < ROUND_CHUNK ? n - c0 : ROUND_CHUNK;
        const u32a *sc = s + c0;
        u32a *dc = d + c0;
        uint32_t others = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            uint32_t u = sc[i];
            if (relu6) {
                others |= (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
                u = relu6_bits(u);
            }
            uint32_t a = u & 0x7fffffffu;
            others |= (uint32_t)(a - 1u < 0x387fffffu) | (uint32_t)(a >= 0x477ff000u);
            dc[i] = (u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u;
        }
        if (!others)
            continue;
        for (Py_ssize_t i = 0; i < m; i++) {
            uint32_t u = sc[i];
            if (relu6 && (u & 0x7fffffffu) <= 0x7f800000u)
                u = relu6_bits(u);
            uint32_t a = u & 0x7fffffffu;
            if ((a - 1u < 0x387fffffu) | (a >= 0x477ff000u))
                dc[i] = f16_bits_to_f32(f32_to_f16_bits(u));
        }
    }
}

static inline __attribute__((always_inline)) void round_block(const u32a *s, u32a *d,
                                                               Py_ssize_t n)
{
    round_run(s, d, n, 0);
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

/* The activations compiled here (ops.activation codes): 0 none, 2 leaky ReLU (slope),
 * 4 PReLU (per-channel slopes), 6 ReLU6. */
static inline int act_compiled(int act)
{
    return act == 0 || act == 2 || act == 4 || act == 6;
}

/* v[0..n) = act(v), channel of v[i] is ch0 + i (PReLU) */
static inline __attribute__((always_inline)) void act_block(float *restrict v, Py_ssize_t n, int act, float slope,
                             const float *restrict prelu)
{
    if (act == 6)
        for (Py_ssize_t i = 0; i < n; i++) v[i] = act_relu6(v[i]);
    else if (act == 2)
        for (Py_ssize_t i = 0; i < n; i++) v[i] = act_leaky(v[i], slope);
    else if (act == 4)
        for (Py_ssize_t i = 0; i < n; i++) v[i] = act_leaky(v[i], prelu[i]);
}

#define FINISH_BLOCK 4096

/* n values of y in place, in chunks that stay in registers and L1: y + b, + ad, then
 * (act >= 0) the activation and the rounding; b, ad and p (PReLU slopes) run along y */
static inline __attribute__((always_inline)) void epilogue_run(
    float *y, Py_ssize_t n, const float *restrict b, const float *restrict ad, int act,
    float slope, const float *restrict p)
{
    float v[ROUND_CHUNK];
    for (Py_ssize_t c0 = 0; c0 < n; c0 += ROUND_CHUNK) {
        Py_ssize_t k = n - c0 < ROUND_CHUNK ? n - c0 : ROUND_CHUNK;
        const float *yc = y + c0;
        if (b)
            for (Py_ssize_t i = 0; i < k; i++) v[i] = yc[i] + b[c0 + i];
        else if (k == ROUND_CHUNK)
            memcpy(v, yc, sizeof v);  /* (a fixed size: vector moves, not a string copy) */
        else
            memcpy(v, yc, (size_t)k * 4);
        if (ad)
            for (Py_ssize_t i = 0; i < k; i++) v[i] = v[i] + ad[c0 + i];
        if (act == 6) {
            round_run((const u32a *)v, (u32a *)(y + c0), k, 1);  /* ReLU6 + rounding */
        } else if (act >= 0) {
            act_block(v, k, act, slope, p ? p + c0 : NULL);
            round_block((const u32a *)v, (u32a *)(y + c0), k);
        } else {
            memcpy(y + c0, v, (size_t)k * 4);
        }
    }
}


/* an optional float32 vector argument (None allowed) of exactly n elements (_native.c) */
int opt_vec(PyObject *obj, Py_buffer *b, Py_ssize_t n, const char *name, int *got);
/* the conversions and layout moves of _native_f16.c */
PyObject *dv_f16_to_f32(PyObject *self, PyObject *args);
PyObject *dv_f32_to_f16(PyObject *self, PyObject *args);
PyObject *dv_pack(PyObject *self, PyObject *args);
PyObject *dv_unpack(PyObject *self, PyObject *args);
void dv_f16_init(void);
/* shared with _native_ew.c */
void to_f16_run(const float *s, uint16_t *d, Py_ssize_t n);
void to_f32_run(const uint16_t *s, float *d, Py_ssize_t n);
int get_buf(PyObject *obj, Py_buffer *view, int flags, Py_ssize_t itemsize, const char *fmt,
            const char *name);
/* the element-wise CPU steps of _native_ew.c */
PyObject *dv_ew_f16(PyObject *self, PyObject *args);
PyObject *dv_lookup16(PyObject *self, PyObject *args);
extern const char dv_f16_to_f32_doc[], dv_f32_to_f16_doc[], dv_pack_doc[], dv_unpack_doc[],
    dv_ew_f16_doc[], dv_lookup16_doc[];
/* the conv engine's helpers of _native_conv.c */
PyObject *dv_im2col(PyObject *self, PyObject *args);
PyObject *dv_avgpool(PyObject *self, PyObject *args);
PyObject *dv_maxpool(PyObject *self, PyObject *args);
PyObject *dv_act_elem(PyObject *self, PyObject *args);
extern const char dv_im2col_doc[], dv_avgpool_doc[], dv_maxpool_doc[], dv_act_elem_doc[];
PyObject *dv_hwc_to_chw(PyObject *self, PyObject *args);
extern const char dv_hwc_to_chw_doc[];
/* the second core (_native_team.c): fn(ctx, r0, r1, who) over chunks of [0, n), run by
 * the caller (who 0) and, when parts >= 2, by the worker thread (who 1) at once; a
 * function with scratch memory keeps one per ``who``, never per chunk (called with the
 * GIL released); the same bits either way, by the callers' construction */
typedef void (*team_fn)(void *ctx, Py_ssize_t r0, Py_ssize_t r1, int who);
void team_run(team_fn fn, void *ctx, Py_ssize_t n, int parts);
PyObject *dv_team_stats(PyObject *self, PyObject *args);
extern const char dv_team_stats_doc[];
/* the elementary functions of _native_elem.c */
PyObject *dv_elem(PyObject *self, PyObject *args);
extern const char dv_elem_doc[];
/* the fixed-order matrix product of _native_gemm.c */
PyObject *dv_gemm(PyObject *self, PyObject *args);
PyObject *dv_gemm_isa(PyObject *self, PyObject *args);
extern const char dv_gemm_doc[], dv_gemm_isa_doc[];
/* the simulator's bookkeeping of _native_sim.c (span lists, DRAM write clocks) */
PyObject *dv_span_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dv_span_remove(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dv_span_overlap(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dv_span_cover(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dv_dram_stamp(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dv_dram_version(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char dv_span_add_doc[], dv_span_remove_doc[], dv_span_overlap_doc[],
    dv_span_cover_doc[], dv_dram_stamp_doc[], dv_dram_version_doc[];
PyObject *dv_live_clip(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dv_live_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *dv_live_unpacked(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char dv_live_clip_doc[], dv_live_insert_doc[], dv_live_unpacked_doc[];

#endif

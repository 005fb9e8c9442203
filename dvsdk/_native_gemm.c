/*
 * dvsdk._native: the matrix product of the conv engine (and of the runtime's CPU steps) in
 * the fixed order of firmware_spec/arithmetic.md, so its bits are the same on every
 * machine, whatever the vector width, the tile shape or the number of threads:
 *
 *     out[i, j] = (...((0 + a[i,0]*b[0,j]) + a[i,1]*b[1,j]) + ...) + a[i,K-1]*b[K-1,j]
 *
 * each product and each add a float32 operation.  With ``fused`` the caller promises that
 * every product is exact in float32 (binary16 operands: 11 x 11 significant bits), so a
 * fused multiply-add gives the same bits as the multiply and the add, and the builds for
 * machines that have one use it (twice the multiply-adds per cycle).  numpy's version is
 * dvsdk/sim/ops.py ``matmul``.
 *
 * b comes packed (``pack_b`` in ops.py): panels of 16 columns, each (K, 16), zero-padded.
 * A tile of rows x panels keeps its sums in registers over blocks of KC steps of k (the
 * sums are stored and reloaded between blocks: float32 in memory, the same values).
 * Builds: AVX-512 (8 rows x up to 3 panels), AVX2+FMA (6 x 1), SSE2 (3 x 1) on x86-64,
 * chosen at load time (DVSDK_NATIVE_ISA=avx512|avx2|sse2 asks for a lower one: the tests
 * compare them); NEON (6 x 1) on aarch64; plain vectors elsewhere (or where built with
 * -DDVSDK_GEMM_GENERIC: the same bits, checked by hand on x86-64).
 */
#include "_native.h"

#define PANEL 16
#define KC 256
/* the most bytes of b (one block of k steps) the last block takes row tile by row tile */
#define GEMM_ROWS_FIRST (24 * 1024)

/* what follows the product on each output (the conv engine's epilogue, _native.h
 * epilogue_run): + bias[col], + addend[row, col], then for act >= 0 the activation and
 * the rounding to binary16 values */
typedef struct {
    const float *bias, *addend, *prelu;
    int act;
    float slope;
} GemmEpilogue;

/* one instruction set's build: gemm_<name> of _native_gemm_tile.h */
typedef void (*gemm_fn)(const float *, Py_ssize_t, const float *, Py_ssize_t, float *,
                        Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, int,
                        const GemmEpilogue *);
typedef struct {
    const char *name;
    gemm_fn fn;
} Build;

#if defined(__GNUC__) && defined(__x86_64__) && !defined(DVSDK_GEMM_GENERIC)
#include <immintrin.h>

#define SFX _avx512
#define TARGET __attribute__((target("avx512f")))
#define VT __m512
#define VW 16
#define LOADV(p) _mm512_loadu_ps(p)
#define STOREV(p, v) _mm512_storeu_ps((p), (v))
#define SPLAT(x) _mm512_set1_ps(x)
#define FMA(acc, a, b) _mm512_fmadd_ps((a), (b), (acc))
#define MR 8
#define NVMAX 3
#include "_native_gemm_tile.h"

#define SFX _avx2
#define TARGET __attribute__((target("avx2,fma")))
#define VT __m256
#define VW 8
#define LOADV(p) _mm256_loadu_ps(p)
#define STOREV(p, v) _mm256_storeu_ps((p), (v))
#define SPLAT(x) _mm256_set1_ps(x)
#define FMA(acc, a, b) _mm256_fmadd_ps((a), (b), (acc))
#define MR 6
#define NVMAX 1
#include "_native_gemm_tile.h"

/* x86-64's baseline: no fused multiply-add, the product and the add (the same bits) */
#define SFX _sse2
#define TARGET
#define VT __m128
#define VW 4
#define LOADV(p) _mm_loadu_ps(p)
#define STOREV(p, v) _mm_storeu_ps((p), (v))
#define SPLAT(x) _mm_set1_ps(x)
#define FMA(acc, a, b) ((acc) + (a) * (b))
#define MR 3
#define NVMAX 1
#include "_native_gemm_tile.h"

static const Build builds[] = {
    {"avx512", gemm_avx512}, {"avx2", gemm_avx2}, {"sse2", gemm_sse2}};

static int usable(int i)
{
    __builtin_cpu_init();
    if (i == 0)
        return __builtin_cpu_supports("avx512f");
    if (i == 1)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return 1;
}

#elif defined(__GNUC__) && defined(__aarch64__) && !defined(DVSDK_GEMM_GENERIC)
#include <arm_neon.h>

#define SFX _neon
#define TARGET
#define VT float32x4_t
#define VW 4
#define LOADV(p) vld1q_f32(p)
#define STOREV(p, v) vst1q_f32((p), (v))
#define SPLAT(x) vdupq_n_f32(x)
#define FMA(acc, a, b) vfmaq_f32((acc), (a), (b))
#define MR 6
#define NVMAX 1
#include "_native_gemm_tile.h"

static const Build builds[] = {{"neon", gemm_neon}};
static int usable(int i) { (void)i; return 1; }

#else
/* anything else: plain float lanes (no fused multiply-add: the same bits) */
typedef float v4f __attribute__((vector_size(16)));
static inline v4f v4_load(const float *p) { v4f v; memcpy(&v, p, 16); return v; }
static inline v4f v4_splat(float x) { return (v4f){x, x, x, x}; }
#define SFX _generic
#define TARGET
#define VT v4f
#define VW 4
#define LOADV(p) v4_load(p)
#define STOREV(p, v) memcpy((p), &(v), 16)
#define SPLAT(x) v4_splat(x)
#define FMA(acc, a, b) ((acc) + (a) * (b))
#define MR 4
#define NVMAX 1
#include "_native_gemm_tile.h"

static const Build builds[] = {{"generic", gemm_generic}};
static int usable(int i) { (void)i; return 1; }
#endif

#define NBUILDS ((int)(sizeof builds / sizeof builds[0]))
static int chosen = -1;

/* the widest build this machine runs, or the one DVSDK_NATIVE_ISA names if it runs here */
static int choose(void)
{
    if (chosen >= 0)
        return chosen;
    const char *want = getenv("DVSDK_NATIVE_ISA");
    int best = NBUILDS - 1;
    for (int i = NBUILDS - 1; i >= 0; i--)
        if (usable(i))
            best = i;
    if (want && *want)
        for (int i = best; i < NBUILDS; i++)
            if (strcmp(builds[i].name, want) == 0)
                best = i;
    chosen = best;
    return chosen;
}

const char dv_gemm_isa_doc[] =
    "gemm_isa()\n\nThe name of the matrix product's build in use (avx512, avx2, sse2, neon "
    "or generic).";

PyObject *dv_gemm_isa(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return PyUnicode_FromString(builds[choose()].name);
}

/* a part of a product for the second core: rows [lo, hi) of its rows, or (few rows) its
 * 16-column panels [lo, hi) */
#define PART_ROWS 64
typedef struct {
    gemm_fn fn;
    const float *a;
    Py_ssize_t k;
    const float *bp;
    Py_ssize_t m;
    float *c;
    Py_ssize_t r0, r1, p0, p1;
    int fused;
    const GemmEpilogue *ep;
    int by_rows;
} GemmPart;

static void gemm_part(void *ctx, Py_ssize_t lo, Py_ssize_t hi, int who)
{
    (void)who;
    const GemmPart *g = ctx;
    if (g->by_rows)
        g->fn(g->a, g->k, g->bp, g->m, g->c, g->r0 + lo, g->r0 + hi, g->p0, g->p1, g->fused,
              g->ep);
    else
        g->fn(g->a, g->k, g->bp, g->m, g->c, g->r0, g->r1, g->p0 + lo, g->p0 + hi, g->fused,
              g->ep);
}

const char dv_gemm_doc[] =
    "gemm(a, bp, out, fused, row0=0, row1=-1, panel0=0, panel1=-1, bias=None, addend=None, "
    "act=-1, slope=0, prelu=None, parts=1)\n\n"
    "``out`` (N, M) = ``a`` (N, K) @ b, each output the float32 sum of its products in the "
    "order k = 0..K-1 from +0 (firmware_spec/arithmetic.md); ``bp`` is b packed in panels of "
    "16 columns, (ceil(M/16), K, 16), zero-padded.  ``fused`` (every product exact in "
    "float32) lets the build use fused multiply-adds: the same bits.  Only rows "
    "``row0``..``row1`` and column panels ``panel0``..``panel1`` (-1: the last) are written: "
    "two threads may each write a part of one ``out``.  Then, on each finished tile, the "
    "conv epilogue (as ``epilogue``): + ``bias`` (M,), + ``addend`` (N, M), and for ``act`` "
    ">= 0 the activation (0 none, 2 leaky ReLU with ``slope``, 4 PReLU with ``prelu`` (M,), "
    "6 ReLU6) and the rounding to binary16 values.  ``parts`` 2: the rows (or, below 64 "
    "rows, the panels) in two parts, the second on the worker thread (_native_team.c).";

PyObject *dv_gemm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *oo, *biaso = Py_None, *addo = Py_None, *preluo = Py_None;
    int fused, act = -1, gb = 0, gd = 0, gp = 0, parts = 1;
    float slope = 0.0f;
    Py_ssize_t r0 = 0, r1 = -1, p0 = 0, p1 = -1;
    Py_buffer a, b, o, vb, vd, vp;
    if (!PyArg_ParseTuple(args, "OOOp|nnnnOOifOi", &ao, &bo, &oo, &fused, &r0, &r1, &p0, &p1,
                          &biaso, &addo, &act, &slope, &preluo, &parts))
        return NULL;
    if (act >= 0 && !act_compiled(act)) {
        PyErr_Format(PyExc_ValueError, "gemm: activation %d is not compiled", act);
        return NULL;
    }
    if (get_f32(ao, &a, 0, "a") < 0)
        return NULL;
    if (get_f32(bo, &b, 0, "bp") < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    if (get_f32(oo, &o, 1, "out") < 0) {
        PyBuffer_Release(&a);
        PyBuffer_Release(&b);
        return NULL;
    }
    if (a.ndim != 2 || b.ndim != 3 || o.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "gemm: a and out must be 2-D, bp 3-D");
        goto done;
    }
    Py_ssize_t n = a.shape[0], k = a.shape[1], m = o.shape[1], np_ = b.shape[0];
    if (r1 < 0 || r1 > n)
        r1 = n;
    if (p1 < 0 || p1 > np_)
        p1 = np_;
    if (o.shape[0] != n || b.shape[1] != k || b.shape[2] != PANEL
        || np_ != (m + PANEL - 1) / PANEL || r0 < 0 || r0 > r1 || p0 < 0 || p0 > p1
        || bufs_overlap(&o, &a) || bufs_overlap(&o, &b)) {
        PyErr_SetString(PyExc_ValueError, "gemm: inconsistent shapes or ranges");
        goto done;
    }
    if (opt_vec(biaso, &vb, m, "bias", &gb) < 0 || opt_vec(addo, &vd, n * m, "addend", &gd) < 0
        || opt_vec(preluo, &vp, m, "prelu", &gp) < 0)
        goto done;
    if (act == 4 && !gp) {
        PyErr_SetString(PyExc_ValueError, "gemm: PReLU needs slopes");
        goto done;
    }
    if (gd && bufs_overlap(&vd, &o)) {
        PyErr_SetString(PyExc_ValueError, "gemm: addend must not overlap out");
        goto done;
    }
    if (k == 0) {  /* no products: every sum is +0 (then the epilogue, if any) */
        for (Py_ssize_t i = r0; i < r1; i++)
            for (Py_ssize_t j = p0 * PANEL; j < m && j < p1 * PANEL; j++)
                ((float *)o.buf)[i * m + j] = 0.0f;
    }
    {
        GemmEpilogue ep = {gb ? (const float *)vb.buf : NULL, gd ? (const float *)vd.buf : NULL,
                           gp ? (const float *)vp.buf : NULL, act, slope};
        int any = gb || gd || act >= 0;
        GemmPart part = {builds[choose()].fn, (const float *)a.buf, k, (const float *)b.buf, m,
                         (float *)o.buf, r0, r1, p0, p1, fused, any ? &ep : NULL,
                         r1 - r0 >= PART_ROWS};
        Py_BEGIN_ALLOW_THREADS
        if (k > 0)
            team_run(gemm_part, &part, part.by_rows ? r1 - r0 : p1 - p0, parts);
        else if (any)
            for (Py_ssize_t i = r0; i < r1; i++) {
                Py_ssize_t c0 = p0 * PANEL, c1 = p1 * PANEL < m ? p1 * PANEL : m;
                if (c1 > c0)
                    epilogue_run((float *)o.buf + i * m + c0, c1 - c0,
                                 ep.bias ? ep.bias + c0 : NULL,
                                 ep.addend ? ep.addend + i * m + c0 : NULL, act, slope,
                                 ep.prelu ? ep.prelu + c0 : NULL);
            }
        Py_END_ALLOW_THREADS
    }
done:
    if (gp) PyBuffer_Release(&vp);
    if (gd) PyBuffer_Release(&vd);
    if (gb) PyBuffer_Release(&vb);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&o);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

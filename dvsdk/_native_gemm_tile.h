/*
 * One instruction set's build of the fixed-order matrix product (included by
 * _native_gemm.c once per instruction set, with these macros defined; it undefines them
 * at its end):
 *
 *   SFX       name suffix of the build           TARGET  its function attribute
 *   VT        vector type (float lanes)          VW      lanes per vector
 *   LOADV(p)  unaligned load                     STOREV(p, v)  unaligned store
 *   SPLAT(x)  x in every lane                    FMA(acc, a, b)  acc + a*b, fused
 *   MR        rows of a tile                     NVMAX   panels of a tile (16 columns each)
 *
 * A tile is MR rows x NVMAX panels of accumulators held in registers; each accumulator
 * takes its products in the order k = 0, 1, ..., K-1, one add per product, so the lanes,
 * the tile shape and the instruction set change nothing but speed.
 */
#define VPP (PANEL / VW)  /* vectors per panel */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

/* rows a[0..mr) (row stride lda) times panels b (panel stride kpan, k step PANEL) over kn
 * steps, into c (row stride ldc, ncols valid columns), continuing from c unless first */
static inline __attribute__((always_inline)) TARGET void FN(tile)(
    const float *restrict a, Py_ssize_t lda, const float *restrict b, Py_ssize_t kpan,
    Py_ssize_t kn, float *restrict c, Py_ssize_t ldc, Py_ssize_t ncols, int first,
    const int mr, const int nv, const int fused)
{
    VT acc[MR][NVMAX * VPP];
    float tmp[NVMAX * PANEL];
    const int full = ncols == (Py_ssize_t)nv * PANEL;
    for (int r = 0; r < mr; r++) {
        if (first) {
            for (int v = 0; v < nv * VPP; v++)
                acc[r][v] = SPLAT(0.0f);
        } else if (full) {
            for (int v = 0; v < nv * VPP; v++)
                acc[r][v] = LOADV(c + r * ldc + v * VW);
        } else {  /* a partial panel: the lanes past ncols are zeros, never read garbage */
            memcpy(tmp, c + r * ldc, (size_t)ncols * 4);
            memset(tmp + ncols, 0, (size_t)(nv * PANEL - ncols) * 4);
            for (int v = 0; v < nv * VPP; v++)
                acc[r][v] = LOADV(tmp + v * VW);
        }
    }
    for (Py_ssize_t k = 0; k < kn; k++) {
        VT bv[NVMAX * VPP];
        for (int v = 0; v < nv * VPP; v++)
            bv[v] = LOADV(b + (v / VPP) * kpan + k * PANEL + (v % VPP) * VW);
        for (int r = 0; r < mr; r++) {
            VT av = SPLAT(a[r * lda + k]);
            for (int v = 0; v < nv * VPP; v++) {
                if (fused)
                    acc[r][v] = FMA(acc[r][v], av, bv[v]);
                else
                    acc[r][v] = acc[r][v] + av * bv[v];
            }
        }
    }
    for (int r = 0; r < mr; r++) {
        if (full) {
            for (int v = 0; v < nv * VPP; v++)
                STOREV(c + r * ldc + v * VW, acc[r][v]);
        } else {
            for (int v = 0; v < nv * VPP; v++)
                STOREV(tmp + v * VW, acc[r][v]);
            memcpy(c + r * ldc, tmp, (size_t)ncols * 4);
        }
    }
}

/* one tile shape, as a function the dispatch below can name */
#define TILE_FN(m_, n_, f_)                                                                \
    static TARGET void FN(CAT(CAT(CAT(t, m_), CAT(_, n_)), CAT(_, f_)))(                   \
        const float *a, Py_ssize_t lda, const float *b, Py_ssize_t kpan, Py_ssize_t kn,    \
        float *c, Py_ssize_t ldc, Py_ssize_t ncols, int first)                             \
    {                                                                                      \
        FN(tile)(a, lda, b, kpan, kn, c, ldc, ncols, first, m_ < MR ? m_ : MR, n_, f_);    \
    }

typedef void (*FN(tile_fn))(const float *, Py_ssize_t, const float *, Py_ssize_t, Py_ssize_t,
                            float *, Py_ssize_t, Py_ssize_t, int);

#define TILE_ROWS(n_, f_)                                                                  \
    TILE_FN(1, n_, f_) TILE_FN(2, n_, f_) TILE_FN(3, n_, f_) TILE_FN(4, n_, f_)              \
    TILE_FN(5, n_, f_) TILE_FN(6, n_, f_) TILE_FN(7, n_, f_) TILE_FN(8, n_, f_)
TILE_ROWS(1, 0) TILE_ROWS(1, 1)
#if NVMAX > 1
TILE_ROWS(2, 0) TILE_ROWS(2, 1) TILE_ROWS(3, 0) TILE_ROWS(3, 1)
#endif

#define TILE_NAME(m_, n_, f_) FN(CAT(CAT(CAT(t, m_), CAT(_, n_)), CAT(_, f_)))
#define TILE_LIST(n_, f_)                                                                  \
    {TILE_NAME(1, n_, f_), TILE_NAME(2, n_, f_), TILE_NAME(3, n_, f_), TILE_NAME(4, n_, f_), \
     TILE_NAME(5, n_, f_), TILE_NAME(6, n_, f_), TILE_NAME(7, n_, f_), TILE_NAME(8, n_, f_)}

/* [fused][panels - 1][rows - 1] */
static const FN(tile_fn) FN(tiles)[2][NVMAX][8] = {
#if NVMAX > 1
    {TILE_LIST(1, 0), TILE_LIST(2, 0), TILE_LIST(3, 0)},
    {TILE_LIST(1, 1), TILE_LIST(2, 1), TILE_LIST(3, 1)},
#else
    {TILE_LIST(1, 0)},
    {TILE_LIST(1, 1)},
#endif
};

/* the epilogue on rows [i, i + mr) x columns [c0, c1) of c (row stride m), finished: one
 * call over the rows at once where they hold every column (back to back in c: the bias and
 * slopes repeated per row in brep/prep, element by element the same operations) */
static inline __attribute__((always_inline)) TARGET void FN(ep_rows)(
    float *c, Py_ssize_t m, Py_ssize_t i, int mr, Py_ssize_t c0, Py_ssize_t c1,
    const GemmEpilogue *ep, const float *brep, const float *prep)
{
    if (c0 == 0 && c1 == m && (brep || !ep->bias) && (prep || !ep->prelu)) {
        epilogue_run(c + i * m, mr * m, ep->bias ? brep : NULL,
                     ep->addend ? ep->addend + i * m : NULL, ep->act, ep->slope,
                     ep->prelu ? prep : NULL);
        return;
    }
    for (int r = 0; r < mr; r++)
        epilogue_run(c + (i + r) * m + c0, c1 - c0, ep->bias ? ep->bias + c0 : NULL,
                     ep->addend ? ep->addend + (i + r) * m + c0 : NULL, ep->act, ep->slope,
                     ep->prelu ? ep->prelu + c0 : NULL);
}

/* out rows [r0, r1) x panels [p0, p1) of a (n, k) @ b (packed); then, with an epilogue
 * (ep), each finished tile's rows through it while they are in cache.  The last block of
 * k steps, when there is one and b is small enough to stay in L1 (GEMM_ROWS_FIRST bytes),
 * goes row tile by row tile, every panel of a row tile before the next one, so the
 * epilogue takes whole rows at once (a few long runs instead of many of 16-48 values);
 * the order of the tiles changes no output's sum (each is its own, in the order k = 0..) */
static TARGET void FN(gemm)(const float *a, Py_ssize_t k, const float *bp, Py_ssize_t m,
                            float *c, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t p0,
                            Py_ssize_t p1, int fused, const GemmEpilogue *ep)
{
    Py_ssize_t kpan = k * PANEL;
    Py_ssize_t cols0 = p0 * PANEL, cols1 = p1 * PANEL < m ? p1 * PANEL : m;
    /* the bias and slopes repeated for MR rows of every column (the whole-row epilogue) */
    float *brep = NULL, *prep = NULL;
    int rows_first = k <= KC && (cols1 - cols0) * k * 4 <= GEMM_ROWS_FIRST;
    if (ep && cols0 == 0 && cols1 == m && r1 - r0 > 1
        && (rows_first || m <= NVMAX * PANEL)) {
        if (ep->bias && (brep = malloc((size_t)(MR * m) * sizeof(float))))
            for (Py_ssize_t j = 0; j < MR * m; j++)
                brep[j] = ep->bias[j % m];
        if (ep->prelu && (prep = malloc((size_t)(MR * m) * sizeof(float))))
            for (Py_ssize_t j = 0; j < MR * m; j++)
                prep[j] = ep->prelu[j % m];
    }
    for (Py_ssize_t k0 = 0; k0 < k; k0 += KC) {
        Py_ssize_t kn = k - k0 < KC ? k - k0 : KC;
        int last = k0 + kn == k;
        if (last && ep && rows_first) {
            for (Py_ssize_t i = r0; i < r1; i += MR) {
                int mr = r1 - i < MR ? (int)(r1 - i) : MR;
                for (Py_ssize_t g = p0; g < p1; g += NVMAX) {
                    int nv = p1 - g < NVMAX ? (int)(p1 - g) : NVMAX;
                    Py_ssize_t c0 = g * PANEL;
                    Py_ssize_t ncols = m - c0 < nv * PANEL ? m - c0 : nv * PANEL;
                    FN(tiles)[fused][nv - 1][mr - 1](a + i * k + k0, k,
                                                     bp + g * kpan + k0 * PANEL, kpan, kn,
                                                     c + i * m + c0, m, ncols, k0 == 0);
                }
                FN(ep_rows)(c, m, i, mr, cols0, cols1, ep, brep, prep);
            }
            continue;
        }
        for (Py_ssize_t g = p0; g < p1; g += NVMAX) {
            int nv = p1 - g < NVMAX ? (int)(p1 - g) : NVMAX;
            Py_ssize_t c0 = g * PANEL;
            Py_ssize_t ncols = m - c0 < nv * PANEL ? m - c0 : nv * PANEL;
            const float *b = bp + g * kpan + k0 * PANEL;
            for (Py_ssize_t i = r0; i < r1; i += MR) {
                int mr = r1 - i < MR ? (int)(r1 - i) : MR;
                FN(tiles)[fused][nv - 1][mr - 1](a + i * k + k0, k, b, kpan, kn,
                                                 c + i * m + c0, m, ncols, k0 == 0);
                if (last && ep)
                    FN(ep_rows)(c, m, i, mr, c0, c0 + ncols, ep, brep, prep);
            }
        }
    }
    free(brep);
    free(prep);
}

#undef VPP
#undef FN
/* the build's parameters too: the next build defines its own */
#undef SFX
#undef TARGET
#undef VT
#undef VW
#undef LOADV
#undef STOREV
#undef SPLAT
#undef FMA
#undef MR
#undef NVMAX
#undef TILE_FN
#undef TILE_ROWS
#undef TILE_NAME
#undef TILE_LIST

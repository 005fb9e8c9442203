/*
 * The depthwise correlation's common shapes (kernel width 3 or 5, horizontal stride 1 or
 * 2, no horizontal dilation), included by _native.c after DwArgs: a group of up to DW_PX
 * output pixels of one row, 16 (or 8) channels at a time, swept input column by input
 * column.  Each input vector is loaded once per kernel row and feeds every pixel whose
 * window holds it (pixel p takes column q with tap j = q - p*sx), instead of once per
 * (pixel, tap): up to kx times fewer loads, and no per-pixel address arithmetic.
 *
 * The same operations in the same order as dw_pixels (firmware_spec/arithmetic.md
 * "Multiply-accumulate"): each pixel's sum starts at +0 and takes its taps in row-major
 * order (kernel rows in order; within a row, the columns in ascending q are the taps in
 * ascending j), each product ``x * w`` rounded before its add ``acc + product``; a padded
 * position reads a zero from the zeros row and takes its turn; then + bias.
 */
#ifndef DVSDK_NATIVE_DW_H
#define DVSDK_NATIVE_DW_H

#if DW_VECTOR

/* the most input columns a group reads in one kernel row: (DW_PX - 1) * 2 + 5 */
#define DWS_MAXQ 19

/* V (L float lanes) accumulators of np pixels over channels [ch, ch + L): cols[i * nq + q]
 * is input column q of kernel row i (a zeros row where padded) */
#define DWS_BODY(V, L)                                                                     \
    {                                                                                      \
        V acc[DW_PX];                                                                      \
        for (int p = 0; p < np; p++)                                                       \
            acc[p] = (V){0};                                                               \
        for (Py_ssize_t i = 0; i < a->ky; i++) {                                           \
            V wk[5];                                                                       \
            for (int j = 0; j < kx; j++)                                                   \
                wk[j] = LOADV(V, a->wt + (i * kx + j) * c + ch);                           \
            const float *const *ci = cols + i * nq;                                        \
            _Pragma("GCC unroll 19") for (int q = 0; q < nq; q++)                          \
            {                                                                              \
                V v = LOADV(V, ci[q] + ch);                                                \
                _Pragma("GCC unroll 5") for (int j = 0; j < kx; j++)                       \
                {                                                                          \
                    int d = q - j;                                                         \
                    if (d >= 0 && d % sx == 0 && d / sx < np)                              \
                        acc[d / sx] = acc[d / sx] + v * wk[j];                             \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
        V b = LOADV(V, a->bias + ch);                                                      \
        for (int p = 0; p < np; p++) {                                                     \
            acc[p] = acc[p] + b;                                                           \
            memcpy(outs[p] + ch, &acc[p], sizeof acc[p]);                                  \
        }                                                                                  \
    }

/* channels [0, c16) (a multiple of 8) in blocks of 16 (wide: one 16-lane vector each,
 * where the machine has them), then of 8 */
static inline __attribute__((always_inline)) void dws_group(
    const DwArgs *a, const float *const *cols, float **outs, Py_ssize_t c16, const int np,
    const int kx, const int sx, const int wide)
{
    Py_ssize_t c = a->c;
    const int nq = (np - 1) * sx + kx;
    Py_ssize_t ch = 0;
    if (wide)
        for (; ch + 16 <= c16; ch += 16)
            DWS_BODY(v16f, 16)
    for (; ch < c16; ch += 8)
        DWS_BODY(v8f, 8)
}

/* (kx, sx) of the shapes compiled here, 0 for the others */
static inline __attribute__((always_inline)) int dws_shape(const DwArgs *a)
{
    if (a->dx != 1 || (a->kx != 3 && a->kx != 5) || (a->sx != 1 && a->sx != 2) || a->ky > 5)
        return 0;
    return (int)(a->kx * 10 + a->sx);
}

/* whether 16-lane vectors are the machine's own (else 8-lane ones: the accumulators of a
 * group stay in registers); the same bits either way.  DVSDK_NATIVE_ISA=avx2 or sse2 (as
 * for the matrix product) asks for the 8-lane ones: the tests compare the two */
static int dws_wide_flag = -1;

/* (called by the depthwise entry, outside the clones: it calls the CPU probe) */
static void dws_init(void)
{
    if (dws_wide_flag >= 0)
        return;
    int w = 0;
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    w = __builtin_cpu_supports("avx512f");
#endif
    const char *want = getenv("DVSDK_NATIVE_ISA");
    if (want && (strcmp(want, "avx2") == 0 || strcmp(want, "sse2") == 0))
        w = 0;
    dws_wide_flag = w;
}

#define DWS_CASES(K, S, W)                                                                 \
    switch (np) {                                                                          \
    case 8: dws_group(a, cols, outs, c16, 8, K, S, W); break;                              \
    case 7: dws_group(a, cols, outs, c16, 7, K, S, W); break;                              \
    case 6: dws_group(a, cols, outs, c16, 6, K, S, W); break;                              \
    case 5: dws_group(a, cols, outs, c16, 5, K, S, W); break;                              \
    case 4: dws_group(a, cols, outs, c16, 4, K, S, W); break;                              \
    case 3: dws_group(a, cols, outs, c16, 3, K, S, W); break;                              \
    case 2: dws_group(a, cols, outs, c16, 2, K, S, W); break;                              \
    default: dws_group(a, cols, outs, c16, 1, K, S, W); break;                             \
    }

/* pixels ox0 .. ox0 + np - 1 of output row oy, channels [0, c16) with c16 the channels in
 * whole 8-lane vectors; returns c16 (0: a shape this does not take, or fewer than 8
 * channels): dw_pixels does the rest.  Inlined in depthwise_rows' builds (a clone calling
 * another function of the module would run its baseline build) */
static inline __attribute__((always_inline)) Py_ssize_t dws_pixels(const DwArgs *a, Py_ssize_t oy, Py_ssize_t ox0, int np,
                                 float **outs, int shape, int wide)
{
    Py_ssize_t c16 = a->c & ~(Py_ssize_t)7;
    if (!shape || c16 == 0)
        return 0;
    const int kx = (int)a->kx, sx = a->sx, nq = (np - 1) * sx + kx;
    const float *cols[5 * DWS_MAXQ];
    Py_ssize_t ix0 = ox0 * sx - a->pl;
    for (Py_ssize_t i = 0; i < a->ky; i++) {
        Py_ssize_t iy = oy * a->sy - a->pt + i * a->dy;
        int row_in = iy >= 0 && iy < a->h;
        for (int q = 0; q < nq; q++) {
            Py_ssize_t ix = ix0 + q;
            cols[i * nq + q] = row_in && ix >= 0 && ix < a->w
                ? a->x + (iy * a->w + ix) * a->c : a->zeros;
        }
    }
    if (wide) {
        switch (shape) {
        case 31: DWS_CASES(3, 1, 1) break;
        case 32: DWS_CASES(3, 2, 1) break;
        case 51: DWS_CASES(5, 1, 1) break;
        default: DWS_CASES(5, 2, 1) break;
        }
    } else {
        switch (shape) {
        case 31: DWS_CASES(3, 1, 0) break;
        case 32: DWS_CASES(3, 2, 0) break;
        case 51: DWS_CASES(5, 1, 0) break;
        default: DWS_CASES(5, 2, 0) break;
        }
    }
    return c16;
}

#undef DWS_CASES
#endif /* DW_VECTOR */
#endif

/*
 * The elementary functions of dvsdk/hw/elementary.py, compiled: the same float64
 * operations in the same order (built without contraction, so each multiply and add is
 * rounded as numpy rounds it), so the same bits.  See that module for the method.
 */
#ifndef DVSDK_NATIVE_ELEM_H
#define DVSDK_NATIVE_ELEM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define EL_LN2_HI 0x1.62e42feep-1
#define EL_LN2_LO 0x1.a39ef35793c76p-33
#define EL_INV_LN2 0x1.71547652b82fep+0  /* 1.0 / math.log(2.0) in Python */
#define EL_EXP_LIMIT 750.0

/* 1/n!, n = 0..14, as Python's 1 / math.factorial(n) rounds them */
static const double el_inv_fact[15] = {
    1.0, 1.0, 0.5, 0x1.5555555555555p-3, 0x1.5555555555555p-5, 0x1.1111111111111p-7,
    0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-16,
    0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22, 0x1.ae64567f544e4p-26,
    0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33, 0x1.93974a8c07c9dp-37};

/* 2**k for integer-valued k in [-1022, 1023], exact: k's integer read from the low bits
 * of k + 1.5 * 2**52 (no float-to-integer conversion, which AVX2 has no vector form of) */
static inline __attribute__((always_inline)) double el_pow2(double k)
{
    double t = k + 0x1.8p52;
    uint64_t u, magic;
    double m = 0x1.8p52;
    memcpy(&u, &t, 8);
    memcpy(&magic, &m, 8);
    u = (u - magic + 1023u) << 52;
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Branch-free (the loops that call these vectorize): special inputs are selected at the
 * end, both polynomials of expm1 are computed, as the numpy version does. */
static inline __attribute__((always_inline)) double el_exp(double x)
{
    double xs = x < -EL_EXP_LIMIT ? -EL_EXP_LIMIT : (x > EL_EXP_LIMIT ? EL_EXP_LIMIT : x);
    xs = x != x ? 0.0 : xs;
    double k = rint(xs * EL_INV_LN2);
    double r = (xs - k * EL_LN2_HI) - k * EL_LN2_LO;
    double p = el_inv_fact[13];
    for (int n = 12; n >= 0; n--)
        p = p * r + el_inv_fact[n];
    double k1 = floor(k * 0.5);
    double y = (p * el_pow2(k1)) * el_pow2(k - k1);
    return x != x ? x : y;
}

static inline __attribute__((always_inline)) double el_expm1(double x)
{
    double q = el_inv_fact[14];
    for (int n = 13; n >= 1; n--)
        q = q * x + el_inv_fact[n];
    double small = q * x;
    double big = el_exp(x) - 1.0;
    return fabs(x) <= EL_LN2_HI * 0.5 ? small : big;
}

static inline __attribute__((always_inline)) double el_tanh(double x)
{
    double t = el_expm1(-2.0 * fabs(x));
    return copysign(-t / (t + 2.0), x);
}

static inline __attribute__((always_inline)) double el_sigmoid(double x)
{
    return 1.0 / (1.0 + el_exp(-x));
}

/* 1/(2n+1), n = 1..12, as Python rounds them */
static const double el_inv_odd[12] = {
    0x1.5555555555555p-2, 0x1.999999999999ap-3, 0x1.2492492492492p-3, 0x1.c71c71c71c71cp-4,
    0x1.745d1745d1746p-4, 0x1.3b13b13b13b14p-4, 0x1.1111111111111p-4, 0x1.e1e1e1e1e1e1ep-5,
    0x1.af286bca1af28p-5, 0x1.8618618618618p-5, 0x1.642c8590b2164p-5, 0x1.47ae147ae147bp-5};
#define EL_SQRT_HALF 0x1.6a09e667f3bcdp-1

/* log x: frexp by the bits (a subnormal scaled by 2**54 first: exact), then as
 * elementary.log */
static inline __attribute__((always_inline)) double el_log(double x)
{
    int pos = x > 0.0 && x < INFINITY;
    double v = pos ? x : 1.0;
    int sub = v < 0x1p-1022;
    v = sub ? v * 0x1p54 : v;
    uint64_t u;
    memcpy(&u, &v, 8);
    double e = (double)((int64_t)((u >> 52) & 0x7ffu) - 1022) - (sub ? 54.0 : 0.0);
    u = (u & 0x800fffffffffffffull) | 0x3fe0000000000000ull;  /* m in [0.5, 1) */
    double m;
    memcpy(&m, &u, 8);
    int low = m < EL_SQRT_HALF;
    m = low ? m * 2.0 : m;
    e = low ? e - 1.0 : e;
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double acc = el_inv_odd[11];
    for (int n = 10; n >= 0; n--)
        acc = acc * z + el_inv_odd[n];
    double lm = 2.0 * s + (2.0 * s) * (z * acc);
    double y = e * EL_LN2_HI + (lm + e * EL_LN2_LO);
    y = x == 0.0 ? -INFINITY : y;
    y = x == INFINITY ? INFINITY : y;
    return pos || x == 0.0 || x == INFINITY ? y : NAN;
}

#endif

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

#endif

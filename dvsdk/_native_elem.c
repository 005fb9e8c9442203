/*
 * dvsdk._native: the elementary functions of dvsdk/hw/elementary.py over whole arrays
 * (the runtime's CPU steps: Exp, Log, Tanh, Sigmoid, ... and the compiler's reference
 * interpreter), the same float64 operations in the same order (_native_elem.h), vectorized.
 */
#include "_native.h"
#include "_native_elem.h"

enum { EL_EXP = 0, EL_EXPM1 = 1, EL_TANH = 2, EL_SIGMOID = 3, EL_LOG = 4 };

#define EL_LOOP(F)                                                                         \
    for (Py_ssize_t i = 0; i < n; i++)                                                     \
        y[i] = F(x[i]);

HOT __attribute__((optimize("no-trapping-math"))) static void elem_all(
    int fn, const double *restrict x, double *restrict y, Py_ssize_t n)
{
    switch (fn) {
    case EL_EXP: EL_LOOP(el_exp) break;
    case EL_EXPM1: EL_LOOP(el_expm1) break;
    case EL_TANH: EL_LOOP(el_tanh) break;
    case EL_SIGMOID: EL_LOOP(el_sigmoid) break;
    default: EL_LOOP(el_log) break;
    }
}

/* float32 in and out: each value widened to float64, f computed as above, the result
 * rounded to float32 as numpy's cast rounds it (what elementary.f(x).astype(float32)
 * gives, without the two float64 arrays) */
#define EL_LOOP32(F)                                                                       \
    for (Py_ssize_t i = 0; i < n; i++)                                                     \
        y[i] = (float)F((double)x[i]);

HOT __attribute__((optimize("no-trapping-math"))) static void elem_all32(
    int fn, const float *restrict x, float *restrict y, Py_ssize_t n)
{
    switch (fn) {
    case EL_EXP: EL_LOOP32(el_exp) break;
    case EL_EXPM1: EL_LOOP32(el_expm1) break;
    case EL_TANH: EL_LOOP32(el_tanh) break;
    case EL_SIGMOID: EL_LOOP32(el_sigmoid) break;
    default: EL_LOOP32(el_log) break;
    }
}

const char dv_elem_doc[] =
    "elem(fn, x, y)\n\n``y`` = f(``x``), both float64 of one size: fn 0 exp, 1 expm1, 2 tanh, "
    "3 sigmoid, 4 log, as dvsdk.hw.elementary computes them; or both float32: f of each "
    "value widened to float64, rounded to float32.  ``y`` may be ``x`` itself (element by "
    "element: each value is read before its result is written).";

PyObject *dv_elem(PyObject *self, PyObject *args)
{
    (void)self;
    int fn;
    PyObject *xo, *yo;
    Py_buffer x, y;
    if (!PyArg_ParseTuple(args, "iOO", &fn, &xo, &yo))
        return NULL;
    if (fn < EL_EXP || fn > EL_LOG) {
        PyErr_Format(PyExc_ValueError, "elem: unknown function %d", fn);
        return NULL;
    }
    if (PyObject_GetBuffer(xo, &x, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    int f32 = x.itemsize == 4;  /* float32 (checked below), else float64 */
    PyBuffer_Release(&x);
    if (get_buf(xo, &x, PyBUF_C_CONTIGUOUS, f32 ? 4 : 8, f32 ? "f" : "d", "x") < 0)
        return NULL;
    if (get_buf(yo, &y, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, f32 ? 4 : 8, f32 ? "f" : "d",
                "y") < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    if (x.len != y.len) {
        PyErr_SetString(PyExc_ValueError, "elem: x and y sizes differ");
    } else {
        Py_BEGIN_ALLOW_THREADS
        if (f32)
            elem_all32(fn, (const float *)x.buf, (float *)y.buf, x.len / 4);
        else
            elem_all(fn, (const double *)x.buf, (double *)y.buf, x.len / 8);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

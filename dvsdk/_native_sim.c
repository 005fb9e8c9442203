/*
 * The simulator's per-command bookkeeping (dvsdk/sim/dram.py, dvsdk/sim/device.py): byte
 * span lists, the DRAM write clocks and the live ranges of the DRAM's stored tensors.
 * Each function is the compiled twin of a Python function that stays the reference and
 * the fallback (dvsdk/sim/spans.py, Dram._stamp and Dram.version, dram.live_clip,
 * live_insert and live_unpacked); they return the same values, only without the
 * interpreter's per-call cost (a few of them run for every command of every kick).
 *
 * A span list is a Python list of (start, end) tuples of ints: half-open byte ranges,
 * sorted and disjoint (and, for span_add, not touching).
 */
#include "_native.h"

/* spans[i] as (s, e); 0, or -1 with an exception (not a 2-tuple of ints) */
static int span_at(PyObject *spans, Py_ssize_t i, Py_ssize_t *s, Py_ssize_t *e)
{
    PyObject *t = PyList_GET_ITEM(spans, i);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) {
        PyErr_SetString(PyExc_TypeError, "a span is a (start, end) tuple");
        return -1;
    }
    *s = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 0));
    if (*s == -1 && PyErr_Occurred())
        return -1;
    *e = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
    if (*e == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

static PyObject *pair(Py_ssize_t a, Py_ssize_t b)
{
    return Py_BuildValue("(nn)", a, b);
}

/* (spans, a, b): the list and the two ints; 0 or -1 with an exception */
static int span_args(PyObject *const *args, Py_ssize_t nargs, const char *name,
                     PyObject **spans, Py_ssize_t *a, Py_ssize_t *b)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s takes (spans, start, end)", name);
        return -1;
    }
    if (!PyList_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s: spans must be a list", name);
        return -1;
    }
    *spans = args[0];
    *a = PyLong_AsSsize_t(args[1]);
    if (*a == -1 && PyErr_Occurred())
        return -1;
    *b = PyLong_AsSsize_t(args[2]);
    if (*b == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

const char dv_span_add_doc[] =
    "span_add(spans, a, b) -> list: spans (sorted, disjoint, not touching) with [a, b) "
    "merged in, as a new list, or spans itself where it covers [a, b) already "
    "(sim.spans.add_span).";

PyObject *dv_span_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *spans;
    Py_ssize_t a, b, s, e, n, i, j, lo, hi;
    if (span_args(args, nargs, "span_add", &spans, &a, &b) < 0)
        return NULL;
    n = PyList_GET_SIZE(spans);
    lo = 0, hi = n;  /* the first span that starts at or after a (bisect on (a, a)) */
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (span_at(spans, mid, &s, &e) < 0)
            return NULL;
        if (s < a || (s == a && e < a))
            lo = mid + 1;
        else
            hi = mid;
    }
    i = lo;
    if (i) {
        if (span_at(spans, i - 1, &s, &e) < 0)
            return NULL;
        if (e >= a)
            i--;
    }
    if (i < n) {
        if (span_at(spans, i, &s, &e) < 0)
            return NULL;
        if (s <= a && b <= e) {
            Py_INCREF(spans);
            return spans;  /* already covered */
        }
    }
    for (j = i; j < n; j++) {
        if (span_at(spans, j, &s, &e) < 0)
            return NULL;
        if (s > b)
            break;
    }
    if (i < j) {
        if (span_at(spans, i, &s, &e) < 0)
            return NULL;
        if (s < a)
            a = s;
        if (span_at(spans, j - 1, &s, &e) < 0)
            return NULL;
        if (e > b)
            b = e;
    }
    PyObject *out = PyList_New(i + 1 + (n - j));
    if (!out)
        return NULL;
    for (Py_ssize_t k = 0; k < i; k++) {
        PyObject *t = PyList_GET_ITEM(spans, k);
        Py_INCREF(t);
        PyList_SET_ITEM(out, k, t);
    }
    PyObject *t = pair(a, b);
    if (!t) {
        Py_DECREF(out);
        return NULL;
    }
    PyList_SET_ITEM(out, i, t);
    for (Py_ssize_t k = j; k < n; k++) {
        PyObject *u = PyList_GET_ITEM(spans, k);
        Py_INCREF(u);
        PyList_SET_ITEM(out, i + 1 + (k - j), u);
    }
    return out;
}

const char dv_span_remove_doc[] =
    "span_remove(spans, a, b) -> list: spans minus [a, b), as a new list "
    "(sim.spans.remove_span).";

PyObject *dv_span_remove(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *spans;
    Py_ssize_t a, b, s, e;
    if (span_args(args, nargs, "span_remove", &spans, &a, &b) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(spans); k++) {
        if (span_at(spans, k, &s, &e) < 0)
            goto fail;
        if (e <= a || s >= b) {
            if (PyList_Append(out, PyList_GET_ITEM(spans, k)) < 0)
                goto fail;
            continue;
        }
        for (int side = 0; side < 2; side++) {
            if (side == 0 ? s < a : e > b) {
                PyObject *t = side == 0 ? pair(s, a) : pair(b, e);
                if (!t || PyList_Append(out, t) < 0) {
                    Py_XDECREF(t);
                    goto fail;
                }
                Py_DECREF(t);
            }
        }
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

const char dv_span_overlap_doc[] =
    "span_overlap(spans, a, b) -> (lo, hi) or None: the part of [a, b) in the first span "
    "that overlaps it (sim.spans.first_overlap).";

PyObject *dv_span_overlap(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *spans;
    Py_ssize_t a, b, s, e;
    if (span_args(args, nargs, "span_overlap", &spans, &a, &b) < 0)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(spans); k++) {
        if (span_at(spans, k, &s, &e) < 0)
            return NULL;
        if (s < b && a < e)
            return pair(s > a ? s : a, e < b ? e : b);
    }
    Py_RETURN_NONE;
}

const char dv_span_cover_doc[] =
    "span_cover(spans, a, b) -> (first, last) or None: the first to the last byte of "
    "[a, b) that spans cover (sim.spans.covered).";

PyObject *dv_span_cover(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *spans;
    Py_ssize_t a, b, s, e, first = 0, last = 0;
    int hit = 0;
    if (span_args(args, nargs, "span_cover", &spans, &a, &b) < 0)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(spans); k++) {
        if (span_at(spans, k, &s, &e) < 0)
            return NULL;
        if (s < b && a < e) {
            if (!hit)
                first = s > a ? s : a;
            last = e < b ? e : b;
            hit = 1;
        }
    }
    if (!hit)
        Py_RETURN_NONE;
    return pair(first, last);
}

HOT static void fill_clock(uint64_t *restrict d, Py_ssize_t n, uint64_t c)
{
    for (Py_ssize_t i = 0; i < n; i++)
        d[i] = c;
}

HOT static uint64_t max_clock(const uint64_t *restrict s, Py_ssize_t n)
{
    uint64_t m[4] = {0, 0, 0, 0};
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            m[k] = s[i + k] > m[k] ? s[i + k] : m[k];
    for (; i < n; i++)
        m[0] = s[i] > m[0] ? s[i] : m[0];
    m[0] = m[1] > m[0] ? m[1] : m[0];
    m[2] = m[3] > m[2] ? m[3] : m[2];
    return m[2] > m[0] ? m[2] : m[0];
}

/* the uint64 line clock array (C-contiguous, writable) */
static int clock_buf(PyObject *obj, Py_buffer *v)
{
    return get_buf(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE, 8, "QL",
                   "line clock");
}

const char dv_dram_stamp_doc[] =
    "dram_stamp(lines, pages, subs, off, n, clock, line_shift, page_shift, sub_shift): a "
    "store of n > 0 bytes at DRAM offset off at clock (larger than every clock so far): the "
    "line clocks (uint64 array) and the page and sub-page clocks (lists of int) of its "
    "bytes take it (Dram._stamp, the line clocks at once instead of pending).";

PyObject *dv_dram_stamp(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "dram_stamp takes 9 arguments");
        return NULL;
    }
    PyObject *pages = args[1], *subs = args[2], *clock = args[5];
    Py_ssize_t off = PyLong_AsSsize_t(args[3]), n = PyLong_AsSsize_t(args[4]);
    long ls = PyLong_AsLong(args[6]), ps = PyLong_AsLong(args[7]), ss = PyLong_AsLong(args[8]);
    unsigned long long c = PyLong_AsUnsignedLongLong(clock);
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_Check(pages) || !PyList_Check(subs) || off < 0 || n <= 0 || ls < 0 ||
        ls > 30 || ps < 0 || ps > 30 || ss < 0 || ss > 30) {
        PyErr_SetString(PyExc_ValueError, "dram_stamp: bad arguments");
        return NULL;
    }
    Py_ssize_t last = off + n - 1;
    Py_ssize_t p0 = off >> ps, p1 = last >> ps, s0 = off >> ss, s1 = last >> ss;
    if (p1 >= PyList_GET_SIZE(pages) || s1 >= PyList_GET_SIZE(subs)) {
        PyErr_SetString(PyExc_IndexError, "dram_stamp: range past the page clocks");
        return NULL;
    }
    Py_buffer v;
    if (clock_buf(args[0], &v) < 0)
        return NULL;
    Py_ssize_t l0 = off >> ls, l1 = (last >> ls) + 1;
    if (l1 > v.len / 8) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_IndexError, "dram_stamp: range past the line clocks");
        return NULL;
    }
    fill_clock((uint64_t *)v.buf + l0, l1 - l0, c);  /* (clocks only grow: c is the max) */
    PyBuffer_Release(&v);
    for (Py_ssize_t i = p0; i <= p1; i++) {
        Py_INCREF(clock);
        PyList_SetItem(pages, i, clock);
    }
    for (Py_ssize_t i = s0; i <= s1; i++) {
        Py_INCREF(clock);
        PyList_SetItem(subs, i, clock);
    }
    Py_RETURN_NONE;
}

const char dv_dram_version_doc[] =
    "dram_version(lines, off, n, line_shift) -> int: the largest line clock over the n > 0 "
    "bytes at DRAM offset off (Dram.version with no store pending).";

PyObject *dv_dram_version(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "dram_version takes 4 arguments");
        return NULL;
    }
    Py_ssize_t off = PyLong_AsSsize_t(args[1]), n = PyLong_AsSsize_t(args[2]);
    long ls = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (off < 0 || n <= 0 || ls < 0 || ls > 30) {
        PyErr_SetString(PyExc_ValueError, "dram_version: bad arguments");
        return NULL;
    }
    Py_buffer v;
    if (clock_buf(args[0], &v) < 0)
        return NULL;
    Py_ssize_t l0 = off >> ls, l1 = ((off + n - 1) >> ls) + 1;
    if (l1 > v.len / 8) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_IndexError, "dram_version: range past the line clocks");
        return NULL;
    }
    uint64_t m = max_clock((const uint64_t *)v.buf + l0, l1 - l0);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLongLong(m);
}

/*
 * The live byte ranges of the DRAM's stored tensors (Dram._starts, _ends, _owners): three
 * parallel lists, sorted and disjoint ranges [starts[k], ends[k]) of ints, owners[k] the
 * tensor (a StoredTensor: only its ``packed`` attribute is read here).  The twins of
 * dvsdk/sim/dram.py's live_clip and live_insert.
 */

/* (starts, ends, owners): three lists of one length; 0, or -1 with an exception */
static int live_lists(PyObject *const *args, const char *name, Py_ssize_t *n)
{
    for (int k = 0; k < 3; k++) {
        if (!PyList_Check(args[k])) {
            PyErr_Format(PyExc_TypeError, "%s: starts, ends and owners must be lists", name);
            return -1;
        }
    }
    *n = PyList_GET_SIZE(args[0]);
    if (PyList_GET_SIZE(args[1]) != *n || PyList_GET_SIZE(args[2]) != *n) {
        PyErr_Format(PyExc_ValueError, "%s: starts, ends and owners differ in length", name);
        return -1;
    }
    return 0;
}

/* The arguments every live_* function starts with, (starts, ends, owners, a, b, ...):
   ``nargs`` must be ``want``; the three lists checked, ``n`` their length, ``a`` and ``b``
   the range. 0, or -1 with an exception. */
static int live_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                     const char *name, const char *usage, Py_ssize_t *n, Py_ssize_t *a,
                     Py_ssize_t *b)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %s", name, usage);
        return -1;
    }
    if (live_lists(args, name, n) < 0)
        return -1;
    if (!PyLong_Check(args[3]) || !PyLong_Check(args[4])) {
        PyErr_Format(PyExc_TypeError, "%s: a and b must be ints", name);
        return -1;
    }
    *a = PyLong_AsSsize_t(args[3]);
    if (*a == -1 && PyErr_Occurred())
        return -1;
    *b = PyLong_AsSsize_t(args[4]);
    return *b == -1 && PyErr_Occurred() ? -1 : 0;
}

/* list[k] as an index-sized int; 0, or -1 with an exception (not an int) */
static int int_at(PyObject *list, Py_ssize_t k, Py_ssize_t *v)
{
    PyObject *o = PyList_GET_ITEM(list, k);
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "a live range bound must be an int");
        return -1;
    }
    *v = PyLong_AsSsize_t(o);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* bisect.bisect_right (right = 1) or bisect_left (0) of x in the ints list[lo:hi] */
static int bisect_ints(PyObject *list, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t x, int right,
                       Py_ssize_t *out)
{
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2, v;
        if (int_at(list, mid, &v) < 0)
            return -1;
        if (right ? x < v : x <= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    *out = lo;
    return 0;
}

/* whether owner.packed is None; 1, 0, or -1 with an exception */
static int unpacked(PyObject *owner)
{
    static PyObject *name = NULL;
    if (!name && !(name = PyUnicode_InternFromString("packed")))
        return -1;
    PyObject *p = PyObject_GetAttr(owner, name);
    if (!p)
        return -1;
    int none = p == Py_None;
    Py_DECREF(p);
    return none;
}

const char dv_live_clip_doc[] =
    "live_clip(starts, ends, owners, a, b) -> list or None: [a, b) is about to be "
    "overwritten whole: the live ranges that overlap it are taken out of the three lists, "
    "except the part before a of the first and the part after b of the last where their "
    "owner's ``packed`` is None (not written out); returns the owners of the ranges taken "
    "(in order, an owner once per range), or None where no range overlaps "
    "(sim.dram.live_clip).";

PyObject *dv_live_clip(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n, a, b, i, j, s_first, e_last;
    if (live_args(args, nargs, 5, "live_clip", "(starts, ends, owners, a, b)", &n, &a,
                  &b) < 0)
        return NULL;
    PyObject *starts = args[0], *ends = args[1], *owners = args[2];
    if (bisect_ints(ends, 0, n, a, 1, &i) < 0 || bisect_ints(starts, i, n, b, 0, &j) < 0)
        return NULL;
    if (i >= j)
        Py_RETURN_NONE;
    /* everything read before anything changes: an error leaves the lists as they were */
    if (int_at(starts, i, &s_first) < 0 || int_at(ends, j - 1, &e_last) < 0)
        return NULL;
    PyObject *first = PyList_GET_ITEM(owners, i), *last = PyList_GET_ITEM(owners, j - 1);
    int keep_head = 0, keep_tail = 0;
    Py_INCREF(first), Py_INCREF(last);  /* (getattr may run Python code) */
    if (s_first < a)
        keep_head = unpacked(first);
    if (keep_head >= 0 && e_last > b)
        keep_tail = unpacked(last);
    int changed = PyList_GET_SIZE(starts) != n || PyList_GET_SIZE(ends) != n ||
        PyList_GET_SIZE(owners) != n || PyList_GET_ITEM(owners, i) != first ||
        PyList_GET_ITEM(owners, j - 1) != last;
    Py_DECREF(first), Py_DECREF(last);
    if (keep_head < 0 || keep_tail < 0)
        return NULL;
    if (changed) {
        PyErr_SetString(PyExc_RuntimeError, "live_clip: the lists changed while it ran");
        return NULL;
    }
    PyObject *hit = PyList_GetSlice(owners, i, j);
    if (!hit)
        return NULL;
    Py_ssize_t k = keep_head + keep_tail;
    PyObject *ks = PyList_New(k), *ke = PyList_New(k), *ko = PyList_New(k);
    if (!ks || !ke || !ko)
        goto fail;
    Py_ssize_t m = 0;
    if (keep_head) {  /* [starts[i], a) of the first */
        PyObject *s0 = PyList_GET_ITEM(starts, i);
        Py_INCREF(s0), Py_INCREF(args[3]), Py_INCREF(first);
        PyList_SET_ITEM(ks, m, s0), PyList_SET_ITEM(ke, m, args[3]);
        PyList_SET_ITEM(ko, m, first);
        m++;
    }
    if (keep_tail) {  /* [b, ends[j-1]) of the last */
        PyObject *e0 = PyList_GET_ITEM(ends, j - 1);
        Py_INCREF(args[4]), Py_INCREF(e0), Py_INCREF(last);
        PyList_SET_ITEM(ks, m, args[4]), PyList_SET_ITEM(ke, m, e0);
        PyList_SET_ITEM(ko, m, last);
    }
    if (PyList_SetSlice(starts, i, j, ks) < 0 || PyList_SetSlice(ends, i, j, ke) < 0 ||
        PyList_SetSlice(owners, i, j, ko) < 0)
        goto fail;
    Py_DECREF(ks), Py_DECREF(ke), Py_DECREF(ko);
    return hit;
fail:
    Py_XDECREF(ks), Py_XDECREF(ke), Py_XDECREF(ko);
    Py_DECREF(hit);
    return NULL;
}

const char dv_live_insert_doc[] =
    "live_insert(starts, ends, owners, a, b, owner): the live range [a, b) of owner put in "
    "its sorted place (the range was clipped free before) (sim.dram.live_insert).";

PyObject *dv_live_insert(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n, a, b, i;
    if (live_args(args, nargs, 6, "live_insert", "(starts, ends, owners, a, b, owner)", &n, &a,
                  &b) < 0)
        return NULL;
    if (b < a) {
        PyErr_SetString(PyExc_ValueError, "live_insert: the range ends before it starts");
        return NULL;
    }
    if (bisect_ints(args[0], 0, n, a, 0, &i) < 0)
        return NULL;
    if (PyList_Insert(args[0], i, args[3]) < 0)
        return NULL;
    if (PyList_Insert(args[1], i, args[4]) < 0) {
        PySequence_DelItem(args[0], i);
        return NULL;
    }
    if (PyList_Insert(args[2], i, args[5]) < 0) {
        PySequence_DelItem(args[0], i);
        PySequence_DelItem(args[1], i);
        return NULL;
    }
    Py_RETURN_NONE;
}

const char dv_live_unpacked_doc[] =
    "live_unpacked(starts, ends, owners, a, b) -> list: the owners of the live ranges that "
    "overlap [a, b) whose ``packed`` is None (not written out), in order, an owner once "
    "per range (sim.dram.live_unpacked).";

PyObject *dv_live_unpacked(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n, a, b, i, j;
    if (live_args(args, nargs, 5, "live_unpacked", "(starts, ends, owners, a, b)", &n, &a,
                  &b) < 0)
        return NULL;
    if (bisect_ints(args[1], 0, n, a, 1, &i) < 0 || bisect_ints(args[0], i, n, b, 0, &j) < 0)
        return NULL;
    PyObject *hit = PyList_GetSlice(args[2], i, j > i ? j : i);  /* (owned: getattr below
                                                                    may run Python code) */
    if (!hit)
        return NULL;
    PyObject *out = PyList_New(0);
    if (!out) {
        Py_DECREF(hit);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(hit); k++) {
        PyObject *t = PyList_GET_ITEM(hit, k);
        int u = unpacked(t);
        if (u < 0 || (u && PyList_Append(out, t) < 0)) {
            Py_DECREF(hit);
            Py_DECREF(out);
            return NULL;
        }
    }
    Py_DECREF(hit);
    return out;
}

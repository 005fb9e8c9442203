/*
 * dvsdk._native: the second core.  One worker thread, started on first use, takes the
 * second part of a loop the caller splits (team_run); the caller runs the first part and
 * then, if the worker has not claimed the second part yet (its core is busy, or it is
 * asleep), runs that too: a split is never slower than the loop run whole, beyond a few
 * atomic operations.  Every output is computed by the same operations whichever part it
 * falls in (firmware_spec/arithmetic.md), so a split changes no bit.
 *
 * Hand-off: the worker spins (with the CPU's pause hint) for SPIN_NS after its last part,
 * so a loop that follows soon starts on both cores within a microsecond; then it sleeps
 * on a condition variable, and the caller wakes it (a wake-up takes tens of microseconds,
 * during which the caller may have claimed the part itself).  One caller at a time uses
 * the worker; another thread's split meanwhile runs whole.  A forked child starts its own
 * worker.
 */
#include "_native.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define SPIN_NS 200000  /* 0.2 ms */

/* counters (tests and benchmarks read them: team_stats) and a delay the worker waits
 * before claiming a part (tests: the caller then runs both parts) */
static atomic_ullong n_posted, n_by_worker, n_by_caller;
static atomic_llong claim_delay_ns;
static atomic_int caller_waits;  /* tests: the caller leaves the second part to the worker */

static struct {
    atomic_uint seq;       /* the newest part posted */
    atomic_uint claimed;   /* the newest part claimed (by the worker or by the caller) */
    atomic_uint done;      /* the newest part the worker finished */
    _Atomic(team_fn) fn;   /* the posted part (read only after seq says it is there) */
    _Atomic(void *) ctx;
    atomic_llong r0, r1;
    atomic_int sleeping;   /* the worker waits on cv */
    atomic_flag busy;      /* a caller is using the worker */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
} team = {.busy = ATOMIC_FLAG_INIT, .mu = PTHREAD_MUTEX_INITIALIZER,
          .cv = PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *team_worker(void *start_seq)
{
    /* the parts before start_seq are not ours (a part posted before this thread ran its
     * first line is: seen must not be read here, after it) */
    unsigned seen = (unsigned)(uintptr_t)start_seq;
    for (;;) {
        long long until = now_ns() + SPIN_NS;
        unsigned s;
        for (int i = 0; (s = atomic_load(&team.seq)) == seen; i++) {
            cpu_relax();
            if ((i & 255) == 255 && now_ns() > until)
                break;
        }
        if (s == seen) {  /* nothing for a while: sleep until a caller posts a part */
            pthread_mutex_lock(&team.mu);
            atomic_store(&team.sleeping, 1);
            while ((s = atomic_load(&team.seq)) == seen)
                pthread_cond_wait(&team.cv, &team.mu);
            atomic_store(&team.sleeping, 0);
            pthread_mutex_unlock(&team.mu);
        }
        seen = s;
        long long delay = atomic_load(&claim_delay_ns);
        if (delay > 0) {
            long long until_claim = now_ns() + delay;
            while (now_ns() < until_claim)
                cpu_relax();
        }
        team_fn fn = atomic_load(&team.fn);
        void *ctx = atomic_load(&team.ctx);
        Py_ssize_t r0 = (Py_ssize_t)atomic_load(&team.r0), r1 = (Py_ssize_t)atomic_load(&team.r1);
        unsigned expected = s - 1;
        /* the part is still unclaimed: ours (else the caller ran it, and fn/ctx may already
         * be the next part's half-written fields: not used) */
        if (atomic_compare_exchange_strong(&team.claimed, &expected, s)) {
            fn(ctx, r0, r1);
            atomic_fetch_add(&n_by_worker, 1);
            atomic_store(&team.done, s);
        }
    }
    return NULL;
}

static void team_forget(void)  /* in a forked child: the parent's worker is not here */
{
    team.started = 0;
    atomic_flag_clear(&team.busy);
    pthread_mutex_init(&team.mu, NULL);
    pthread_cond_init(&team.cv, NULL);
    atomic_store(&team.sleeping, 0);
}

static int team_start(void)
{
    if (team.started)
        return 1;
    unsigned s = atomic_load(&team.seq);
    atomic_store(&team.claimed, s);
    atomic_store(&team.done, s);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int ok = pthread_create(&t, &attr, team_worker, (void *)(uintptr_t)s) == 0;
    pthread_attr_destroy(&attr);
    if (ok) {
        static int hooked;
        if (!hooked)
            hooked = pthread_atfork(NULL, NULL, team_forget) == 0;
        team.started = 1;
    }
    return ok;
}

void team_run(team_fn fn, void *ctx, Py_ssize_t n, int parts)
{
    if (parts < 2 || n < 2 || atomic_flag_test_and_set(&team.busy)) {
        fn(ctx, 0, n);
        return;
    }
    if (!team_start()) {
        atomic_flag_clear(&team.busy);
        fn(ctx, 0, n);
        return;
    }
    Py_ssize_t h = n / 2;
    unsigned s = atomic_load(&team.seq) + 1;
    atomic_store(&team.fn, fn);
    atomic_store(&team.ctx, ctx);
    atomic_store(&team.r0, (long long)h);
    atomic_store(&team.r1, (long long)n);
    atomic_store(&team.seq, s);
    if (atomic_load(&team.sleeping)) {
        pthread_mutex_lock(&team.mu);
        pthread_cond_signal(&team.cv);
        pthread_mutex_unlock(&team.mu);
    }
    atomic_fetch_add(&n_posted, 1);
    fn(ctx, 0, h);
    if (atomic_load(&caller_waits))
        while (atomic_load(&team.claimed) != s)
            cpu_relax();
    unsigned expected = s - 1;
    if (atomic_compare_exchange_strong(&team.claimed, &expected, s)) {
        fn(ctx, h, n);  /* the worker never came: ours too */
        atomic_fetch_add(&n_by_caller, 1);
    } else
        while (atomic_load(&team.done) != s)
            cpu_relax();
    atomic_flag_clear(&team.busy);
}

const char dv_team_stats_doc[] =
    "team_stats(claim_delay_ns=-1, caller_waits=-1)\n\n(parts posted, second parts the "
    "worker ran, second parts the caller ran itself) since the module was loaded.  For "
    "tests: claim_delay_ns >= 0 sets how long the worker waits before it claims a part, "
    "caller_waits 1 makes the caller leave every second part to the worker (0 and 0, the "
    "defaults, in production); -1 leaves a setting as it is.";

PyObject *dv_team_stats(PyObject *self, PyObject *args)
{
    (void)self;
    long long delay = -1;
    int waits = -1;
    if (!PyArg_ParseTuple(args, "|Li", &delay, &waits))
        return NULL;
    if (delay >= 0)
        atomic_store(&claim_delay_ns, delay);
    if (waits >= 0)
        atomic_store(&caller_waits, waits);
    return Py_BuildValue("KKK", (unsigned long long)atomic_load(&n_posted),
                         (unsigned long long)atomic_load(&n_by_worker),
                         (unsigned long long)atomic_load(&n_by_caller));
}

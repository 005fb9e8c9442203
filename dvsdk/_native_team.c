/*
 * dvsdk._native: the second core.  A loop the caller splits (team_run) is cut in CHUNKS
 * chunks that the caller and one worker thread (started on first use) claim one at a time
 * from a shared counter: a worker that is late, asleep, or descheduled by another process
 * takes fewer chunks or none, and the caller only ever waits for a chunk the worker is in
 * the middle of.  Every output is computed by the same operations whichever chunk it falls
 * in (firmware_spec/arithmetic.md), so a split changes no bit.
 *
 * Hand-off: the worker spins (with the CPU's pause hint) for SPIN_NS after its last chunk,
 * so a loop that follows soon starts on both cores within a microsecond; then it sleeps
 * on a condition variable, and the caller wakes it.  One caller at a time uses the worker;
 * another thread's split meanwhile runs whole.  A forked child starts its own worker.
 *
 * The counters carry the job's sequence number in their high 32 bits, so a worker that
 * comes late to a job can never claim a chunk of the next one (it fails its compare-and-
 * swap and reads none of that job's fields before it has a chunk).
 */
#include "_native.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#define SPIN_NS 200000  /* 0.2 ms */
#define CHUNKS 8

static struct {
    atomic_uint seq;         /* the newest job posted */
    atomic_ullong claim;     /* (seq << 32) | the next chunk to claim */
    atomic_ullong done;      /* (seq << 32) | chunks finished */
    _Atomic(team_fn) fn;     /* the job (read only with a chunk of it claimed) */
    _Atomic(void *) ctx;
    atomic_llong n;
    atomic_int chunks;
    atomic_int sleeping;     /* the worker waits on cv */
    atomic_flag busy;        /* a caller is using the worker */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
} team = {.busy = ATOMIC_FLAG_INIT, .mu = PTHREAD_MUTEX_INITIALIZER,
          .cv = PTHREAD_COND_INITIALIZER};

/* counters (tests and benchmarks read them: team_stats), and for tests a delay the worker
 * waits before it claims, and a caller that leaves every chunk but its first to the worker */
static atomic_ullong n_jobs, n_by_worker, n_by_caller;
static atomic_llong claim_delay_ns;
static atomic_int caller_waits;

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

/* the next unclaimed chunk of job s, or -1 when there is none (or job s is over) */
static int claim_chunk(unsigned s)
{
    unsigned long long v = atomic_load(&team.claim);
    for (;;) {
        if ((unsigned)(v >> 32) != s || (int)(v & 0xffffffffu) >= atomic_load(&team.chunks))
            return -1;
        if (atomic_compare_exchange_weak(&team.claim, &v, v + 1))
            return (int)(v & 0xffffffffu);
    }
}

static void run_chunk(int i, int who)
{
    team_fn fn = atomic_load(&team.fn);
    Py_ssize_t n = (Py_ssize_t)atomic_load(&team.n);
    int k = atomic_load(&team.chunks);
    fn(atomic_load(&team.ctx), n * i / k, n * (i + 1) / k, who);
    atomic_fetch_add(&team.done, 1);
}

static void *team_worker(void *start_seq)
{
    /* the jobs before start_seq are not ours (one posted before this thread ran its first
     * line is: seen is not read here, after it) */
    unsigned seen = (unsigned)(uintptr_t)start_seq;
    for (;;) {
        long long until = now_ns() + SPIN_NS;
        unsigned s;
        for (int i = 0; (s = atomic_load(&team.seq)) == seen; i++) {
            cpu_relax();
            if ((i & 255) == 255 && now_ns() > until)
                break;
        }
        if (s == seen) {  /* nothing for a while: sleep until a caller posts a job */
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
        for (int i; (i = claim_chunk(s)) >= 0;) {
            run_chunk(i, 1);
            atomic_fetch_add(&n_by_worker, 1);
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
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    unsigned s = atomic_load(&team.seq);
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
        fn(ctx, 0, n, 0);
        return;
    }
    if (!team_start()) {
        atomic_flag_clear(&team.busy);
        fn(ctx, 0, n, 0);
        return;
    }
    int k = n < CHUNKS ? (int)n : CHUNKS;
    unsigned s = atomic_load(&team.seq) + 1;
    unsigned long long tag = (unsigned long long)s << 32;
    /* first the claim counter moves to this job with no chunk open (a worker still in the
     * last job's claim now fails), then the job's fields, then its chunks open, then the
     * sequence number tells the worker */
    atomic_store(&team.claim, tag | 0xffffffffu);
    atomic_store(&team.fn, fn);
    atomic_store(&team.ctx, ctx);
    atomic_store(&team.n, (long long)n);
    atomic_store(&team.chunks, k);
    atomic_store(&team.done, tag);
    atomic_store(&team.claim, tag);
    atomic_store(&team.seq, s);
    if (atomic_load(&team.sleeping)) {
        pthread_mutex_lock(&team.mu);
        pthread_cond_signal(&team.cv);
        pthread_mutex_unlock(&team.mu);
    }
    atomic_fetch_add(&n_jobs, 1);
    int waits = atomic_load(&caller_waits);
    for (int i; (i = claim_chunk(s)) >= 0;) {
        run_chunk(i, 0);
        atomic_fetch_add(&n_by_caller, 1);
        if (waits)
            break;
    }
    /* the chunks the worker holds: wait for them, and after a while give the CPU away at
     * each turn (two threads that share one CPU, in a container with a CPU quota, would
     * otherwise spin through the worker's time) */
    for (unsigned i = 0; atomic_load(&team.done) != (tag | (unsigned)k); i++) {
        cpu_relax();
        if (i > 4096)
            sched_yield();
    }
    atomic_flag_clear(&team.busy);
}

const char dv_team_stats_doc[] =
    "team_stats(claim_delay_ns=-1, caller_waits=-1)\n\n(jobs split, chunks the worker ran, "
    "chunks the caller ran) since the module was loaded.  For tests: claim_delay_ns >= 0 "
    "sets how long the worker waits before it claims a job's chunks, caller_waits 1 makes "
    "the caller leave every chunk but its first to the worker (0 and 0, the defaults, in "
    "production); -1 leaves a setting as it is.";

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
    return Py_BuildValue("KKK", (unsigned long long)atomic_load(&n_jobs),
                         (unsigned long long)atomic_load(&n_by_worker),
                         (unsigned long long)atomic_load(&n_by_caller));
}

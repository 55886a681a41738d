/* GASNet-1's tools header (gasnet_tools.h) and collectives header (gasnet_coll.h), written
 * only against them and gasnet.h: timers, atomic counters raced by threads, a mutex and a
 * condition variable, thread keys, the checksum, number formatting and parsing, zero-byte
 * counts, environment queries; and the GASNet-internal spellings GASNet's own test programs
 * use (gasnete_barrier_*, GASNETI_SYSTEM_TUPLE, gasnet_threadinfo_t). */
#define _POSIX_C_SOURCE 200809L
#include "gasnet_check.h"
#include <gasnet_coll.h>
#include <gasnet_tools.h>

GASNETT_IDENT(amnet_test_ident, "$amnet gasnet_tools test: " GASNETI_SYSTEM_TUPLE " $");

static gasnett_atomic_t counter = gasnett_atomic_init(0);
static gasnett_atomic64_t big = gasnett_atomic64_init(0);
static gasnett_mutex_t lock = GASNETT_MUTEX_INITIALIZER;
static gasnett_cond_t cond = GASNETT_COND_INITIALIZER;
static int arrived;
GASNETT_THREADKEY_DEFINE(mykey);

#define THREADS 4
#define ITERS 20000

static void *worker(void *arg) {
    gasnett_threadkey_init(mykey);
    gasnett_threadkey_set(mykey, arg);
    for (int i = 0; i < ITERS; i++) {
        gasnett_atomic_increment(&counter, 0);
        gasnett_atomic64_add(&big, (uint64_t)1 << 33, GASNETT_ATOMIC_REL);
    }
    if (gasnett_threadkey_get(mykey) != arg)
        FAILED("a thread key holds another thread's value");
    gasnett_mutex_lock(&lock);
    arrived++;
    gasnett_cond_broadcast(&cond);
    gasnett_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    if (gasnet_init(&argc, &argv) != GASNET_OK)
        return 1;
    me = gasnet_mynode();
    nodes = gasnet_nodes();
    if (nodes < 1 || me >= nodes)
        FAILED("node %u of %u", (unsigned)me, (unsigned)nodes);
    if (gasnet_attach(NULL, 0, 16 * GASNETT_PAGESIZE, 0) != GASNET_OK)
        FAILED("gasnet_attach");
    gasnet_threadinfo_t ti = GASNET_GET_THREADINFO();
    GASNET_POST_THREADINFO(ti);

    /* Timers: monotonic, in the right units. */
    gasnett_tick_t t0 = gasnett_ticks_now();
    struct timespec two_ms = {0, 2000000};
    nanosleep(&two_ms, NULL);
    gasnett_tick_t t1 = gasnett_ticks_now();
    uint64_t us = gasnett_ticks_to_us(t1 - t0), ns = gasnett_ticks_to_ns(t1 - t0);
    if (t1 < t0 || us < 2000 || us > 2000000 || ns / 1000 != us)
        FAILED("a 2 ms sleep measured %llu us (%llu ns)", (unsigned long long)us,
               (unsigned long long)ns);
    if (!(gasnett_tick_granularityus() > 0) || gasnett_tick_overheadus() < 0)
        FAILED("timer granularity %g us, overhead %g us", gasnett_tick_granularityus(),
               gasnett_tick_overheadus());

    /* Atomics raced by threads; a mutex and condition variable to meet. */
    pthread_t th[THREADS];
    for (intptr_t i = 0; i < THREADS; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(i + 1)) != 0)
            FAILED("pthread_create");
    gasnett_mutex_lock(&lock);
    while (arrived < THREADS)
        gasnett_cond_wait(&cond, &lock);
    gasnett_mutex_unlock(&lock);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    if (gasnett_atomic_read(&counter, 0) != THREADS * ITERS ||
        gasnett_atomic64_read(&big, GASNETT_ATOMIC_ACQ) != ((uint64_t)THREADS * ITERS) << 33)
        FAILED("atomic counts %u and %llu", (unsigned)gasnett_atomic_read(&counter, 0),
               (unsigned long long)gasnett_atomic64_read(&big, 0));
    gasnett_atomic_set(&counter, 5, 0);
    if (!gasnett_atomic_compare_and_swap(&counter, 5, 7, 0) ||
        gasnett_atomic_compare_and_swap(&counter, 5, 9, 0) ||
        gasnett_atomic_read(&counter, 0) != 7 || gasnett_atomic_add(&counter, 3, 0) != 10 ||
        gasnett_atomic_subtract(&counter, 9, 0) != 1 ||
        !gasnett_atomic_decrement_and_test(&counter, 0))
        FAILED("compare-and-swap, add, subtract or decrement_and_test");

    /* Checksums, numbers, zero bytes. */
    char a[64] = "GASNet tools", b[64] = "GASNet tools";
    if (gasnett_checksum(a, 64) != gasnett_checksum(b, 64))
        FAILED("equal data, different checksums");
    b[3] ^= 1;
    if (gasnett_checksum(a, 64) == gasnett_checksum(b, 64))
        FAILED("different data, equal checksums");
    const uint64_t vals[] = {0, 1, 1000, 1024, 3 << 20, ((uint64_t)5 << 30) + 1};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        for (int mem = 0; mem < 2; mem++) {
            char s[64];
            gasnett_format_number(vals[i], s, sizeof s, mem);
            if ((uint64_t)gasnett_parse_int(s, (uint64_t)mem) != vals[i])
                FAILED("%llu formatted as '%s' parses back as %lld", (unsigned long long)vals[i],
                       s, (long long)gasnett_parse_int(s, (uint64_t)mem));
        }
    if (gasnett_parse_int("4K", 0) != 4096 || gasnett_parse_int("2m", 1) != 2 << 20)
        FAILED("suffixes: 4K is %lld", (long long)gasnett_parse_int("4K", 0));
    char z[16] = {1, 0, 2, 0, 0};
    char zc[16];
    if (gasnett_count0s(z, 5) != 3 || gasnett_count0s_copy(zc, z, 16) != 14 ||
        memcmp(z, zc, 16) != 0 || gasnett_count0s_uint32_t(1u << 9) != 3 ||
        gasnett_count0s_uint64_t(0) != 8)
        FAILED("zero-byte counts");

    /* The environment and the platform. */
    setenv("AMNET_GASNETT_PROBE", "yes", 1);
    if (!gasnett_getenv_yesno_withdefault("AMNET_GASNETT_PROBE", 0) ||
        gasnett_getenv_int_withdefault("AMNET_GASNETT_NONE", 42, 0) != 42 ||
        strcmp(gasnett_getenv_withdefault("AMNET_GASNETT_NONE", "d"), "d") != 0)
        FAILED("environment queries");
    if (gasnett_cpu_count() < 1 || gasnett_getPhysMemSz(0) == 0 || !gasnett_isLittleEndian() ||
        !gasnett_gethostname()[0])
        FAILED("platform queries");

    /* The GASNet-internal barrier names that GASNet's tests use. */
    gasnete_barrier_notify(0, GASNET_BARRIERFLAG_ANONYMOUS);
    if (gasnete_barrier_wait(0, GASNET_BARRIERFLAG_ANONYMOUS) != GASNET_OK)
        FAILED("gasnete_barrier_wait");
    gasnet_exit(0);
    return 0;
}

/* gasnet_tools.h: the GASNet-1 tools header (gasnett_*) as its clients and GASNet's own test
 * programs use it: configuration and platform macros, timers, memory fences, atomic counters,
 * mutexes and condition variables, environment queries, and tracing that is compiled out.
 *
 * Header-only and independent of amnet's library (GASNet clients may include it without
 * gasnet.h). Each facility is a thin layer over C11/GCC builtins and POSIX; spec/gasnet.md
 * lists what is covered. Names that are not GASNet's start with amnet_gasnett_. */

#ifndef AMNET_GASNET_TOOLS_H
#define AMNET_GASNET_TOOLS_H

/* The header needs POSIX declarations (clock_gettime, gethostname). A translation unit that
 * selects none (strict ISO C, -std=c11) gets glibc's default set here, which takes effect
 * when this header comes before every system header; otherwise define _POSIX_C_SOURCE to
 * 200809L (or compile with -std=gnu11). */
#if !defined(_POSIX_C_SOURCE) && !defined(_XOPEN_SOURCE) && !defined(_GNU_SOURCE) && \
    !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1
#endif

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
#define GASNETT_BEGIN_EXTERNC extern "C" {
#define GASNETT_END_EXTERNC }
#define GASNETT_EXTERNC extern "C"
#else
#define GASNETT_BEGIN_EXTERNC
#define GASNETT_END_EXTERNC
#define GASNETT_EXTERNC extern
#endif

GASNETT_BEGIN_EXTERNC

/* ---- configuration and platform ------------------------------------------------------ */

#define GASNETT_RELEASE_VERSION_MAJOR 1
#define GASNETT_RELEASE_VERSION_MINOR 8
#define GASNETT_RELEASE_VERSION_PATCH 0
#define GASNETT_THREAD_SAFE 1
#define GASNETT_SPEC_VERSION_MAJOR 1
#define GASNETT_SPEC_VERSION_MINOR 8
#define GASNETT_PAGESIZE 4096
#define GASNETT_PAGESHIFT 12
/* POSIX threads are there (GASNet's configuration reports it under this name). */
#ifndef HAVE_PTHREAD_H
#define HAVE_PTHREAD_H 1
#endif
#define GASNETT_CACHE_LINE_BYTES 64
#define GASNETT_CONFIG_STRING "RELEASE=amnet,SPEC=1.8,PTR=64bit,nodebug,notrace,nostats"
#define GASNETT_SYSTEM_TUPLE "x86_64-unknown-linux-gnu"
/* The internal name GASNet's own test header uses for it. */
#define GASNETI_SYSTEM_TUPLE GASNETT_SYSTEM_TUPLE
/* Atomics and timers are the processor's: GASNETT_USING_GENERIC_ATOMICOPS and
 * GASNETT_USING_GETTIMEOFDAY (mutex-based atomics, a gettimeofday timer) stay undefined. */

#if defined(__x86_64__)
#define PLATFORM_ARCH_X86_64 1
#elif defined(__aarch64__)
#define PLATFORM_ARCH_AARCH64 1
#endif
#if UINTPTR_MAX == 0xffffffffffffffffu
#define PLATFORM_ARCH_64 1
#else
#define PLATFORM_ARCH_32 1
#endif
#if defined(__linux__)
#define PLATFORM_OS_LINUX 1
#endif
#if defined(__clang__)
#define PLATFORM_COMPILER_CLANG 1
#define PLATFORM_COMPILER_FAMILYNAME CLANG
#elif defined(__GNUC__)
#define PLATFORM_COMPILER_GNU 1
#define PLATFORM_COMPILER_FAMILYNAME GNU
#endif
#define PLATFORM_COMPILER_VERSION_STR __VERSION__

/* ---- compiler annotations ------------------------------------------------------------ */

#define GASNETT_INLINE(fnname) static inline
#define GASNETT_NEVER_INLINE(fnname, declarator) __attribute__((noinline)) declarator
#define GASNETT_RESTRICT __restrict__
#define GASNETT_PREDICT_TRUE(e) __builtin_expect(!!(e), 1)
#define GASNETT_PREDICT_FALSE(e) __builtin_expect(!!(e), 0)
#ifndef if_pt
#define if_pt(e) if (GASNETT_PREDICT_TRUE(e))
#endif
#ifndef if_pf
#define if_pf(e) if (GASNETT_PREDICT_FALSE(e))
#endif
#define GASNETT_UNUSED __attribute__((unused))
/* A function that does not return: GASNETT_NORETURN before its declaration, GASNETT_NORETURNP
 * (for the compilers that want it after) behind. */
#define GASNETT_NORETURN __attribute__((noreturn))
#define GASNETT_NORETURNP(fnname)
/* A function that returns fresh memory. */
#define GASNETT_MALLOC __attribute__((malloc))
/* An identification string kept in the executable (`ident` finds it). */
#define GASNETT_IDENT(identifier, text) \
    extern const char identifier[];     \
    __attribute__((weak, used)) const char identifier[] = text
/* A printf-style function declaration: the compiler checks its format arguments. */
#define GASNETT_FORMAT_PRINTF(fnname, fmtarg, firstvararg, declarator) \
    __attribute__((format(printf, fmtarg, firstvararg))) declarator
#ifndef _STRINGIFY
#define _STRINGIFY_HELPER(x) #x
#define _STRINGIFY(x) _STRINGIFY_HELPER(x)
#endif

/* ---- timers: nanosecond ticks of the monotonic clock ---------------------------------- */

typedef uint64_t gasnett_tick_t;
#define GASNETT_TICK_MIN ((gasnett_tick_t)0)
#define GASNETT_TICK_MAX ((gasnett_tick_t)UINT64_MAX)

static inline gasnett_tick_t gasnett_ticks_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (gasnett_tick_t)t.tv_sec * 1000000000u + (gasnett_tick_t)t.tv_nsec;
}
static inline uint64_t gasnett_ticks_to_ns(gasnett_tick_t ticks) { return ticks; }
static inline uint64_t gasnett_ticks_to_us(gasnett_tick_t ticks) { return ticks / 1000; }
static inline double gasnett_tick_granularityus(void) {
    struct timespec r;
    clock_getres(CLOCK_MONOTONIC, &r);
    return (double)r.tv_sec * 1e6 + (double)r.tv_nsec / 1e3;
}
/* The cost of one gasnett_ticks_now, measured once. */
static inline double gasnett_tick_overheadus(void) {
    static double cached = -1;
    if (cached < 0) {
        gasnett_tick_t start = gasnett_ticks_now(), end = start;
        for (int i = 0; i < 1000; i++)
            end = gasnett_ticks_now();
        cached = (double)(end - start) / 1000.0 / 1e3;
    }
    return cached;
}
/* The names of older releases. */
#define gasnett_timer_granularityus gasnett_tick_granularityus
#define gasnett_timer_overheadus gasnett_tick_overheadus
static inline uint64_t gasnett_gettimeofday_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

/* ---- memory fences --------------------------------------------------------------------- */

#define gasnett_compiler_fence() __asm__ __volatile__("" ::: "memory")
#define gasnett_local_wmb() __atomic_thread_fence(__ATOMIC_RELEASE)
#define gasnett_local_rmb() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define gasnett_local_mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define gasnett_weak_wmb gasnett_local_wmb
#define gasnett_weak_rmb gasnett_local_rmb
#define gasnett_weak_mb gasnett_local_mb

/* ---- atomic counters ------------------------------------------------------------------- */

/* The fence flags of the atomic operations. Every operation here is sequentially consistent,
 * which is at least what any combination of flags asks for. */
#define GASNETT_ATOMIC_NONE 0
#define GASNETT_ATOMIC_RMB_PRE (1 << 0)
#define GASNETT_ATOMIC_WMB_PRE (1 << 1)
#define GASNETT_ATOMIC_RMB_POST (1 << 2)
#define GASNETT_ATOMIC_WMB_POST (1 << 3)
#define GASNETT_ATOMIC_RMB_POST_IF_TRUE (1 << 4)
#define GASNETT_ATOMIC_RMB_POST_IF_FALSE (1 << 5)
#define GASNETT_ATOMIC_MB_PRE (GASNETT_ATOMIC_RMB_PRE | GASNETT_ATOMIC_WMB_PRE)
#define GASNETT_ATOMIC_MB_POST (GASNETT_ATOMIC_RMB_POST | GASNETT_ATOMIC_WMB_POST)
#define GASNETT_ATOMIC_REL GASNETT_ATOMIC_WMB_PRE
#define GASNETT_ATOMIC_ACQ GASNETT_ATOMIC_RMB_POST
#define GASNETT_ATOMIC_ACQ_IF_TRUE GASNETT_ATOMIC_RMB_POST_IF_TRUE
#define GASNETT_ATOMIC_ACQ_IF_FALSE GASNETT_ATOMIC_RMB_POST_IF_FALSE

/* One family of operations per width: gasnett_atomic_* (32 bits), gasnett_atomic32_* and
 * gasnett_atomic64_*. add and subtract return the new value, swap the old one,
 * compare_and_swap and decrement_and_test whether they succeeded / reached zero. */
#define AMNET_GASNETT_ATOMICS(P, T, ST)                                                      \
    typedef struct {                                                                         \
        volatile T ctr;                                                                      \
    } P##_t;                                                                                 \
    typedef T P##_val_t;                                                                     \
    typedef ST P##_sval_t;                                                                   \
    static inline T P##_read(P##_t *p, int f) {                                              \
        (void)f;                                                                             \
        return __atomic_load_n(&p->ctr, __ATOMIC_SEQ_CST);                                   \
    }                                                                                        \
    static inline void P##_set(P##_t *p, T v, int f) {                                       \
        (void)f;                                                                             \
        __atomic_store_n(&p->ctr, v, __ATOMIC_SEQ_CST);                                      \
    }                                                                                        \
    static inline void P##_increment(P##_t *p, int f) {                                      \
        (void)f;                                                                             \
        __atomic_add_fetch(&p->ctr, 1, __ATOMIC_SEQ_CST);                                    \
    }                                                                                        \
    static inline void P##_decrement(P##_t *p, int f) {                                      \
        (void)f;                                                                             \
        __atomic_sub_fetch(&p->ctr, 1, __ATOMIC_SEQ_CST);                                    \
    }                                                                                        \
    static inline int P##_decrement_and_test(P##_t *p, int f) {                              \
        (void)f;                                                                             \
        return __atomic_sub_fetch(&p->ctr, 1, __ATOMIC_SEQ_CST) == 0;                        \
    }                                                                                        \
    static inline int P##_compare_and_swap(P##_t *p, T oldval, T newval, int f) {            \
        (void)f;                                                                             \
        return __atomic_compare_exchange_n(&p->ctr, &oldval, newval, 0, __ATOMIC_SEQ_CST,    \
                                           __ATOMIC_SEQ_CST);                                \
    }                                                                                        \
    static inline T P##_swap(P##_t *p, T v, int f) {                                         \
        (void)f;                                                                             \
        return __atomic_exchange_n(&p->ctr, v, __ATOMIC_SEQ_CST);                            \
    }                                                                                        \
    static inline T P##_add(P##_t *p, T v, int f) {                                          \
        (void)f;                                                                             \
        return __atomic_add_fetch(&p->ctr, v, __ATOMIC_SEQ_CST);                             \
    }                                                                                        \
    static inline T P##_subtract(P##_t *p, T v, int f) {                                     \
        (void)f;                                                                             \
        return __atomic_sub_fetch(&p->ctr, v, __ATOMIC_SEQ_CST);                             \
    }

AMNET_GASNETT_ATOMICS(gasnett_atomic, uint32_t, int32_t)
AMNET_GASNETT_ATOMICS(gasnett_atomic32, uint32_t, int32_t)
AMNET_GASNETT_ATOMICS(gasnett_atomic64, uint64_t, int64_t)
AMNET_GASNETT_ATOMICS(gasnett_strong_atomic, uint32_t, int32_t)

#define gasnett_atomic_init(v) \
    { (v) }
#define gasnett_atomic32_init(v) \
    { (v) }
#define gasnett_atomic64_init(v) \
    { (v) }
#define gasnett_strong_atomic_init(v) \
    { (v) }
#define GASNETT_ATOMIC_MAX ((gasnett_atomic_val_t)UINT32_MAX)
#define GASNETT_ATOMIC_SIGNED_MIN ((gasnett_atomic_sval_t)INT32_MIN)
#define GASNETT_ATOMIC_SIGNED_MAX ((gasnett_atomic_sval_t)INT32_MAX)
#define gasnett_atomic_signed(v) ((gasnett_atomic_sval_t)(v))
#define GASNETT_HAVE_ATOMIC_CAS 1
#define GASNETT_HAVE_ATOMIC_ADD_SUB 1

/* ---- mutexes and condition variables (POSIX) ------------------------------------------ */

typedef pthread_mutex_t gasnett_mutex_t;
#define GASNETT_MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#define gasnett_mutex_init(pl) pthread_mutex_init((pl), NULL)
#define gasnett_mutex_destroy(pl) pthread_mutex_destroy(pl)
#define gasnett_mutex_lock(pl) pthread_mutex_lock(pl)
#define gasnett_mutex_trylock(pl) pthread_mutex_trylock(pl)
#define gasnett_mutex_unlock(pl) pthread_mutex_unlock(pl)
#define gasnett_mutex_assertlocked(pl) ((void)0)
#define gasnett_mutex_assertunlocked(pl) ((void)0)

typedef pthread_cond_t gasnett_cond_t;
#define GASNETT_COND_INITIALIZER PTHREAD_COND_INITIALIZER
#define gasnett_cond_init(pc) pthread_cond_init((pc), NULL)
#define gasnett_cond_destroy(pc) pthread_cond_destroy(pc)
#define gasnett_cond_signal(pc) pthread_cond_signal(pc)
#define gasnett_cond_broadcast(pc) pthread_cond_broadcast(pc)
#define gasnett_cond_wait(pc, pl) pthread_cond_wait((pc), (pl))

/* ---- the process and its environment --------------------------------------------------- */

static inline void gasnett_sched_yield(void) { sched_yield(); }
static inline void gasnett_flush_streams(void) { fflush(NULL); }
static inline void gasnett_close_streams(void) { fflush(NULL); }
static inline int gasnett_cpu_count(void) { return (int)sysconf(_SC_NPROCESSORS_ONLN); }
static inline uint64_t gasnett_getPhysMemSz(int failureIsFatal) {
    (void)failureIsFatal;
    return (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
}
static inline void gasnett_set_affinity(int rank) { (void)rank; }
static inline int gasnett_isLittleEndian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}
/* A 64-bit checksum of `numbytes` bytes (FNV-1a): equal data, equal sums. */
static inline uint64_t gasnett_checksum(const void *p, int numbytes) {
    const uint8_t *b = (const uint8_t *)p;
    uint64_t h = 0xcbf29ce484222325u;
    for (int i = 0; i < numbytes; i++) {
        h ^= b[i];
        h *= 0x100000001b3u;
    }
    return h;
}
/* Print a message and end the process (GASNet's fatal error). */
__attribute__((format(printf, 1, 2), noreturn)) static inline void
gasnett_fatalerror(const char *msg, ...) {
    va_list ap;
    va_start(ap, msg);
    fprintf(stderr, "*** FATAL ERROR: ");
    vfprintf(stderr, msg, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(NULL);
    abort();
}
static inline void gasnett_killmyprocess(int exitcode) { _exit(exitcode); }
/* No backtrace support: says so (non-zero). */
static inline int gasnett_print_backtrace(int fd) {
    (void)fd;
    return 1;
}
typedef void (*gasnett_sighandlerfn_t)(int);
static inline gasnett_sighandlerfn_t gasnett_reghandler(int sigtocatch,
                                                         gasnett_sighandlerfn_t fp) {
    return signal(sigtocatch, fp);
}

static inline char *gasnett_getenv(const char *key) { return getenv(key); }
static inline int gasnett_verboseenv(void) { return 0; }
static inline const char *gasnett_getenv_withdefault(const char *key, const char *dflt) {
    const char *v = getenv(key);
    return v ? v : dflt;
}
/* Y/YES/1 (any case) is yes, N/NO/0 is no; anything else (and no variable) the default. */
static inline int gasnett_getenv_yesno_withdefault(const char *key, int dflt) {
    const char *v = getenv(key);
    if (!v || !*v)
        return dflt;
    char c = v[0];
    if (c == 'y' || c == 'Y' || c == '1')
        return 1;
    if (c == 'n' || c == 'N' || c == '0')
        return 0;
    return dflt;
}
/* A number (decimal, or 0x hexadecimal) with an optional K, M, G or T suffix, read as
 * gasnett_parse_int reads it. */
static inline int64_t gasnett_parse_int(const char *str, uint64_t mem_size_multiplier);
static inline int64_t gasnett_getenv_int_withdefault(const char *key, int64_t dflt,
                                                     uint64_t mem_size_multiplier) {
    const char *v = getenv(key);
    return v && *v ? gasnett_parse_int(v, mem_size_multiplier) : dflt;
}

/* The host's name, in a buffer of the library's. */
static inline const char *gasnett_gethostname(void) {
    static char name[256];
    if (!name[0] && gethostname(name, sizeof name - 1) != 0)
        strcpy(name, "(unknown)");
    return name;
}

/* `val` in decimal, or with a K, M, G or T suffix when is_mem_size and it is a whole number
 * of those units; gasnett_parse_int reads both forms back (a number without a suffix is
 * multiplied by mem_size_multiplier when that is not 0). */
static inline char *gasnett_format_number(uint64_t val, char *buf, size_t bufsz,
                                          int is_mem_size) {
    static const char units[] = "KMGT";
    int u = -1;
    if (is_mem_size)
        while (u < 3 && val != 0 && val % 1024 == 0) {
            val /= 1024;
            u++;
        }
    if (u >= 0)
        snprintf(buf, bufsz, "%llu%c", (unsigned long long)val, units[u]);
    else
        snprintf(buf, bufsz, "%llu", (unsigned long long)val);
    return buf;
}
static inline int64_t gasnett_parse_int(const char *str, uint64_t mem_size_multiplier) {
    char *end = NULL;
    int64_t n = (int64_t)strtoll(str, &end, 0);
    uint64_t mult = mem_size_multiplier ? mem_size_multiplier : 1;
    if (end && *end) {
        switch (*end) {
        case 'k': case 'K': mult = (uint64_t)1 << 10; break;
        case 'm': case 'M': mult = (uint64_t)1 << 20; break;
        case 'g': case 'G': mult = (uint64_t)1 << 30; break;
        case 't': case 'T': mult = (uint64_t)1 << 40; break;
        default: break;
        }
    }
    return n * (int64_t)mult;
}

/* Zero bytes: in `len` bytes at `p`, in a copy of `len` bytes from `src` to `dst` (returns the
 * zero bytes copied), and in one word. */
static inline size_t gasnett_count0s(const void *p, size_t len) {
    const uint8_t *b = (const uint8_t *)p;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += b[i] == 0;
    return n;
}
static inline size_t gasnett_count0s_copy(void *dst, const void *src, size_t len) {
    memcpy(dst, src, len);
    return gasnett_count0s(dst, len);
}
static inline int gasnett_count0s_uint32_t(uint32_t v) { return (int)gasnett_count0s(&v, 4); }
static inline int gasnett_count0s_uint64_t(uint64_t v) { return (int)gasnett_count0s(&v, 8); }
static inline int gasnett_count0s_uintptr_t(uintptr_t v) {
    return (int)gasnett_count0s(&v, sizeof v);
}

/* Thread-specific pointers: a key is a thread-local variable. */
#define GASNETT_THREADKEY_DECLARE(key) extern __thread void *key
#define GASNETT_THREADKEY_DEFINE(key) __thread void *key
#define gasnett_threadkey_init(key) ((void)0)
#define gasnett_threadkey_get(key) (key)
#define gasnett_threadkey_get_noinit(key) (key)
#define gasnett_threadkey_set(key, val) ((void)((key) = (void *)(val)))
#define gasnett_threadkey_set_noinit(key, val) ((void)((key) = (void *)(val)))
/* The internal names GASNet's own test programs use for them. */
#define GASNETI_THREADKEY_DECLARE GASNETT_THREADKEY_DECLARE
#define GASNETI_THREADKEY_DEFINE GASNETT_THREADKEY_DEFINE

/* ---- tracing and statistics: compiled out ---------------------------------------------- */

#define GASNETT_TRACE_ENABLED 0
#define GASNETT_STATS_ENABLED 0
#define GASNETT_TRACE_SETSOURCELINE(file, line) ((void)0)
#define GASNETT_TRACE_GETSOURCELINE(pfile, pline) ((void)0)
#define GASNETT_TRACE_FREEZESOURCELINE() ((void)0)
#define GASNETT_TRACE_UNFREEZESOURCELINE() ((void)0)
#define GASNETT_TRACE_PRINTF(...) ((void)0)
#define GASNETT_TRACE_PRINTF_FORCE(...) ((void)0)
#define GASNETT_TRACE_GETMASK() ""
#define GASNETT_TRACE_SETMASK(mask) ((void)0)
#define GASNETT_STATS_GETMASK() ""
#define GASNETT_STATS_SETMASK(mask) ((void)0)
#define GASNETT_TRACE_GET_TRACELOCAL() 0
#define GASNETT_TRACE_SET_TRACELOCAL(val) ((void)0)
#define GASNETT_STATS_PRINTF(...) ((void)0)

GASNETT_END_EXTERNC

#endif

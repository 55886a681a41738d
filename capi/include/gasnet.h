/* gasnet.h: the GASNet-1 core and extended API (spec 1.8) over amnet's C ABI (amnet.h).
 *
 * A client written against GASNet-1 includes this header and links libamnet
 * (`cc prog.c $(pkg-config --cflags --libs amnet)`), then runs under amrun. The layer is a
 * translation: every call becomes amnet calls, whose rules and checks apply (spec/capi.md);
 * spec/gasnet.md lists what is covered and where it differs from GASNet.
 *
 * The layer is header-only. Its state (the handler table and every node's segment address)
 * is in weak symbols, so that every translation unit of a program shares one copy. */

#ifndef AMNET_GASNET_H
#define AMNET_GASNET_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amnet.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration ------------------------------------------------------------------- */

#define GASNET_SPEC_VERSION_MAJOR 1
#define GASNET_SPEC_VERSION_MINOR 8
/* One segment per node at an address of its own (no aligned segments), in the fast
 * segment configuration: the client's segment is registered memory. */
#define GASNET_SEGMENT_FAST 1
#define GASNET_ALIGNED_SEGMENTS 0
#define GASNET_PAGESIZE 4096
#define GASNET_MAXNODES 0x7fffffff
/* The conduit: amnet's, whichever transport (smp, udp, mpi) AMNET_CONDUIT picks at run
 * time. */
#define GASNET_CONDUIT_AMNET 1
#define GASNET_CONDUIT_NAME AMNET
#define GASNET_CONDUIT_NAME_STR "AMNET"
#define GASNET_CONFIG_STRING                                                                 \
    "RELEASE=amnet,SPEC=1.8,CONDUIT=AMNET(AMNET/REFERENCE),THREADMODEL=PAR,SEGMENT=FAST,"    \
    "PTR=64bit,noalign,nodebug,notrace,nostats"
/* The thread model: amnet is thread-safe, so a client that names none gets PAR. */
#if !defined(GASNET_SEQ) && !defined(GASNET_PARSYNC) && !defined(GASNET_PAR)
#define GASNET_PAR 1
#endif
/* The sizes of the types below. */
#define SIZEOF_GASNET_REGISTER_VALUE_T 8

/* ---- types --------------------------------------------------------------------------- */

typedef uint32_t gasnet_node_t;
typedef uint8_t gasnet_handler_t;
typedef int32_t gasnet_handlerarg_t;
typedef amnet_token_t *gasnet_token_t;
typedef uint64_t gasnet_register_value_t;
typedef amnet_handle_t gasnet_handle_t;
#define GASNET_INVALID_HANDLE ((gasnet_handle_t)0)

typedef void (*amnet_gasnet_fn_t)();
typedef struct {
    gasnet_handler_t index; /* 128..255, or 0: assigned by gasnet_attach, written back */
    void (*fnptr)();
} gasnet_handlerentry_t;

typedef struct {
    void *addr;
    uintptr_t size;
} gasnet_seginfo_t;

/* ---- errors -------------------------------------------------------------------------- */

#define GASNET_OK 0
#define GASNET_ERR_NOT_INIT 10001
#define GASNET_ERR_RESOURCE 10002
#define GASNET_ERR_BAD_ARG 10003
#define GASNET_ERR_NOT_READY 10004
#define GASNET_ERR_BARRIER_MISMATCH 10005

#define GASNET_BARRIERFLAG_ANONYMOUS 1
#define GASNET_BARRIERFLAG_MISMATCH 2

/* Interrupts and per-function thread set-up do not exist here: no-ops. */
#define GASNET_BEGIN_FUNCTION() ((void)0)
typedef void *gasnet_threadinfo_t;
#define GASNET_POST_THREADINFO(info) ((void)(info))
#define GASNET_GET_THREADINFO() ((gasnet_threadinfo_t)0)
#define gasnet_hold_interrupts() ((void)0)
#define gasnet_resume_interrupts() ((void)0)

static inline const char *gasnet_ErrorName(int errval) {
    switch (errval) {
    case GASNET_OK: return "GASNET_OK";
    case GASNET_ERR_NOT_INIT: return "GASNET_ERR_NOT_INIT";
    case GASNET_ERR_RESOURCE: return "GASNET_ERR_RESOURCE";
    case GASNET_ERR_BAD_ARG: return "GASNET_ERR_BAD_ARG";
    case GASNET_ERR_NOT_READY: return "GASNET_ERR_NOT_READY";
    case GASNET_ERR_BARRIER_MISMATCH: return "GASNET_ERR_BARRIER_MISMATCH";
    default: return "*unknown*";
    }
}

static inline const char *gasnet_ErrorDesc(int errval) {
    switch (errval) {
    case GASNET_OK: return "no error";
    case GASNET_ERR_NOT_INIT: return "GASNet was not initialized (call gasnet_init first)";
    case GASNET_ERR_RESOURCE: return "a resource failed (a peer, the network, the memory)";
    case GASNET_ERR_BAD_ARG: return "an argument was invalid, or a call was made at the wrong time";
    case GASNET_ERR_NOT_READY: return "the operation is not complete yet";
    case GASNET_ERR_BARRIER_MISMATCH: return "the barrier's ids or flags did not match across nodes";
    default: return "no such error code";
    }
}

/* ---- the layer's state and helpers (not part of the GASNet API) ----------------------- */

/* Every node's segment as the client sees it, and the room before it in amnet's segment. */
__attribute__((weak)) gasnet_seginfo_t *amnet_gasnet_segs;
__attribute__((weak)) uintptr_t amnet_gasnet_room;
__attribute__((weak)) uintptr_t amnet_gasnet_max_long;
/* The client's handlers by index. */
__attribute__((weak)) amnet_gasnet_fn_t amnet_gasnet_handlers[256];

/* An amnet status as a GASNet error code. */
static inline int amnet_gasnet_code(int rc) {
    switch (rc) {
    case AMNET_OK: return GASNET_OK;
    case AMNET_NOT_READY: return GASNET_ERR_NOT_READY;
    case AMNET_ERR_NOT_INIT: return GASNET_ERR_NOT_INIT;
    case AMNET_ERR_BARRIER_MISMATCH: return GASNET_ERR_BARRIER_MISMATCH;
    case AMNET_ERR_PEER_FAILED: case AMNET_ERR_OS: case AMNET_ERR_CONDUIT: case AMNET_ERR_HANG:
    case AMNET_ERR_TIMEOUT: case AMNET_ERR_INTERNAL: case AMNET_ERR_CONFIG:
        return GASNET_ERR_RESOURCE;
    default: return GASNET_ERR_BAD_ARG;
    }
}

/* A call of a GASNet function that returns no code failed: report and end the job. */
static inline void amnet_gasnet_fatal(const char *fn, int rc) {
    fprintf(stderr, "GASNet (amnet) error in %s: %s (%s)\n", fn, amnet_last_error(),
            amnet_error_name(rc));
    fflush(stderr);
    amnet_exit(1);
}


#define AMNET_GASNET_CHECK(fn, call)                                                      \
    do {                                                                                  \
        int amnet_rc_ = (call);                                                           \
        if (amnet_rc_ != AMNET_OK)                                                        \
            amnet_gasnet_fatal(fn, amnet_rc_);                                            \
    } while (0)

/* The offset in amnet's segment of `node` of the client's address `addr` there. */
static inline uint64_t amnet_gasnet_off(const char *fn, gasnet_node_t node, const void *addr) {
    if (!amnet_gasnet_segs) {
        fprintf(stderr, "GASNet (amnet) error in %s: called before gasnet_attach\n", fn);
        amnet_exit(1);
    }
    uint32_t n = 0;
    amnet_size(&n);
    if (node >= n) {
        fprintf(stderr, "GASNet (amnet) error in %s: node %u does not exist (%u nodes)\n", fn,
                (unsigned)node, (unsigned)n);
        amnet_exit(1);
    }
    uintptr_t a = (uintptr_t)addr, base = (uintptr_t)amnet_gasnet_segs[node].addr;
    if (a < base) {
        fprintf(stderr, "GASNet (amnet) error in %s: address %p is below node %u's segment %p\n",
                fn, addr, (unsigned)node, amnet_gasnet_segs[node].addr);
        amnet_exit(1);
    }
    /* Past the end: amnet refuses it with the range and the segment's size. */
    return (uint64_t)(a - base) + amnet_gasnet_room;
}

/* Parameter, value, type and argument lists of 0..16 handler arguments. */
#define AMNET_GASNET_P0
#define AMNET_GASNET_P1 AMNET_GASNET_P0, gasnet_handlerarg_t a0
#define AMNET_GASNET_P2 AMNET_GASNET_P1, gasnet_handlerarg_t a1
#define AMNET_GASNET_P3 AMNET_GASNET_P2, gasnet_handlerarg_t a2
#define AMNET_GASNET_P4 AMNET_GASNET_P3, gasnet_handlerarg_t a3
#define AMNET_GASNET_P5 AMNET_GASNET_P4, gasnet_handlerarg_t a4
#define AMNET_GASNET_P6 AMNET_GASNET_P5, gasnet_handlerarg_t a5
#define AMNET_GASNET_P7 AMNET_GASNET_P6, gasnet_handlerarg_t a6
#define AMNET_GASNET_P8 AMNET_GASNET_P7, gasnet_handlerarg_t a7
#define AMNET_GASNET_P9 AMNET_GASNET_P8, gasnet_handlerarg_t a8
#define AMNET_GASNET_P10 AMNET_GASNET_P9, gasnet_handlerarg_t a9
#define AMNET_GASNET_P11 AMNET_GASNET_P10, gasnet_handlerarg_t a10
#define AMNET_GASNET_P12 AMNET_GASNET_P11, gasnet_handlerarg_t a11
#define AMNET_GASNET_P13 AMNET_GASNET_P12, gasnet_handlerarg_t a12
#define AMNET_GASNET_P14 AMNET_GASNET_P13, gasnet_handlerarg_t a13
#define AMNET_GASNET_P15 AMNET_GASNET_P14, gasnet_handlerarg_t a14
#define AMNET_GASNET_P16 AMNET_GASNET_P15, gasnet_handlerarg_t a15
#define AMNET_GASNET_V0
#define AMNET_GASNET_V1 AMNET_GASNET_V0, (uint32_t)(a0)
#define AMNET_GASNET_V2 AMNET_GASNET_V1, (uint32_t)(a1)
#define AMNET_GASNET_V3 AMNET_GASNET_V2, (uint32_t)(a2)
#define AMNET_GASNET_V4 AMNET_GASNET_V3, (uint32_t)(a3)
#define AMNET_GASNET_V5 AMNET_GASNET_V4, (uint32_t)(a4)
#define AMNET_GASNET_V6 AMNET_GASNET_V5, (uint32_t)(a5)
#define AMNET_GASNET_V7 AMNET_GASNET_V6, (uint32_t)(a6)
#define AMNET_GASNET_V8 AMNET_GASNET_V7, (uint32_t)(a7)
#define AMNET_GASNET_V9 AMNET_GASNET_V8, (uint32_t)(a8)
#define AMNET_GASNET_V10 AMNET_GASNET_V9, (uint32_t)(a9)
#define AMNET_GASNET_V11 AMNET_GASNET_V10, (uint32_t)(a10)
#define AMNET_GASNET_V12 AMNET_GASNET_V11, (uint32_t)(a11)
#define AMNET_GASNET_V13 AMNET_GASNET_V12, (uint32_t)(a12)
#define AMNET_GASNET_V14 AMNET_GASNET_V13, (uint32_t)(a13)
#define AMNET_GASNET_V15 AMNET_GASNET_V14, (uint32_t)(a14)
#define AMNET_GASNET_V16 AMNET_GASNET_V15, (uint32_t)(a15)
#define AMNET_GASNET_T0
#define AMNET_GASNET_T1 AMNET_GASNET_T0, gasnet_handlerarg_t
#define AMNET_GASNET_T2 AMNET_GASNET_T1, gasnet_handlerarg_t
#define AMNET_GASNET_T3 AMNET_GASNET_T2, gasnet_handlerarg_t
#define AMNET_GASNET_T4 AMNET_GASNET_T3, gasnet_handlerarg_t
#define AMNET_GASNET_T5 AMNET_GASNET_T4, gasnet_handlerarg_t
#define AMNET_GASNET_T6 AMNET_GASNET_T5, gasnet_handlerarg_t
#define AMNET_GASNET_T7 AMNET_GASNET_T6, gasnet_handlerarg_t
#define AMNET_GASNET_T8 AMNET_GASNET_T7, gasnet_handlerarg_t
#define AMNET_GASNET_T9 AMNET_GASNET_T8, gasnet_handlerarg_t
#define AMNET_GASNET_T10 AMNET_GASNET_T9, gasnet_handlerarg_t
#define AMNET_GASNET_T11 AMNET_GASNET_T10, gasnet_handlerarg_t
#define AMNET_GASNET_T12 AMNET_GASNET_T11, gasnet_handlerarg_t
#define AMNET_GASNET_T13 AMNET_GASNET_T12, gasnet_handlerarg_t
#define AMNET_GASNET_T14 AMNET_GASNET_T13, gasnet_handlerarg_t
#define AMNET_GASNET_T15 AMNET_GASNET_T14, gasnet_handlerarg_t
#define AMNET_GASNET_T16 AMNET_GASNET_T15, gasnet_handlerarg_t
#define AMNET_GASNET_A0
#define AMNET_GASNET_A1 AMNET_GASNET_A0, (gasnet_handlerarg_t)a_[0]
#define AMNET_GASNET_A2 AMNET_GASNET_A1, (gasnet_handlerarg_t)a_[1]
#define AMNET_GASNET_A3 AMNET_GASNET_A2, (gasnet_handlerarg_t)a_[2]
#define AMNET_GASNET_A4 AMNET_GASNET_A3, (gasnet_handlerarg_t)a_[3]
#define AMNET_GASNET_A5 AMNET_GASNET_A4, (gasnet_handlerarg_t)a_[4]
#define AMNET_GASNET_A6 AMNET_GASNET_A5, (gasnet_handlerarg_t)a_[5]
#define AMNET_GASNET_A7 AMNET_GASNET_A6, (gasnet_handlerarg_t)a_[6]
#define AMNET_GASNET_A8 AMNET_GASNET_A7, (gasnet_handlerarg_t)a_[7]
#define AMNET_GASNET_A9 AMNET_GASNET_A8, (gasnet_handlerarg_t)a_[8]
#define AMNET_GASNET_A10 AMNET_GASNET_A9, (gasnet_handlerarg_t)a_[9]
#define AMNET_GASNET_A11 AMNET_GASNET_A10, (gasnet_handlerarg_t)a_[10]
#define AMNET_GASNET_A12 AMNET_GASNET_A11, (gasnet_handlerarg_t)a_[11]
#define AMNET_GASNET_A13 AMNET_GASNET_A12, (gasnet_handlerarg_t)a_[12]
#define AMNET_GASNET_A14 AMNET_GASNET_A13, (gasnet_handlerarg_t)a_[13]
#define AMNET_GASNET_A15 AMNET_GASNET_A14, (gasnet_handlerarg_t)a_[14]
#define AMNET_GASNET_A16 AMNET_GASNET_A15, (gasnet_handlerarg_t)a_[15]

/* ---- core API: start-up ------------------------------------------------------------- */

/* This node's number (from gasnet_init on; a loopback request checks it). */
__attribute__((weak)) uint32_t amnet_gasnet_me;

static inline int gasnet_init(int *argc, char ***argv) {
    (void)argc, (void)argv;
    int rc = amnet_init();
    if (rc == AMNET_OK)
        rc = amnet_rank(&amnet_gasnet_me);
    return amnet_gasnet_code(rc);
}

static inline gasnet_node_t gasnet_mynode(void) {
    uint32_t r = 0;
    AMNET_GASNET_CHECK("gasnet_mynode", amnet_rank(&r));
    return r;
}

static inline gasnet_node_t gasnet_nodes(void) {
    uint32_t n = 0;
    AMNET_GASNET_CHECK("gasnet_nodes", amnet_size(&n));
    return n;
}

static inline char *gasnet_getenv(const char *name) { return getenv(name); }

/* The largest segment gasnet_attach accepts here: 1 GiB (amnet maps segments in shared
 * memory on smp and in private memory elsewhere; this is the layer's own limit). */
static inline uintptr_t gasnet_getMaxLocalSegmentSize(void) { return (uintptr_t)1 << 30; }
static inline uintptr_t gasnet_getMaxGlobalSegmentSize(void) { return (uintptr_t)1 << 30; }

static inline void gasnet_exit(int exitcode) { amnet_exit(exitcode); }

/* Wait modes: amnet's waits always spin, then yield, then sleep (spec/core.md §5), whichever
 * mode is asked for. */
#define GASNET_WAIT_SPIN 0
#define GASNET_WAIT_BLOCK 1
#define GASNET_WAIT_SPINBLOCK 2
static inline int gasnet_set_waitmode(int wait_mode) {
    return wait_mode == GASNET_WAIT_SPIN || wait_mode == GASNET_WAIT_BLOCK ||
                   wait_mode == GASNET_WAIT_SPINBLOCK
               ? GASNET_OK
               : GASNET_ERR_BAD_ARG;
}

/* A Medium handler's buffer, which GASNet hands over writable: the calling thread's copy of
 * the payload (amnet's own may be a slot of a shared ring, read-only). */
#ifdef __cplusplus
#define AMNET_GASNET_THREAD_LOCAL thread_local
#else
#define AMNET_GASNET_THREAD_LOCAL _Thread_local
#endif
static AMNET_GASNET_THREAD_LOCAL void *amnet_gasnet_medium_buf;
static AMNET_GASNET_THREAD_LOCAL size_t amnet_gasnet_medium_cap;

static inline void *amnet_gasnet_medium_copy(const void *payload, size_t nbytes) {
    if (nbytes > amnet_gasnet_medium_cap) {
        size_t cap = 0;
        if (amnet_max_medium(&cap) != AMNET_OK || cap < nbytes)
            cap = nbytes;
        void *p = realloc(amnet_gasnet_medium_buf, cap);
        if (!p) {
            fprintf(stderr, "GASNet (amnet) error in a Medium handler: out of memory\n");
            amnet_exit(1);
        }
        amnet_gasnet_medium_buf = p;
        amnet_gasnet_medium_cap = cap;
    }
    if (nbytes > 0)
        memcpy(amnet_gasnet_medium_buf, payload, nbytes);
    return amnet_gasnet_medium_buf;
}

/* The one amnet handler behind every GASNet handler: it calls the client's function for the
 * message's index with the signature of its category and argument count (a Medium's payload
 * copied where the handler may write it). */
static inline void amnet_gasnet_dispatch(amnet_token_t *token, const uint32_t *a_, size_t nargs,
                                         const void *payload, size_t nbytes) {
    amnet_token_info_t info;
    AMNET_GASNET_CHECK("a GASNet handler", amnet_token_info(token, &info));
    amnet_gasnet_fn_t f = amnet_gasnet_handlers[info.handler & 0xff];
    gasnet_token_t t = token;
    /* A Long's payload lies in this node's segment, writable as it is. */
    void *buf = info.category == AMNET_CATEGORY_MEDIUM
                    ? amnet_gasnet_medium_copy(payload, nbytes)
                    : (void *)payload;
    if (info.category == AMNET_CATEGORY_SHORT) {
        switch (nargs) {
#define AMNET_GASNET_SHORT_CASE(n)                                                           \
    case n: ((void (*)(gasnet_token_t AMNET_GASNET_T##n))f)(t AMNET_GASNET_A##n); return;
            AMNET_GASNET_SHORT_CASE(0) AMNET_GASNET_SHORT_CASE(1) AMNET_GASNET_SHORT_CASE(2)
            AMNET_GASNET_SHORT_CASE(3) AMNET_GASNET_SHORT_CASE(4) AMNET_GASNET_SHORT_CASE(5)
            AMNET_GASNET_SHORT_CASE(6) AMNET_GASNET_SHORT_CASE(7) AMNET_GASNET_SHORT_CASE(8)
            AMNET_GASNET_SHORT_CASE(9) AMNET_GASNET_SHORT_CASE(10) AMNET_GASNET_SHORT_CASE(11)
            AMNET_GASNET_SHORT_CASE(12) AMNET_GASNET_SHORT_CASE(13) AMNET_GASNET_SHORT_CASE(14)
            AMNET_GASNET_SHORT_CASE(15) AMNET_GASNET_SHORT_CASE(16)
#undef AMNET_GASNET_SHORT_CASE
        }
    } else {
        switch (nargs) {
#define AMNET_GASNET_PAYLOAD_CASE(n)                                                         \
    case n:                                                                                  \
        ((void (*)(gasnet_token_t, void *, size_t AMNET_GASNET_T##n))f)(t, buf,             \
                                                                        nbytes AMNET_GASNET_A##n); \
        return;
            AMNET_GASNET_PAYLOAD_CASE(0) AMNET_GASNET_PAYLOAD_CASE(1) AMNET_GASNET_PAYLOAD_CASE(2)
            AMNET_GASNET_PAYLOAD_CASE(3) AMNET_GASNET_PAYLOAD_CASE(4) AMNET_GASNET_PAYLOAD_CASE(5)
            AMNET_GASNET_PAYLOAD_CASE(6) AMNET_GASNET_PAYLOAD_CASE(7) AMNET_GASNET_PAYLOAD_CASE(8)
            AMNET_GASNET_PAYLOAD_CASE(9) AMNET_GASNET_PAYLOAD_CASE(10) AMNET_GASNET_PAYLOAD_CASE(11)
            AMNET_GASNET_PAYLOAD_CASE(12) AMNET_GASNET_PAYLOAD_CASE(13)
            AMNET_GASNET_PAYLOAD_CASE(14) AMNET_GASNET_PAYLOAD_CASE(15)
            AMNET_GASNET_PAYLOAD_CASE(16)
#undef AMNET_GASNET_PAYLOAD_CASE
        }
    }
}

/* Collective: register the handlers of `table` (an index of 0 gets a free one, written back)
 * and a segment of `segsize` bytes (a multiple of GASNET_PAGESIZE) on every node; then every
 * node learns every segment's address. `minheapoffset` has no meaning here. */
static inline int gasnet_attach(gasnet_handlerentry_t *table, int numentries, uintptr_t segsize,
                                uintptr_t minheapoffset) {
    (void)minheapoffset;
    uint32_t me = 0, n = 0;
    int rc = amnet_rank(&me);
    if (rc != AMNET_OK)
        return amnet_gasnet_code(rc);
    amnet_size(&n);
    if (numentries < 0 || (numentries > 0 && !table) || segsize % GASNET_PAGESIZE != 0 ||
        segsize > gasnet_getMaxLocalSegmentSize())
        return GASNET_ERR_BAD_ARG;
    amnet_handler_entry_t *entries =
        (amnet_handler_entry_t *)calloc((size_t)numentries + 1, sizeof *entries);
    if (!entries)
        return GASNET_ERR_RESOURCE;
    amnet_gasnet_fn_t *handlers = amnet_gasnet_handlers;
    unsigned next_free = AMNET_LAST_CLIENT_HANDLER;
    for (int i = 0; i < numentries; i++) {
        if (table[i].index != 0 && table[i].index < AMNET_FIRST_CLIENT_HANDLER) {
            free(entries);
            return GASNET_ERR_BAD_ARG;
        }
    }
    for (int i = 0; i < numentries; i++) {
        if (table[i].index == 0) {
            int taken;
            do { /* the highest index no entry names */
                taken = 0;
                for (int j = 0; j < numentries; j++)
                    taken |= table[j].index == next_free;
                if (taken)
                    next_free--;
            } while (taken && next_free >= AMNET_FIRST_CLIENT_HANDLER);
            if (next_free < AMNET_FIRST_CLIENT_HANDLER) {
                free(entries);
                return GASNET_ERR_RESOURCE;
            }
            table[i].index = (gasnet_handler_t)next_free;
        }
        handlers[table[i].index] = table[i].fnptr;
        entries[i].index = table[i].index;
        entries[i].handler = amnet_gasnet_dispatch;
    }
    /* The room before the client's segment holds every node's (address, size). */
    uintptr_t room = ((uintptr_t)n * sizeof(gasnet_seginfo_t) + GASNET_PAGESIZE - 1) /
                     GASNET_PAGESIZE * GASNET_PAGESIZE;
    rc = amnet_attach(entries, (size_t)numentries, room + segsize);
    free(entries);
    if (rc != AMNET_OK)
        return amnet_gasnet_code(rc);
    char *base = 0;
    AMNET_GASNET_CHECK("gasnet_attach", amnet_segment((void **)&base, 0));
    gasnet_seginfo_t mine = {base + room, segsize};
    for (uint32_t r = 0; r < n; r++)
        AMNET_GASNET_CHECK("gasnet_attach",
                           amnet_put_nbi(r, (uint64_t)me * sizeof mine, &mine, sizeof mine));
    AMNET_GASNET_CHECK("gasnet_attach", amnet_sync_nbi());
    AMNET_GASNET_CHECK("gasnet_attach", amnet_barrier());
    gasnet_seginfo_t *segs = (gasnet_seginfo_t *)malloc(n * sizeof *segs);
    if (!segs) {
        fprintf(stderr, "GASNet (amnet) error in gasnet_attach: out of memory\n");
        amnet_exit(1);
    }
    memcpy(segs, base, n * sizeof *segs);
    uintptr_t max_long = segsize;
    for (uint32_t r = 0; r < n; r++)
        if (segs[r].size < max_long)
            max_long = segs[r].size;
    amnet_gasnet_room = room;
    amnet_gasnet_max_long = max_long;
    amnet_gasnet_segs = segs;
    /* No node sends before every node's layer state is set: a request handled inside the
     * barrier above (its waits run handlers) would find it unset. */
    AMNET_GASNET_CHECK("gasnet_attach", amnet_barrier());
    return GASNET_OK;
}

static inline int gasnet_getSegmentInfo(gasnet_seginfo_t *seginfo_table, int numentries) {
    if (!amnet_gasnet_segs)
        return GASNET_ERR_NOT_INIT;
    if (numentries < 0 || (numentries > 0 && !seginfo_table))
        return GASNET_ERR_BAD_ARG;
    gasnet_node_t n = gasnet_nodes();
    for (int i = 0; i < numentries && (gasnet_node_t)i < n; i++)
        seginfo_table[i] = amnet_gasnet_segs[i];
    return GASNET_OK;
}

/* ---- core API: active messages ------------------------------------------------------- */

static inline size_t gasnet_AMMaxArgs(void) { return AMNET_MAX_ARGS; }
static inline size_t gasnet_AMMaxMedium(void) {
    size_t m = 0;
    AMNET_GASNET_CHECK("gasnet_AMMaxMedium", amnet_max_medium(&m));
    return m;
}
/* The smallest segment of any node: a Long payload to any node fits. */
static inline size_t gasnet_AMMaxLongRequest(void) { return amnet_gasnet_max_long; }
static inline size_t gasnet_AMMaxLongReply(void) { return amnet_gasnet_max_long; }

static inline int gasnet_AMPoll(void) { return amnet_gasnet_code(amnet_poll(0)); }

/* Poll until `cond` holds, yielding the processor when a poll ran no handler. */
#define GASNET_BLOCKUNTIL(cond)                                                              \
    do {                                                                                     \
        while (!(cond)) {                                                                    \
            size_t amnet_ran_ = 0;                                                           \
            int amnet_rc_ = amnet_poll(&amnet_ran_);                                         \
            if (amnet_rc_ != AMNET_OK)                                                       \
                amnet_gasnet_fatal("GASNET_BLOCKUNTIL", amnet_rc_);                          \
            if (!amnet_ran_)                                                                 \
                sched_yield();                                                               \
        }                                                                                    \
    } while (0)

static inline int gasnet_AMGetMsgSource(gasnet_token_t token, gasnet_node_t *srcindex) {
    if (!srcindex)
        return GASNET_ERR_BAD_ARG;
    return amnet_gasnet_code(amnet_token_source(token, srcindex));
}

/* A request sent with status `rc`: a request to this node has its handler run before the
 * call returns (one poll), as GASNet's loopback did; clients wait on flags that such a
 * handler sets while making calls that do not poll (a put on smp is a copy). */
static inline int amnet_gasnet_sent(gasnet_node_t dest, int rc) {
    if (rc == AMNET_OK && dest == amnet_gasnet_me)
        rc = amnet_poll(NULL);
    return amnet_gasnet_code(rc);
}

static inline int amnet_gasnet_req_long(const char *fn, gasnet_node_t dest, gasnet_handler_t h,
                                        void *src, size_t nbytes, void *dest_addr,
                                        const uint32_t *a, size_t nargs) {
    uint64_t off = amnet_gasnet_off(fn, dest, dest_addr);
    return amnet_gasnet_sent(dest, amnet_request_long(dest, h, a, nargs, src, nbytes, off));
}

static inline int amnet_gasnet_rep_long(const char *fn, gasnet_token_t token, gasnet_handler_t h,
                                        void *src, size_t nbytes, void *dest_addr,
                                        const uint32_t *a, size_t nargs) {
    gasnet_node_t dest = 0;
    int rc = amnet_token_source(token, &dest);
    if (rc != AMNET_OK)
        return amnet_gasnet_code(rc);
    uint64_t off = amnet_gasnet_off(fn, dest, dest_addr);
    return amnet_gasnet_code(amnet_reply_long(token, h, a, nargs, src, nbytes, off));
}

/* gasnet_AM{Request,Reply}{Short,Medium,Long}{0..16}, and the asynchronous Long request (a
 * Long request here: the payload is copied before the call returns). */
#define AMNET_GASNET_AM(n)                                                                   \
    static inline int gasnet_AMRequestShort##n(gasnet_node_t dest,                           \
                                               gasnet_handler_t handler AMNET_GASNET_P##n) { \
        const uint32_t a_[] = {0 AMNET_GASNET_V##n};                                         \
        return amnet_gasnet_sent(dest, amnet_request_short(dest, handler, a_ + 1, n));      \
    }                                                                                        \
    static inline int gasnet_AMRequestMedium##n(gasnet_node_t dest, gasnet_handler_t handler, \
                                                void *source_addr,                           \
                                                size_t nbytes AMNET_GASNET_P##n) {           \
        const uint32_t a_[] = {0 AMNET_GASNET_V##n};                                         \
        return amnet_gasnet_sent(                                                            \
            dest, amnet_request_medium(dest, handler, a_ + 1, n, source_addr, nbytes));      \
    }                                                                                        \
    static inline int gasnet_AMRequestLong##n(gasnet_node_t dest, gasnet_handler_t handler,  \
                                              void *source_addr, size_t nbytes,              \
                                              void *dest_addr AMNET_GASNET_P##n) {           \
        const uint32_t a_[] = {0 AMNET_GASNET_V##n};                                         \
        return amnet_gasnet_req_long("gasnet_AMRequestLong" #n, dest, handler, source_addr,  \
                                     nbytes, dest_addr, a_ + 1, n);                          \
    }                                                                                        \
    static inline int gasnet_AMRequestLongAsync##n(                                          \
        gasnet_node_t dest, gasnet_handler_t handler, void *source_addr, size_t nbytes,      \
        void *dest_addr AMNET_GASNET_P##n) {                                                 \
        const uint32_t a_[] = {0 AMNET_GASNET_V##n};                                         \
        return amnet_gasnet_req_long("gasnet_AMRequestLongAsync" #n, dest, handler,          \
                                     source_addr, nbytes, dest_addr, a_ + 1, n);             \
    }                                                                                        \
    static inline int gasnet_AMReplyShort##n(gasnet_token_t token,                           \
                                             gasnet_handler_t handler AMNET_GASNET_P##n) {   \
        const uint32_t a_[] = {0 AMNET_GASNET_V##n};                                         \
        return amnet_gasnet_code(amnet_reply_short(token, handler, a_ + 1, n));              \
    }                                                                                        \
    static inline int gasnet_AMReplyMedium##n(gasnet_token_t token, gasnet_handler_t handler, \
                                              void *source_addr,                             \
                                              size_t nbytes AMNET_GASNET_P##n) {             \
        const uint32_t a_[] = {0 AMNET_GASNET_V##n};                                         \
        return amnet_gasnet_code(                                                            \
            amnet_reply_medium(token, handler, a_ + 1, n, source_addr, nbytes));             \
    }                                                                                        \
    static inline int gasnet_AMReplyLong##n(gasnet_token_t token, gasnet_handler_t handler,  \
                                            void *source_addr, size_t nbytes,                \
                                            void *dest_addr AMNET_GASNET_P##n) {             \
        const uint32_t a_[] = {0 AMNET_GASNET_V##n};                                         \
        return amnet_gasnet_rep_long("gasnet_AMReplyLong" #n, token, handler, source_addr,   \
                                     nbytes, dest_addr, a_ + 1, n);                          \
    }
AMNET_GASNET_AM(0)
AMNET_GASNET_AM(1)
AMNET_GASNET_AM(2)
AMNET_GASNET_AM(3)
AMNET_GASNET_AM(4)
AMNET_GASNET_AM(5)
AMNET_GASNET_AM(6)
AMNET_GASNET_AM(7)
AMNET_GASNET_AM(8)
AMNET_GASNET_AM(9)
AMNET_GASNET_AM(10)
AMNET_GASNET_AM(11)
AMNET_GASNET_AM(12)
AMNET_GASNET_AM(13)
AMNET_GASNET_AM(14)
AMNET_GASNET_AM(15)
AMNET_GASNET_AM(16)
#undef AMNET_GASNET_AM

/* ---- core API: handler-safe locks ---------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
} gasnet_hsl_t;
#define GASNET_HSL_INITIALIZER {PTHREAD_MUTEX_INITIALIZER}

static inline void gasnet_hsl_init(gasnet_hsl_t *hsl) {
    if (pthread_mutex_init(&hsl->lock, 0) != 0) {
        fprintf(stderr, "GASNet (amnet) error in gasnet_hsl_init: pthread_mutex_init failed\n");
        amnet_exit(1);
    }
}
static inline void gasnet_hsl_destroy(gasnet_hsl_t *hsl) { pthread_mutex_destroy(&hsl->lock); }
static inline void gasnet_hsl_lock(gasnet_hsl_t *hsl) { pthread_mutex_lock(&hsl->lock); }
static inline void gasnet_hsl_unlock(gasnet_hsl_t *hsl) { pthread_mutex_unlock(&hsl->lock); }
static inline int gasnet_hsl_trylock(gasnet_hsl_t *hsl) {
    return pthread_mutex_trylock(&hsl->lock) == 0 ? GASNET_OK : GASNET_ERR_NOT_READY;
}

/* ---- extended API: put/get ----------------------------------------------------------- */

static inline void gasnet_put(gasnet_node_t node, void *dest, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_put",
                       amnet_put(node, amnet_gasnet_off("gasnet_put", node, dest), src, nbytes));
}
static inline void gasnet_put_bulk(gasnet_node_t node, void *dest, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_put_bulk",
                       amnet_put(node, amnet_gasnet_off("gasnet_put_bulk", node, dest), src,
                                 nbytes));
}
static inline void gasnet_get(void *dest, gasnet_node_t node, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_get",
                       amnet_get(dest, node, amnet_gasnet_off("gasnet_get", node, src), nbytes));
}
static inline void gasnet_get_bulk(void *dest, gasnet_node_t node, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_get_bulk",
                       amnet_get(dest, node, amnet_gasnet_off("gasnet_get_bulk", node, src),
                                 nbytes));
}

static inline gasnet_handle_t gasnet_put_nb(gasnet_node_t node, void *dest, void *src,
                                            size_t nbytes) {
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_put_nb",
                       amnet_put_nb(node, amnet_gasnet_off("gasnet_put_nb", node, dest), src,
                                    nbytes, &h));
    return h;
}
static inline gasnet_handle_t gasnet_put_nb_bulk(gasnet_node_t node, void *dest, void *src,
                                                 size_t nbytes) {
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_put_nb_bulk",
                       amnet_put_nb(node, amnet_gasnet_off("gasnet_put_nb_bulk", node, dest),
                                    src, nbytes, &h));
    return h;
}
static inline gasnet_handle_t gasnet_get_nb(void *dest, gasnet_node_t node, void *src,
                                            size_t nbytes) {
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_get_nb",
                       amnet_get_nb(dest, node, amnet_gasnet_off("gasnet_get_nb", node, src),
                                    nbytes, &h));
    return h;
}
static inline gasnet_handle_t gasnet_get_nb_bulk(void *dest, gasnet_node_t node, void *src,
                                                 size_t nbytes) {
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_get_nb_bulk",
                       amnet_get_nb(dest, node, amnet_gasnet_off("gasnet_get_nb_bulk", node, src),
                                    nbytes, &h));
    return h;
}

static inline void gasnet_put_nbi(gasnet_node_t node, void *dest, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_put_nbi",
                       amnet_put_nbi(node, amnet_gasnet_off("gasnet_put_nbi", node, dest), src,
                                     nbytes));
}
static inline void gasnet_put_nbi_bulk(gasnet_node_t node, void *dest, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_put_nbi_bulk",
                       amnet_put_nbi(node, amnet_gasnet_off("gasnet_put_nbi_bulk", node, dest),
                                     src, nbytes));
}
static inline void gasnet_get_nbi(void *dest, gasnet_node_t node, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_get_nbi",
                       amnet_get_nbi(dest, node, amnet_gasnet_off("gasnet_get_nbi", node, src),
                                     nbytes));
}
static inline void gasnet_get_nbi_bulk(void *dest, gasnet_node_t node, void *src, size_t nbytes) {
    AMNET_GASNET_CHECK("gasnet_get_nbi_bulk",
                       amnet_get_nbi(dest, node,
                                     amnet_gasnet_off("gasnet_get_nbi_bulk", node, src), nbytes));
}

/* The low `nbytes` bytes of `value` as an integer of that size, in memory order. */
static inline int amnet_gasnet_val_bytes(gasnet_register_value_t value, size_t nbytes,
                                         unsigned char *out) {
    switch (nbytes) {
    case 1: { uint8_t v = (uint8_t)value; memcpy(out, &v, 1); return 1; }
    case 2: { uint16_t v = (uint16_t)value; memcpy(out, &v, 2); return 1; }
    case 4: { uint32_t v = (uint32_t)value; memcpy(out, &v, 4); return 1; }
    case 8: { uint64_t v = (uint64_t)value; memcpy(out, &v, 8); return 1; }
    default: return 0;
    }
}

static inline void amnet_gasnet_val_check(const char *fn, size_t nbytes) {
    if (nbytes != 1 && nbytes != 2 && nbytes != 4 && nbytes != 8) {
        fprintf(stderr, "GASNet (amnet) error in %s: nbytes %zu is not 1, 2, 4 or 8\n", fn,
                nbytes);
        amnet_exit(1);
    }
}

static inline void gasnet_put_val(gasnet_node_t node, void *dest, gasnet_register_value_t value,
                                  size_t nbytes) {
    unsigned char b[8];
    amnet_gasnet_val_check("gasnet_put_val", nbytes);
    amnet_gasnet_val_bytes(value, nbytes, b);
    gasnet_put(node, dest, b, nbytes);
}
static inline gasnet_handle_t gasnet_put_nb_val(gasnet_node_t node, void *dest,
                                                gasnet_register_value_t value, size_t nbytes) {
    unsigned char b[8];
    amnet_gasnet_val_check("gasnet_put_nb_val", nbytes);
    amnet_gasnet_val_bytes(value, nbytes, b);
    return gasnet_put_nb(node, dest, b, nbytes); /* the source is consumed on return */
}
static inline void gasnet_put_nbi_val(gasnet_node_t node, void *dest,
                                      gasnet_register_value_t value, size_t nbytes) {
    unsigned char b[8];
    amnet_gasnet_val_check("gasnet_put_nbi_val", nbytes);
    amnet_gasnet_val_bytes(value, nbytes, b);
    gasnet_put_nbi(node, dest, b, nbytes);
}
/* The `nbytes`-byte integer in memory order at `b`. */
static inline gasnet_register_value_t amnet_gasnet_val_decode(const unsigned char *b,
                                                              size_t nbytes) {
    switch (nbytes) {
    case 1: { uint8_t v; memcpy(&v, b, 1); return v; }
    case 2: { uint16_t v; memcpy(&v, b, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, b, 4); return v; }
    default: { uint64_t v; memcpy(&v, b, 8); return v; }
    }
}

static inline gasnet_register_value_t gasnet_get_val(gasnet_node_t node, void *src,
                                                     size_t nbytes) {
    unsigned char b[8] = {0};
    amnet_gasnet_val_check("gasnet_get_val", nbytes);
    gasnet_get(b, node, src, nbytes);
    return amnet_gasnet_val_decode(b, nbytes);
}

/* A value get in flight: its handle, its size and the bytes it lands in. */
struct amnet_gasnet_valget {
    amnet_handle_t handle;
    size_t nbytes;
    unsigned char bytes[8];
};
typedef struct amnet_gasnet_valget *gasnet_valget_handle_t;

static inline gasnet_valget_handle_t gasnet_get_nb_val(gasnet_node_t node, void *src,
                                                       size_t nbytes) {
    amnet_gasnet_val_check("gasnet_get_nb_val", nbytes);
    gasnet_valget_handle_t v =
        (gasnet_valget_handle_t)calloc(1, sizeof(struct amnet_gasnet_valget));
    if (!v) {
        fprintf(stderr, "GASNet (amnet) error in gasnet_get_nb_val: out of memory\n");
        amnet_exit(1);
    }
    v->nbytes = nbytes;
    AMNET_GASNET_CHECK("gasnet_get_nb_val",
                       amnet_get_nb(v->bytes, node, amnet_gasnet_off("gasnet_get_nb_val", node, src),
                                    nbytes, &v->handle));
    return v;
}

static inline gasnet_register_value_t gasnet_wait_syncnb_valget(gasnet_valget_handle_t handle) {
    AMNET_GASNET_CHECK("gasnet_wait_syncnb_valget", amnet_sync(&handle->handle));
    gasnet_register_value_t v = amnet_gasnet_val_decode(handle->bytes, handle->nbytes);
    free(handle);
    return v;
}

/* memset: puts of a local block of `val`, complete on return (the handle forms return the
 * invalid handle). */
static inline void gasnet_memset(gasnet_node_t node, void *dest, int val, size_t nbytes) {
    unsigned char block[4096];
    memset(block, val, sizeof block);
    for (size_t done = 0; done < nbytes;) {
        size_t n = nbytes - done < sizeof block ? nbytes - done : sizeof block;
        gasnet_put_nbi(node, (char *)dest + done, block, n);
        done += n;
    }
    AMNET_GASNET_CHECK("gasnet_memset", amnet_sync_nbi());
}
static inline gasnet_handle_t gasnet_memset_nb(gasnet_node_t node, void *dest, int val,
                                               size_t nbytes) {
    gasnet_memset(node, dest, val, nbytes);
    return GASNET_INVALID_HANDLE;
}
static inline void gasnet_memset_nbi(gasnet_node_t node, void *dest, int val, size_t nbytes) {
    gasnet_memset(node, dest, val, nbytes);
}

/* ---- extended API: synchronization --------------------------------------------------- */

static inline void gasnet_wait_syncnb(gasnet_handle_t handle) {
    AMNET_GASNET_CHECK("gasnet_wait_syncnb", amnet_sync(&handle));
}
static inline int gasnet_try_syncnb(gasnet_handle_t handle) {
    int rc = amnet_try_sync(&handle);
    if (rc != AMNET_OK && rc != AMNET_NOT_READY)
        amnet_gasnet_fatal("gasnet_try_syncnb", rc);
    return amnet_gasnet_code(rc);
}
static inline void gasnet_wait_syncnb_all(gasnet_handle_t *phandle, size_t numhandles) {
    AMNET_GASNET_CHECK("gasnet_wait_syncnb_all", amnet_sync_all(phandle, numhandles));
}
static inline void gasnet_wait_syncnb_some(gasnet_handle_t *phandle, size_t numhandles) {
    AMNET_GASNET_CHECK("gasnet_wait_syncnb_some", amnet_sync_some(phandle, numhandles));
}
static inline int gasnet_try_syncnb_all(gasnet_handle_t *phandle, size_t numhandles) {
    int rc = amnet_try_sync_all(phandle, numhandles);
    if (rc != AMNET_OK && rc != AMNET_NOT_READY)
        amnet_gasnet_fatal("gasnet_try_syncnb_all", rc);
    return amnet_gasnet_code(rc);
}
static inline int gasnet_try_syncnb_some(gasnet_handle_t *phandle, size_t numhandles) {
    int rc = amnet_try_sync_some(phandle, numhandles);
    if (rc != AMNET_OK && rc != AMNET_NOT_READY)
        amnet_gasnet_fatal("gasnet_try_syncnb_some", rc);
    return amnet_gasnet_code(rc);
}

/* amnet keeps one implicit handle per thread for puts and gets together: syncing the gets or
 * the puts syncs both. */
static inline void gasnet_wait_syncnbi_all(void) {
    AMNET_GASNET_CHECK("gasnet_wait_syncnbi_all", amnet_sync_nbi());
}
static inline void gasnet_wait_syncnbi_puts(void) {
    AMNET_GASNET_CHECK("gasnet_wait_syncnbi_puts", amnet_sync_nbi());
}
static inline void gasnet_wait_syncnbi_gets(void) {
    AMNET_GASNET_CHECK("gasnet_wait_syncnbi_gets", amnet_sync_nbi());
}
static inline int amnet_gasnet_try_nbi(const char *fn) {
    int rc = amnet_try_sync_nbi();
    if (rc != AMNET_OK && rc != AMNET_NOT_READY)
        amnet_gasnet_fatal(fn, rc);
    return amnet_gasnet_code(rc);
}
static inline int gasnet_try_syncnbi_all(void) { return amnet_gasnet_try_nbi("gasnet_try_syncnbi_all"); }
static inline int gasnet_try_syncnbi_puts(void) { return amnet_gasnet_try_nbi("gasnet_try_syncnbi_puts"); }
static inline int gasnet_try_syncnbi_gets(void) { return amnet_gasnet_try_nbi("gasnet_try_syncnbi_gets"); }

static inline void gasnet_begin_nbi_accessregion(void) {
    AMNET_GASNET_CHECK("gasnet_begin_nbi_accessregion", amnet_begin_nbi_region());
}
static inline gasnet_handle_t gasnet_end_nbi_accessregion(void) {
    gasnet_handle_t h = GASNET_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_end_nbi_accessregion", amnet_end_nbi_region(&h));
    return h;
}

/* ---- extended API: barriers ---------------------------------------------------------- */

static inline void gasnet_barrier_notify(int id, int flags) {
    AMNET_GASNET_CHECK("gasnet_barrier_notify", amnet_barrier_notify((uint32_t)id, (uint32_t)flags));
}
static inline int gasnet_barrier_wait(int id, int flags) {
    int rc = amnet_barrier_wait((uint32_t)id, (uint32_t)flags);
    if (rc != AMNET_OK && rc != AMNET_ERR_BARRIER_MISMATCH)
        amnet_gasnet_fatal("gasnet_barrier_wait", rc);
    return amnet_gasnet_code(rc);
}
/* GASNet's own headers implement the extended API as gasnete_* functions behind the gasnet_*
 * names, and some clients (GASNet's test programs among them) call those names: the same
 * functions here. */
#define gasnete_barrier_notify gasnet_barrier_notify
#define gasnete_barrier_wait gasnet_barrier_wait
#define gasnete_barrier_try gasnet_barrier_try

/* The outcome of the last completed barrier: GASNET_BARRIERFLAG_ANONYMOUS when every node
 * notified it anonymously (then *id is 0), else 0 with the named id in *id. */
static inline int gasnet_barrier_result(int *id) {
    uint32_t f = 0, i = 0;
    AMNET_GASNET_CHECK("gasnet_barrier_result", amnet_barrier_result(&f, &i));
    if (id)
        *id = (int)i;
    return f ? GASNET_BARRIERFLAG_ANONYMOUS : 0;
}
static inline int gasnet_barrier_try(int id, int flags) {
    int rc = amnet_barrier_try((uint32_t)id, (uint32_t)flags);
    if (rc != AMNET_OK && rc != AMNET_NOT_READY && rc != AMNET_ERR_BARRIER_MISMATCH)
        amnet_gasnet_fatal("gasnet_barrier_try", rc);
    return amnet_gasnet_code(rc);
}

/* ---- extended API: collectives (gasnet_coll_*, the GASNet collectives design notes) ----- */

typedef uint32_t gasnet_image_t;
typedef amnet_team_t gasnet_team_handle_t;
/* The team of every node: 0, as in GASNet 1.8, whose clients also pass a literal 0. */
#define GASNET_TEAM_ALL ((gasnet_team_handle_t)0)
/* amnet's id of a GASNet team handle. */
static inline amnet_team_t amnet_gasnet_team(gasnet_team_handle_t t) {
    return t == 0 ? AMNET_TEAM_WORLD : t;
}
typedef amnet_coll_handle_t gasnet_coll_handle_t;
#define GASNET_COLL_INVALID_HANDLE ((gasnet_coll_handle_t)0)

/* The sync, addressing and other flags of an initiation call (amnet's values). */
#define GASNET_COLL_IN_NOSYNC AMNET_COLL_IN_NOSYNC
#define GASNET_COLL_IN_MYSYNC AMNET_COLL_IN_MYSYNC
#define GASNET_COLL_IN_ALLSYNC AMNET_COLL_IN_ALLSYNC
#define GASNET_COLL_OUT_NOSYNC AMNET_COLL_OUT_NOSYNC
#define GASNET_COLL_OUT_MYSYNC AMNET_COLL_OUT_MYSYNC
#define GASNET_COLL_OUT_ALLSYNC AMNET_COLL_OUT_ALLSYNC
#define GASNET_COLL_SYNC_FLAG_MASK 0x3F
#define GASNET_COLL_SINGLE AMNET_COLL_SINGLE
#define GASNET_COLL_LOCAL AMNET_COLL_LOCAL
#define GASNET_COLL_AGGREGATE AMNET_COLL_AGGREGATE
#define GASNET_COLL_ALL_THREADS AMNET_COLL_ALL_THREADS
#define GASNET_COLL_SRC_IN_SEGMENT AMNET_COLL_SRC_IN_SEGMENT
#define GASNET_COLL_DST_IN_SEGMENT AMNET_COLL_DST_IN_SEGMENT
/* The flags of a function-table entry. */
#define GASNET_COLL_AMSAFE AMNET_COLL_AMSAFE
#define GASNET_COLL_NONCOMM AMNET_COLL_NONCOMM

/* A (prefix) reduction function, as the design notes define it. */
typedef void(gasnet_coll_reduce_fn)(void *results, size_t result_count, const void *left_operands,
                                    size_t left_count, const void *right_operands,
                                    size_t elem_size, int flags, int arg);
typedef gasnet_coll_reduce_fn *gasnet_coll_reduce_fn_t;
/* The table's function pointer type: any function, called as a gasnet_coll_reduce_fn. */
typedef void (*gasnet_coll_fn_t)();
typedef struct {
    gasnet_coll_fn_t fnptr;
    unsigned int flags;
} gasnet_coll_fn_entry_t;
/* A function's index in the table given to gasnet_coll_init. */
typedef gasnet_handlerarg_t gasnet_coll_fn_handle_t;

/* Image mode (GASNet 1.x): a thread whose gasnet_coll_init had images takes part in every
 * collective itself, so its calls are ALL_THREADS calls. Its image, and this node's first. */
__attribute__((weak)) __thread int amnet_gasnet_imaged;
__attribute__((weak)) __thread uint32_t amnet_gasnet_my_image;
__attribute__((weak)) uint32_t amnet_gasnet_first_image;

/* The flags of a call: ALL_THREADS added in image mode. */
static inline uint32_t amnet_gasnet_cflags(int flags) {
    return (uint32_t)flags | (amnet_gasnet_imaged ? AMNET_COLL_ALL_THREADS : 0);
}

/* The calling image's place among this node's images (its entry of a LOCAL list). */
static inline size_t amnet_gasnet_local_image(void) {
    return (size_t)(amnet_gasnet_my_image - amnet_gasnet_first_image);
}

/* Initialize the collectives: collective, after gasnet_attach, once per node (images NULL) or
 * once on every image thread (images: gasnet_nodes() counts; my_image: the caller's). The
 * table's function i is the func argument i of the computational collectives. */
static inline void gasnet_coll_init(const gasnet_image_t images[], gasnet_image_t my_image,
                                    const gasnet_coll_fn_entry_t fn_tbl[], size_t fn_count,
                                    int init_flags) {
    if (init_flags != 0) {
        fprintf(stderr, "GASNet (amnet) error in gasnet_coll_init: init_flags %d; it must be 0\n",
                init_flags);
        fflush(stderr);
        amnet_exit(1);
    }
    /* Every thread of a node may make the call; without images, the node's first call
     * initializes and the others find it done. */
    if (!images && amnet_coll_images(NULL, NULL, NULL) == AMNET_OK)
        return;
    amnet_coll_fn_entry_t *fns = NULL;
    if (fn_count > 0) {
        fns = (amnet_coll_fn_entry_t *)calloc(fn_count, sizeof *fns);
        if (!fns) {
            fprintf(stderr, "GASNet (amnet) error in gasnet_coll_init: out of memory\n");
            amnet_exit(1);
        }
        for (size_t i = 0; i < fn_count; i++) {
            fns[i].fnptr = (amnet_coll_fn)fn_tbl[i].fnptr;
            fns[i].flags = fn_tbl[i].flags;
        }
    }
    /* my_image is ignored without images. */
    int rc = amnet_coll_init(images, images ? gasnet_nodes() : 0, images ? my_image : 0, fns,
                             fn_count);
    free(fns);
    if (rc != AMNET_OK)
        amnet_gasnet_fatal("gasnet_coll_init", rc);
    if (images) {
        uint32_t first = 0;
        for (gasnet_node_t n = 0; n < amnet_gasnet_me; n++)
            first += images[n];
        amnet_gasnet_first_image = first;
        amnet_gasnet_my_image = my_image;
        amnet_gasnet_imaged = 1;
    }
}

/* amnet's index of the client's function `func` (entry `func` of gasnet_coll_init's table). */
static inline uint32_t amnet_gasnet_fn(const char *fn, gasnet_coll_fn_handle_t func) {
    if (func < 0) {
        fprintf(stderr, "GASNet (amnet) error in %s: function %d is not an entry of the table "
                        "given to gasnet_coll_init\n", fn, (int)func);
        fflush(stderr);
        amnet_exit(1);
    }
    return AMNET_COLL_N_BUILTIN + (uint32_t)func;
}

/* The number of entries of an m form's address list: every image of the team under
 * GASNET_COLL_SINGLE, this node's images under GASNET_COLL_LOCAL. */
static inline size_t amnet_gasnet_listlen(const char *fn, gasnet_team_handle_t team, int flags) {
    uint32_t n = 0;
    if (flags & GASNET_COLL_LOCAL)
        AMNET_GASNET_CHECK(fn, amnet_coll_images(NULL, NULL, &n));
    else
        AMNET_GASNET_CHECK(fn, amnet_team_info(amnet_gasnet_team(team), NULL, NULL, &n));
    return n;
}

static inline void gasnet_coll_wait_sync(gasnet_coll_handle_t handle) {
    AMNET_GASNET_CHECK("gasnet_coll_wait_sync", amnet_coll_wait_sync(&handle));
}
static inline int gasnet_coll_try_sync(gasnet_coll_handle_t handle) {
    int rc = amnet_coll_try_sync(&handle);
    if (rc != AMNET_OK && rc != AMNET_NOT_READY)
        amnet_gasnet_fatal("gasnet_coll_try_sync", rc);
    return amnet_gasnet_code(rc);
}
static inline void gasnet_coll_wait_sync_all(gasnet_coll_handle_t *handles, size_t n) {
    AMNET_GASNET_CHECK("gasnet_coll_wait_sync_all", amnet_coll_wait_sync_all(handles, n));
}
static inline int gasnet_coll_try_sync_all(gasnet_coll_handle_t *handles, size_t n) {
    int rc = amnet_coll_try_sync_all(handles, n);
    if (rc != AMNET_OK && rc != AMNET_NOT_READY)
        amnet_gasnet_fatal("gasnet_coll_try_sync_all", rc);
    return amnet_gasnet_code(rc);
}
static inline void gasnet_coll_wait_sync_some(gasnet_coll_handle_t *handles, size_t n) {
    AMNET_GASNET_CHECK("gasnet_coll_wait_sync_some", amnet_coll_wait_sync_some(handles, n));
}
static inline int gasnet_coll_try_sync_some(gasnet_coll_handle_t *handles, size_t n) {
    int rc = amnet_coll_try_sync_some(handles, n);
    if (rc != AMNET_OK && rc != AMNET_NOT_READY)
        amnet_gasnet_fatal("gasnet_coll_try_sync_some", rc);
    return amnet_gasnet_code(rc);
}

/* Teams (GASNet 1.x's team calls): a split of `parent` by color, numbered by relrank; every
 * node passes a color (no node is left out). clientdata is not used. */
static inline gasnet_team_handle_t gasnet_coll_team_split(gasnet_team_handle_t parent,
                                                          gasnet_node_t color,
                                                          gasnet_node_t relrank,
                                                          void *clientdata) {
    (void)clientdata;
    if (color == AMNET_TEAM_NO_COLOR || relrank > (gasnet_node_t)INT32_MAX) {
        fprintf(stderr, "GASNet (amnet) error in gasnet_coll_team_split: color %u or relrank %u "
                        "is out of range (color below %u, relrank below 2^31)\n",
                (unsigned)color, (unsigned)relrank, (unsigned)AMNET_TEAM_NO_COLOR);
        fflush(stderr);
        amnet_exit(1);
    }
    amnet_team_t t = AMNET_TEAM_NULL;
    AMNET_GASNET_CHECK("gasnet_coll_team_split",
                       amnet_team_split(amnet_gasnet_team(parent), color, (int32_t)relrank,
                                        &t));
    return t;
}
static inline gasnet_node_t gasnet_coll_team_size(gasnet_team_handle_t team) {
    uint32_t n = 0;
    AMNET_GASNET_CHECK("gasnet_coll_team_size",
                       amnet_team_info(amnet_gasnet_team(team), NULL, &n, NULL));
    return n;
}
static inline gasnet_node_t gasnet_coll_team_rank2node(gasnet_team_handle_t team, int rank) {
    uint32_t node = 0;
    AMNET_GASNET_CHECK("gasnet_coll_team_rank2node",
                       amnet_team_world_rank(amnet_gasnet_team(team), (uint32_t)rank, &node));
    return node;
}
static inline gasnet_node_t gasnet_coll_team_node2rank(gasnet_team_handle_t team,
                                                       gasnet_node_t node) {
    uint32_t size = 0;
    AMNET_GASNET_CHECK("gasnet_coll_team_node2rank",
                       amnet_team_info(amnet_gasnet_team(team), NULL, &size, NULL));
    for (uint32_t r = 0; r < size; r++) {
        uint32_t w = 0;
        AMNET_GASNET_CHECK("gasnet_coll_team_node2rank",
                           amnet_team_world_rank(amnet_gasnet_team(team), r, &w));
        if (w == node)
            return r;
    }
    fprintf(stderr, "GASNet (amnet) error in gasnet_coll_team_node2rank: node %u is not in the "
                    "team\n", (unsigned)node);
    fflush(stderr);
    amnet_exit(1);
    return 0;
}
/* Every operation, blocking and with an explicit handle (_nb). */
static inline gasnet_coll_handle_t gasnet_coll_broadcast_nb(gasnet_team_handle_t team, void *dst,
                                                            gasnet_image_t srcimage, void *src,
                                                            size_t nbytes, int flags) {
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_broadcast_nb", amnet_coll_broadcast(amnet_gasnet_team(team),
        dst, srcimage, src, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_broadcast(gasnet_team_handle_t team, void *dst,
                                         gasnet_image_t srcimage, void *src, size_t nbytes,
                                         int flags) {
    AMNET_GASNET_CHECK("gasnet_coll_broadcast", amnet_coll_broadcast(amnet_gasnet_team(team), dst,
        srcimage, src, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_broadcastm_nb(gasnet_team_handle_t team,
                                                             void *const dstlist[],
                                                             gasnet_image_t srcimage, void *src,
                                                             size_t nbytes, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        return gasnet_coll_broadcast_nb(team, dstlist[i_], srcimage, src, nbytes, flags);
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_broadcastm_nb", team, flags);
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_broadcastm_nb", amnet_coll_broadcastm(amnet_gasnet_team(team),
        dstlist, n_, srcimage, src, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_broadcastm(gasnet_team_handle_t team, void *const dstlist[],
                                          gasnet_image_t srcimage, void *src, size_t nbytes,
                                          int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        gasnet_coll_broadcast(team, dstlist[i_], srcimage, src, nbytes, flags);
        return;
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_broadcastm", team, flags);
    AMNET_GASNET_CHECK("gasnet_coll_broadcastm", amnet_coll_broadcastm(amnet_gasnet_team(team),
        dstlist, n_, srcimage, src, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_scatter_nb(gasnet_team_handle_t team, void *dst,
                                                          gasnet_image_t srcimage, void *src,
                                                          size_t nbytes, int flags) {
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_scatter_nb", amnet_coll_scatter(amnet_gasnet_team(team), dst,
        srcimage, src, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_scatter(gasnet_team_handle_t team, void *dst,
                                       gasnet_image_t srcimage, void *src, size_t nbytes, int flags) {
    AMNET_GASNET_CHECK("gasnet_coll_scatter", amnet_coll_scatter(amnet_gasnet_team(team), dst,
        srcimage, src, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_scatterm_nb(gasnet_team_handle_t team,
                                                           void *const dstlist[],
                                                           gasnet_image_t srcimage, void *src,
                                                           size_t nbytes, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        return gasnet_coll_scatter_nb(team, dstlist[i_], srcimage, src, nbytes, flags);
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_scatterm_nb", team, flags);
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_scatterm_nb", amnet_coll_scatterm(amnet_gasnet_team(team),
        dstlist, n_, srcimage, src, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_scatterm(gasnet_team_handle_t team, void *const dstlist[],
                                        gasnet_image_t srcimage, void *src, size_t nbytes, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        gasnet_coll_scatter(team, dstlist[i_], srcimage, src, nbytes, flags);
        return;
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_scatterm", team, flags);
    AMNET_GASNET_CHECK("gasnet_coll_scatterm", amnet_coll_scatterm(amnet_gasnet_team(team), dstlist,
        n_, srcimage, src, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_gather_nb(gasnet_team_handle_t team,
                                                         gasnet_image_t dstimage, void *dst,
                                                         void *src, size_t nbytes, int flags) {
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_gather_nb", amnet_coll_gather(amnet_gasnet_team(team), dstimage,
        dst, src, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_gather(gasnet_team_handle_t team, gasnet_image_t dstimage, void *dst,
                                      void *src, size_t nbytes, int flags) {
    AMNET_GASNET_CHECK("gasnet_coll_gather", amnet_coll_gather(amnet_gasnet_team(team), dstimage,
        dst, src, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_gatherm_nb(gasnet_team_handle_t team,
                                                          gasnet_image_t dstimage, void *dst,
                                                          void *const srclist[], size_t nbytes,
                                                          int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        return gasnet_coll_gather_nb(team, dstimage, dst, srclist[i_], nbytes, flags);
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_gatherm_nb", team, flags);
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_gatherm_nb", amnet_coll_gatherm(amnet_gasnet_team(team),
        dstimage, dst, srclist, n_, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_gatherm(gasnet_team_handle_t team, gasnet_image_t dstimage,
                                       void *dst, void *const srclist[], size_t nbytes, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        gasnet_coll_gather(team, dstimage, dst, srclist[i_], nbytes, flags);
        return;
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_gatherm", team, flags);
    AMNET_GASNET_CHECK("gasnet_coll_gatherm", amnet_coll_gatherm(amnet_gasnet_team(team), dstimage,
        dst, srclist, n_, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_gather_all_nb(gasnet_team_handle_t team, void *dst,
                                                             void *src, size_t nbytes, int flags) {
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_gather_all_nb", amnet_coll_gather_all(amnet_gasnet_team(team),
        dst, src, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_gather_all(gasnet_team_handle_t team, void *dst, void *src,
                                          size_t nbytes, int flags) {
    AMNET_GASNET_CHECK("gasnet_coll_gather_all", amnet_coll_gather_all(amnet_gasnet_team(team), dst,
        src, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_gather_allm_nb(gasnet_team_handle_t team,
                                                              void *const dstlist[],
                                                              void *const srclist[], size_t nbytes,
                                                              int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        return gasnet_coll_gather_all_nb(team, dstlist[i_], srclist[i_], nbytes, flags);
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_gather_allm_nb", team, flags);
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_gather_allm_nb", amnet_coll_gather_allm(amnet_gasnet_team(team),
        dstlist, n_, srclist, n_, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_gather_allm(gasnet_team_handle_t team, void *const dstlist[],
                                           void *const srclist[], size_t nbytes, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        gasnet_coll_gather_all(team, dstlist[i_], srclist[i_], nbytes, flags);
        return;
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_gather_allm", team, flags);
    AMNET_GASNET_CHECK("gasnet_coll_gather_allm", amnet_coll_gather_allm(amnet_gasnet_team(team),
        dstlist, n_, srclist, n_, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_exchange_nb(gasnet_team_handle_t team, void *dst,
                                                           void *src, size_t nbytes, int flags) {
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_exchange_nb", amnet_coll_exchange(amnet_gasnet_team(team), dst,
        src, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_exchange(gasnet_team_handle_t team, void *dst, void *src,
                                        size_t nbytes, int flags) {
    AMNET_GASNET_CHECK("gasnet_coll_exchange", amnet_coll_exchange(amnet_gasnet_team(team), dst,
        src, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_exchangem_nb(gasnet_team_handle_t team,
                                                            void *const dstlist[],
                                                            void *const srclist[], size_t nbytes,
                                                            int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        return gasnet_coll_exchange_nb(team, dstlist[i_], srclist[i_], nbytes, flags);
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_exchangem_nb", team, flags);
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_exchangem_nb", amnet_coll_exchangem(amnet_gasnet_team(team),
        dstlist, n_, srclist, n_, nbytes, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_exchangem(gasnet_team_handle_t team, void *const dstlist[],
                                         void *const srclist[], size_t nbytes, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        gasnet_coll_exchange(team, dstlist[i_], srclist[i_], nbytes, flags);
        return;
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_exchangem", team, flags);
    AMNET_GASNET_CHECK("gasnet_coll_exchangem", amnet_coll_exchangem(amnet_gasnet_team(team),
        dstlist, n_, srclist, n_, nbytes, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_reduce_nb(gasnet_team_handle_t team,
                                                         gasnet_image_t dstimage, void *dst,
                                                         void *src, size_t src_blksz,
                                                         size_t src_offset, size_t elem_size,
                                                         size_t elem_count,
                                                         gasnet_coll_fn_handle_t func, int func_arg,
                                                         int flags) {
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_reduce_nb", amnet_coll_reduce(amnet_gasnet_team(team), dstimage,
        dst, src, src_blksz, src_offset, elem_size, elem_count,
        amnet_gasnet_fn("gasnet_coll_reduce_nb", func), func_arg, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_reduce(gasnet_team_handle_t team, gasnet_image_t dstimage, void *dst,
                                      void *src, size_t src_blksz, size_t src_offset,
                                      size_t elem_size, size_t elem_count,
                                      gasnet_coll_fn_handle_t func, int func_arg, int flags) {
    AMNET_GASNET_CHECK("gasnet_coll_reduce", amnet_coll_reduce(amnet_gasnet_team(team), dstimage,
        dst, src, src_blksz, src_offset, elem_size, elem_count,
        amnet_gasnet_fn("gasnet_coll_reduce", func), func_arg, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_reducem_nb(gasnet_team_handle_t team,
                                                          gasnet_image_t dstimage, void *dst,
                                                          void *const srclist[], size_t src_blksz,
                                                          size_t src_offset, size_t elem_size,
                                                          size_t elem_count,
                                                          gasnet_coll_fn_handle_t func,
                                                          int func_arg, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        return gasnet_coll_reduce_nb(team, dstimage, dst, srclist[i_], src_blksz, src_offset,
            elem_size, elem_count, func, func_arg, flags);
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_reducem_nb", team, flags);
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_reducem_nb", amnet_coll_reducem(amnet_gasnet_team(team),
        dstimage, dst, srclist, n_, src_blksz, src_offset, elem_size, elem_count,
        amnet_gasnet_fn("gasnet_coll_reducem_nb", func), func_arg, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_reducem(gasnet_team_handle_t team, gasnet_image_t dstimage,
                                       void *dst, void *const srclist[], size_t src_blksz,
                                       size_t src_offset, size_t elem_size, size_t elem_count,
                                       gasnet_coll_fn_handle_t func, int func_arg, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        gasnet_coll_reduce(team, dstimage, dst, srclist[i_], src_blksz, src_offset, elem_size,
            elem_count, func, func_arg, flags);
        return;
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_reducem", team, flags);
    AMNET_GASNET_CHECK("gasnet_coll_reducem", amnet_coll_reducem(amnet_gasnet_team(team), dstimage,
        dst, srclist, n_, src_blksz, src_offset, elem_size, elem_count,
        amnet_gasnet_fn("gasnet_coll_reducem", func), func_arg, amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_prefix_reduce_nb(gasnet_team_handle_t team,
                                                                void *dst, size_t dst_blksz,
                                                                size_t dst_offset, void *src,
                                                                size_t src_blksz, size_t src_offset,
                                                                size_t elem_size, size_t elem_count,
                                                                gasnet_coll_fn_handle_t func,
                                                                int func_arg, int flags) {
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_prefix_reduce_nb", amnet_coll_prefix_reduce(
        amnet_gasnet_team(team), dst, dst_blksz, dst_offset, src, src_blksz, src_offset, elem_size,
        elem_count, amnet_gasnet_fn("gasnet_coll_prefix_reduce_nb", func), func_arg,
        amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_prefix_reduce(gasnet_team_handle_t team, void *dst, size_t dst_blksz,
                                             size_t dst_offset, void *src, size_t src_blksz,
                                             size_t src_offset, size_t elem_size, size_t elem_count,
                                             gasnet_coll_fn_handle_t func, int func_arg, int flags) {
    AMNET_GASNET_CHECK("gasnet_coll_prefix_reduce", amnet_coll_prefix_reduce(
        amnet_gasnet_team(team), dst, dst_blksz, dst_offset, src, src_blksz, src_offset, elem_size,
        elem_count, amnet_gasnet_fn("gasnet_coll_prefix_reduce", func), func_arg,
        amnet_gasnet_cflags(flags), NULL));
}

static inline gasnet_coll_handle_t gasnet_coll_prefix_reducem_nb(gasnet_team_handle_t team,
                                                                 void *const dstlist[],
                                                                 size_t dst_blksz,
                                                                 size_t dst_offset,
                                                                 void *const srclist[],
                                                                 size_t src_blksz,
                                                                 size_t src_offset,
                                                                 size_t elem_size,
                                                                 size_t elem_count,
                                                                 gasnet_coll_fn_handle_t func,
                                                                 int func_arg, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        return gasnet_coll_prefix_reduce_nb(team, dstlist[i_], dst_blksz, dst_offset, srclist[i_],
            src_blksz, src_offset, elem_size, elem_count, func, func_arg, flags);
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_prefix_reducem_nb", team, flags);
    gasnet_coll_handle_t h_ = GASNET_COLL_INVALID_HANDLE;
    AMNET_GASNET_CHECK("gasnet_coll_prefix_reducem_nb", amnet_coll_prefix_reducem(
        amnet_gasnet_team(team), dstlist, n_, dst_blksz, dst_offset, srclist, n_, src_blksz,
        src_offset, elem_size, elem_count, amnet_gasnet_fn("gasnet_coll_prefix_reducem_nb", func),
        func_arg, amnet_gasnet_cflags(flags), &h_));
    return h_;
}

static inline void gasnet_coll_prefix_reducem(gasnet_team_handle_t team, void *const dstlist[],
                                              size_t dst_blksz, size_t dst_offset,
                                              void *const srclist[], size_t src_blksz,
                                              size_t src_offset, size_t elem_size,
                                              size_t elem_count, gasnet_coll_fn_handle_t func,
                                              int func_arg, int flags) {
    if (amnet_gasnet_imaged && (flags & GASNET_COLL_LOCAL)) {
        /* GASNet 1.x: every image thread calls with its node's images; it moves its own. */
        size_t i_ = amnet_gasnet_local_image();
        gasnet_coll_prefix_reduce(team, dstlist[i_], dst_blksz, dst_offset, srclist[i_], src_blksz,
            src_offset, elem_size, elem_count, func, func_arg, flags);
        return;
    }
    size_t n_ = amnet_gasnet_listlen("gasnet_coll_prefix_reducem", team, flags);
    AMNET_GASNET_CHECK("gasnet_coll_prefix_reducem", amnet_coll_prefix_reducem(
        amnet_gasnet_team(team), dstlist, n_, dst_blksz, dst_offset, srclist, n_, src_blksz,
        src_offset, elem_size, elem_count, amnet_gasnet_fn("gasnet_coll_prefix_reducem", func),
        func_arg, amnet_gasnet_cflags(flags), NULL));
}


/* GASNet 1.x's spellings of the m forms. */
#define gasnet_coll_broadcastM gasnet_coll_broadcastm
#define gasnet_coll_broadcastM_nb gasnet_coll_broadcastm_nb
#define gasnet_coll_scatterM gasnet_coll_scatterm
#define gasnet_coll_scatterM_nb gasnet_coll_scatterm_nb
#define gasnet_coll_gatherM gasnet_coll_gatherm
#define gasnet_coll_gatherM_nb gasnet_coll_gatherm_nb
#define gasnet_coll_gather_allM gasnet_coll_gather_allm
#define gasnet_coll_gather_allM_nb gasnet_coll_gather_allm_nb
#define gasnet_coll_exchangeM gasnet_coll_exchangem
#define gasnet_coll_exchangeM_nb gasnet_coll_exchangem_nb
#define gasnet_coll_reduceM gasnet_coll_reducem
#define gasnet_coll_reduceM_nb gasnet_coll_reducem_nb

#ifdef __cplusplus
}
#endif

#endif

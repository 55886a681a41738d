/* A GASNet-1 client, written only against gasnet.h: start-up with a handler table (one index
 * left for gasnet_attach to assign), segment information, Short/Medium/Long requests and
 * replies with 0, 1, 4 and 16 arguments, GASNET_BLOCKUNTIL, a handler-safe lock, put/get in
 * every form with the value and memset forms, the syncs and access regions, barriers with
 * their results and a mismatch, and the conduit macros. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gasnet.h"

#define SEGSZ (64 * GASNET_PAGESIZE)

static gasnet_node_t me, nodes;
static gasnet_seginfo_t *segs;
static volatile int replies, errors;
static gasnet_hsl_t lock = GASNET_HSL_INITIALIZER;
static int locked_count;

#define FAILED(...)                                                                          \
    do {                                                                                     \
        fprintf(stderr, "gasnet_client: node %u: ", (unsigned)me);                           \
        fprintf(stderr, __VA_ARGS__);                                                        \
        fprintf(stderr, "\n");                                                               \
        gasnet_exit(1);                                                                      \
    } while (0)

#define SAFE(call)                                                                           \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != GASNET_OK)                                                                \
            FAILED("%s: %s (%s)", #call, gasnet_ErrorName(rc_), gasnet_ErrorDesc(rc_));      \
    } while (0)

enum { H_REPLY = 201, H_S0 = 202, H_S1, H_S4, H_S16, H_M0, H_M4, H_M16, H_L0, H_L16 };

/* Argument i of a message with n arguments. */
#define ARG(n, i) ((gasnet_handlerarg_t)(1000 * (n) + (i) - 7))
#define ARGS4 ARG(4, 0), ARG(4, 1), ARG(4, 2), ARG(4, 3)
#define ARGS16                                                                               \
    ARG(16, 0), ARG(16, 1), ARG(16, 2), ARG(16, 3), ARG(16, 4), ARG(16, 5), ARG(16, 6),      \
        ARG(16, 7), ARG(16, 8), ARG(16, 9), ARG(16, 10), ARG(16, 11), ARG(16, 12),           \
        ARG(16, 13), ARG(16, 14), ARG(16, 15)

static void check_args(int n, const gasnet_handlerarg_t *a) {
    for (int i = 0; i < n; i++)
        if (a[i] != ARG(n, i))
            errors++;
}

static void check_payload(gasnet_token_t token, void *buf, size_t nbytes, size_t want) {
    gasnet_node_t src;
    if (gasnet_AMGetMsgSource(token, &src) != GASNET_OK || src != (me + nodes - 1) % nodes)
        errors++;
    if (nbytes != want)
        errors++;
    for (size_t i = 0; i < nbytes; i++)
        if (((unsigned char *)buf)[i] != (unsigned char)(i + src))
            errors++;
}

static void reply_handler(gasnet_token_t token, gasnet_handlerarg_t kind) {
    (void)token, (void)kind;
    gasnet_hsl_lock(&lock);
    locked_count++;
    gasnet_hsl_unlock(&lock);
    replies++;
}

static void s0(gasnet_token_t t) { SAFE(gasnet_AMReplyShort1(t, H_REPLY, 0)); }
static void s1(gasnet_token_t t, gasnet_handlerarg_t a0) {
    gasnet_handlerarg_t a[] = {a0};
    check_args(1, a);
    SAFE(gasnet_AMReplyShort1(t, H_REPLY, 1));
}
static void s4(gasnet_token_t t, gasnet_handlerarg_t a0, gasnet_handlerarg_t a1,
               gasnet_handlerarg_t a2, gasnet_handlerarg_t a3) {
    gasnet_handlerarg_t a[] = {a0, a1, a2, a3};
    check_args(4, a);
    SAFE(gasnet_AMReplyShort4(t, H_REPLY, 4, 0, 0, 0));
}
#define P16                                                                                  \
    gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2,                  \
        gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5,              \
        gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8,              \
        gasnet_handlerarg_t a9, gasnet_handlerarg_t a10, gasnet_handlerarg_t a11,            \
        gasnet_handlerarg_t a12, gasnet_handlerarg_t a13, gasnet_handlerarg_t a14,           \
        gasnet_handlerarg_t a15
#define A16 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15
static void s16(gasnet_token_t t, P16) {
    gasnet_handlerarg_t a[] = {A16};
    check_args(16, a);
    SAFE(gasnet_AMReplyShort1(t, H_REPLY, 16));
}
static void m0(gasnet_token_t t, void *buf, size_t nbytes) {
    check_payload(t, buf, nbytes, 100);
    SAFE(gasnet_AMReplyMedium1(t, H_REPLY, buf, 0, 0));
}
static void m4(gasnet_token_t t, void *buf, size_t nbytes, gasnet_handlerarg_t a0,
               gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, gasnet_handlerarg_t a3) {
    gasnet_handlerarg_t a[] = {a0, a1, a2, a3};
    check_args(4, a);
    check_payload(t, buf, nbytes, gasnet_AMMaxMedium());
    /* GASNet hands a Medium handler its buffer writable. */
    memset(buf, 0x5a, nbytes);
    SAFE(gasnet_AMReplyShort1(t, H_REPLY, 4));
}
static void m16(gasnet_token_t t, void *buf, size_t nbytes, P16) {
    gasnet_handlerarg_t a[] = {A16};
    check_args(16, a);
    check_payload(t, buf, nbytes, 1);
    SAFE(gasnet_AMReplyShort1(t, H_REPLY, 16));
}
static void l0(gasnet_token_t t, void *buf, size_t nbytes) {
    /* The payload landed at the start of this node's segment. */
    if (buf != segs[me].addr)
        errors++;
    check_payload(t, buf, nbytes, SEGSZ / 2);
    /* Echo it into the requester's second half, with a Long reply. */
    gasnet_node_t src;
    SAFE(gasnet_AMGetMsgSource(t, &src));
    SAFE(gasnet_AMReplyLong1(t, H_REPLY, buf, nbytes, (char *)segs[src].addr + SEGSZ / 2, 0));
}
static void l16(gasnet_token_t t, void *buf, size_t nbytes, P16) {
    gasnet_handlerarg_t a[] = {A16};
    check_args(16, a);
    check_payload(t, buf, nbytes, 3);
    SAFE(gasnet_AMReplyShort1(t, H_REPLY, 16));
}

static void fill(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i + me);
}

int main(int argc, char **argv) {
    SAFE(gasnet_init(&argc, &argv));
    gasnet_handlerentry_t table[] = {
        {H_REPLY, (void (*)())reply_handler},
        {H_S0, (void (*)())s0},
        {H_S1, (void (*)())s1},
        {H_S4, (void (*)())s4},
        {H_S16, (void (*)())s16},
        {H_M0, (void (*)())m0},
        {H_M4, (void (*)())m4},
        {H_M16, (void (*)())m16},
        {H_L0, (void (*)())l0},
        {0, (void (*)())l16}, /* index assigned by attach */
    };
    int n_entries = (int)(sizeof table / sizeof table[0]);
    /* Known from gasnet_init on: the handlers may run inside gasnet_attach. */
    me = gasnet_mynode();
    nodes = gasnet_nodes();
    SAFE(gasnet_attach(table, n_entries, SEGSZ, 0));
    gasnet_handler_t h_l16 = table[n_entries - 1].index;
    if (h_l16 < 128)
        FAILED("attach assigned index %u", (unsigned)h_l16);
    segs = (gasnet_seginfo_t *)malloc(nodes * sizeof *segs);
    SAFE(gasnet_getSegmentInfo(segs, (int)nodes));
    for (gasnet_node_t i = 0; i < nodes; i++)
        if (segs[i].size != SEGSZ || (uintptr_t)segs[i].addr % GASNET_PAGESIZE != 0)
            FAILED("node %u's segment: %p, %lu bytes", (unsigned)i, segs[i].addr,
                   (unsigned long)segs[i].size);
    gasnet_node_t next = (me + 1) % nodes;
    if (gasnet_AMMaxArgs() != 16 || gasnet_AMMaxLongRequest() < SEGSZ)
        FAILED("max args %zu, max long %zu", gasnet_AMMaxArgs(), gasnet_AMMaxLongRequest());

    /* Active messages. */
    size_t maxm = gasnet_AMMaxMedium();
    unsigned char *buf = (unsigned char *)malloc(maxm > SEGSZ ? maxm : SEGSZ);
    fill(buf, maxm > SEGSZ ? maxm : SEGSZ);
    int want = 0;
    SAFE(gasnet_AMRequestShort0(next, H_S0));
    SAFE(gasnet_AMRequestShort1(next, H_S1, ARG(1, 0)));
    SAFE(gasnet_AMRequestShort4(next, H_S4, ARGS4));
    SAFE(gasnet_AMRequestShort16(next, H_S16, ARGS16));
    SAFE(gasnet_AMRequestMedium0(next, H_M0, buf, 100));
    SAFE(gasnet_AMRequestMedium4(next, H_M4, buf, maxm, ARGS4));
    SAFE(gasnet_AMRequestMedium16(next, H_M16, buf, 1, ARGS16));
    SAFE(gasnet_AMRequestLong16(next, h_l16, buf, 3, (char *)segs[next].addr + SEGSZ / 4,
                                ARGS16));
    want += 8;
    GASNET_BLOCKUNTIL(replies == want);
    /* The Long request and its Long reply, alone: they use the start and second half. */
    SAFE(gasnet_AMRequestLong0(next, H_L0, buf, SEGSZ / 2, segs[next].addr));
    want += 1;
    GASNET_BLOCKUNTIL(replies == want);
    SAFE(gasnet_AMPoll());
    if (locked_count != want)
        FAILED("the handlers counted %d replies under the lock, wanted %d", locked_count, want);
    unsigned char *mine = (unsigned char *)segs[me].addr;
    for (size_t i = 0; i < SEGSZ / 2; i++)
        if (mine[SEGSZ / 2 + i] != (unsigned char)(i + me))
            FAILED("the Long reply's byte %zu is wrong", i);
    if (gasnet_hsl_trylock(&lock) != GASNET_OK)
        FAILED("trylock of a free lock failed");
    gasnet_hsl_unlock(&lock);
    gasnet_barrier_notify(0, GASNET_BARRIERFLAG_ANONYMOUS);
    SAFE(gasnet_barrier_wait(0, GASNET_BARRIERFLAG_ANONYMOUS));

    /* Put/get into the next node's segment, at misaligned addresses. */
    char *remote = (char *)segs[next].addr + 3;
    unsigned char *back = (unsigned char *)malloc(SEGSZ);
    size_t sizes[] = {1, 7, 64, 4097, SEGSZ / 2};
    for (int s = 0; s < 5; s++) {
        size_t n = sizes[s];
        gasnet_put(next, remote, buf, n);
        memset(back, 0, n);
        gasnet_get(back, next, remote, n);
        if (memcmp(back, buf, n))
            FAILED("put/get of %zu bytes", n);
        gasnet_handle_t h[2];
        h[0] = gasnet_put_nb_bulk(next, remote + 1, buf, n);
        gasnet_wait_syncnb(h[0]);
        h[0] = gasnet_get_nb(back, next, remote + 1, n / 2);
        h[1] = gasnet_get_nb_bulk(back + n / 2, next, remote + 1 + n / 2, n - n / 2);
        gasnet_wait_syncnb_all(h, 2);
        if (memcmp(back, buf, n))
            FAILED("put_nb/get_nb of %zu bytes", n);
        gasnet_put_nbi(next, remote, buf + 1, n);
        gasnet_wait_syncnbi_puts();
        gasnet_get_nbi_bulk(back, next, remote, n);
        while (gasnet_try_syncnbi_gets() != GASNET_OK)
            SAFE(gasnet_AMPoll());
        if (memcmp(back, buf + 1, n))
            FAILED("put_nbi/get_nbi of %zu bytes", n);
        gasnet_begin_nbi_accessregion();
        gasnet_put_nbi_bulk(next, remote, buf, n);
        gasnet_handle_t r = gasnet_end_nbi_accessregion();
        while (gasnet_try_syncnb(r) != GASNET_OK)
            SAFE(gasnet_AMPoll());
        gasnet_get(back, next, remote, n);
        if (memcmp(back, buf, n))
            FAILED("access region of %zu bytes", n);
    }
    gasnet_put_val(next, remote, 0x1122334455667788ull, 8);
    gasnet_put_val(next, remote + 8, 0xbeef, 2);
    gasnet_wait_syncnb(gasnet_put_nb_val(next, remote + 10, 0x9a, 1));
    gasnet_put_nbi_val(next, remote + 12, 0xdeadbeef, 4);
    gasnet_wait_syncnbi_all();
    if (gasnet_get_val(next, remote, 8) != 0x1122334455667788ull ||
        gasnet_get_val(next, remote + 8, 2) != 0xbeef || gasnet_get_val(next, remote + 10, 1) != 0x9a ||
        gasnet_get_val(next, remote + 12, 4) != 0xdeadbeef)
        FAILED("put_val/get_val");
    gasnet_valget_handle_t vh[3];
    vh[0] = gasnet_get_nb_val(next, remote, 8);
    vh[1] = gasnet_get_nb_val(next, remote + 8, 2);
    vh[2] = gasnet_get_nb_val(next, remote + 12, 4);
    if (gasnet_wait_syncnb_valget(vh[0]) != 0x1122334455667788ull ||
        gasnet_wait_syncnb_valget(vh[1]) != 0xbeef || gasnet_wait_syncnb_valget(vh[2]) != 0xdeadbeef)
        FAILED("get_nb_val");
    SAFE(gasnet_set_waitmode(GASNET_WAIT_SPINBLOCK));
    gasnet_memset(next, remote, 0xab, 10000);
    gasnet_get(back, next, remote, 10000);
    for (int i = 0; i < 10000; i++)
        if (back[i] != 0xab)
            FAILED("memset's byte %d", i);

    /* GASNet's testnbr spins on a flag that the previous node puts, making progress only
       through a try-sync whose handles may all have completed: the try-sync polls anyway. */
    volatile unsigned char *flag = (volatile unsigned char *)segs[me].addr + SEGSZ - 1;
    *flag = 0;
    gasnet_barrier_notify(0, GASNET_BARRIERFLAG_ANONYMOUS);
    SAFE(gasnet_barrier_wait(0, GASNET_BARRIERFLAG_ANONYMOUS));
    unsigned char one = 1;
    gasnet_handle_t fh = gasnet_put_nb(next, (char *)segs[next].addr + SEGSZ - 1, &one, 1);
    while (*flag == 0)
        (void)gasnet_try_syncnb_some(&fh, 1);
    gasnet_wait_syncnb(fh);

    /* Barriers: named, split-phase with try, and a mismatch. */
    gasnet_barrier_notify(42, 0);
    SAFE(gasnet_barrier_wait(42, 0));
    int bid = -1;
    if (gasnet_barrier_result(&bid) != 0 || bid != 42)
        FAILED("gasnet_barrier_result after barrier 42: id %d", bid);
    gasnet_barrier_notify(7, me % 2 ? GASNET_BARRIERFLAG_ANONYMOUS : 0);
    int rc;
    while ((rc = gasnet_barrier_try(7, me % 2 ? GASNET_BARRIERFLAG_ANONYMOUS : 0)) ==
           GASNET_ERR_NOT_READY)
        ;
    SAFE(rc);
    gasnet_barrier_notify(0, GASNET_BARRIERFLAG_ANONYMOUS);
    SAFE(gasnet_barrier_wait(0, GASNET_BARRIERFLAG_ANONYMOUS));
    if (gasnet_barrier_result(&bid) != GASNET_BARRIERFLAG_ANONYMOUS || bid != 0)
        FAILED("gasnet_barrier_result after an anonymous barrier: id %d", bid);
    if (strcmp(GASNET_CONDUIT_NAME_STR, "AMNET") != 0 || !GASNET_CONDUIT_AMNET ||
        !strstr(GASNET_CONFIG_STRING, "CONDUIT=AMNET"))
        FAILED("conduit macros: %s, %s", GASNET_CONDUIT_NAME_STR, GASNET_CONFIG_STRING);
    if (nodes > 1) {
        gasnet_barrier_notify((int)me, 0);
        rc = gasnet_barrier_wait((int)me, 0);
        if (rc != GASNET_ERR_BARRIER_MISMATCH)
            FAILED("a named barrier with different ids returned %s", gasnet_ErrorName(rc));
    }
    if (errors)
        FAILED("%d errors found in handlers", errors);
    printf("gasnet_client: node %u of %u: ok\n", (unsigned)me, (unsigned)nodes);
    gasnet_barrier_notify(0, GASNET_BARRIERFLAG_ANONYMOUS);
    SAFE(gasnet_barrier_wait(0, GASNET_BARRIERFLAG_ANONYMOUS));
    gasnet_exit(0);
    return 0;
}

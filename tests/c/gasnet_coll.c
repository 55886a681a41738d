/* A GASNet-1 collectives client, written only against gasnet.h: gasnet_coll_init with a
 * function table, then broadcast, scatter, gather, gather_all and exchange in every sync mode
 * with SINGLE addresses in the segment and LOCAL addresses on the stack, blocking and _nb
 * (synced by wait and try), the m forms in the design notes' and GASNet 1.x's spellings,
 * reductions and prefix reductions (single and m) with the client's function, an aggregate
 * synced with try_sync_all, a second thread's init, and a team split by node parity. With the
 * argument "images": two image threads per node in GASNet 1.x's image mode. Each result is
 * checked against an oracle; a GASNet barrier separates the calls, as a UPC program does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gasnet_check.h"

#define SEGSZ (64 * GASNET_PAGESIZE)
#define N 24 /* bytes per block */

static gasnet_seginfo_t *segs;
static int calls;

static volatile int fn_bad; /* the function got an argument it should not have */

/* x op y = x + y + arg: associative and commutative, and unlike amnet's built-in sum (which a
 * wrong function index would run) it counts the combinations. */
static void summation(void *results, size_t result_count, const void *left_operands,
                      size_t left_count, const void *right_operands, size_t elem_size, int flags,
                      int arg) {
    const int *left = (const int *)left_operands, *right = (const int *)right_operands;
    int *out = (int *)results;
    if (elem_size != sizeof(int) || arg != 1 || (flags & GASNET_COLL_NONCOMM) || result_count == 0)
        fn_bad = 1;
    int acc = 0, first = 1;
    for (size_t i = 0; i < left_count; i++) {
        acc = first ? left[i] : acc + left[i] + arg;
        first = 0;
    }
    for (size_t i = 0; i < result_count; i++) {
        acc = first ? right[i] : acc + right[i] + arg;
        first = 0;
        out[i] = acc;
    }
}

static unsigned char val(gasnet_node_t n, int k) {
    return (unsigned char)(calls * 13 + (int)n * 5 + k + 1);
}

static void expect(const unsigned char *got, const unsigned char *want, size_t len,
                   const char *what, int flags) {
    if (memcmp(got, want, len) != 0)
        FAILED("%s (flags %#x, call %d): wrong result", what, flags, calls);
}

/* Complete a _nb call by waiting or by trying, in turn. */
static void sync_it(gasnet_coll_handle_t h) {
    if (calls % 2)
        gasnet_coll_wait_sync(h);
    else
        while (gasnet_coll_try_sync(h) == GASNET_ERR_NOT_READY)
            gasnet_AMPoll();
}

static void one_mode(int flags, int nb) {
    unsigned char *seg = (unsigned char *)segs[me].addr;
    _Alignas(8) unsigned char lsrc[64 * N], ldst[64 * N];
    unsigned char want[64 * N];
    int single = flags & GASNET_COLL_SINGLE;
    unsigned char *src = single ? seg : lsrc, *dst = single ? seg + 64 * N : ldst;
    gasnet_image_t root = (gasnet_image_t)(calls % (int)nodes);

    /* broadcast */
    for (int k = 0; k < N; k++)
        src[k] = val(root, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_broadcast_nb(GASNET_TEAM_ALL, dst, root, src, N, flags));
    else
        gasnet_coll_broadcast(GASNET_TEAM_ALL, dst, root, src, N, flags);
    barrier();
    for (int k = 0; k < N; k++)
        want[k] = val(root, k);
    expect(dst, want, N, "broadcast", flags);
    calls++;

    /* scatter */
    for (gasnet_node_t n = 0; n < nodes; n++)
        for (int k = 0; k < N; k++)
            src[n * N + k] = val(n, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_scatter_nb(GASNET_TEAM_ALL, dst, root, src, N, flags));
    else
        gasnet_coll_scatter(GASNET_TEAM_ALL, dst, root, src, N, flags);
    barrier();
    for (int k = 0; k < N; k++)
        want[k] = val(me, k);
    expect(dst, want, N, "scatter", flags);
    calls++;

    /* gather */
    for (int k = 0; k < N; k++)
        src[k] = val(me, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_gather_nb(GASNET_TEAM_ALL, root, dst, src, N, flags));
    else
        gasnet_coll_gather(GASNET_TEAM_ALL, root, dst, src, N, flags);
    barrier();
    if (me == root) {
        for (gasnet_node_t n = 0; n < nodes; n++)
            for (int k = 0; k < N; k++)
                want[n * N + k] = val(n, k);
        expect(dst, want, nodes * N, "gather", flags);
    }
    calls++;

    /* gather_all */
    for (int k = 0; k < N; k++)
        src[k] = val(me, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_gather_all_nb(GASNET_TEAM_ALL, dst, src, N, flags));
    else
        gasnet_coll_gather_all(GASNET_TEAM_ALL, dst, src, N, flags);
    barrier();
    for (gasnet_node_t n = 0; n < nodes; n++)
        for (int k = 0; k < N; k++)
            want[n * N + k] = val(n, k);
    expect(dst, want, nodes * N, "gather_all", flags);
    calls++;

    /* exchange: block j of node i goes to block i of node j */
    for (gasnet_node_t j = 0; j < nodes; j++)
        for (int k = 0; k < N; k++)
            src[j * N + k] = val(me * nodes + j, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_exchange_nb(GASNET_TEAM_ALL, dst, src, N, flags));
    else
        gasnet_coll_exchange(GASNET_TEAM_ALL, dst, src, N, flags);
    barrier();
    for (gasnet_node_t i = 0; i < nodes; i++)
        for (int k = 0; k < N; k++)
            want[i * N + k] = val(i * nodes + me, k);
    expect(dst, want, nodes * N, "exchange", flags);
    calls++;

    /* The m forms: a list of every node's address under SINGLE, this node's under LOCAL. */
    void *dl[64], *sl[64];
    for (gasnet_node_t n = 0; n < nodes; n++) {
        dl[n] = single ? (unsigned char *)segs[n].addr + 64 * N : dst;
        sl[n] = single ? segs[n].addr : src;
    }
    void *const *dlist = single ? dl : &dl[me];
    void *const *slist = single ? sl : &sl[me];
    for (int k = 0; k < N; k++)
        src[k] = val(root, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_broadcastm_nb(GASNET_TEAM_ALL, dlist, root, src, N, flags));
    else
        gasnet_coll_broadcastM(GASNET_TEAM_ALL, dlist, root, src, N, flags);
    barrier();
    for (int k = 0; k < N; k++)
        want[k] = val(root, k);
    expect(dst, want, N, "broadcastm", flags);
    calls++;

    for (int k = 0; k < N; k++)
        src[k] = val(me, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_gather_allM_nb(GASNET_TEAM_ALL, dlist, slist, N, flags));
    else
        gasnet_coll_gather_allm(GASNET_TEAM_ALL, dlist, slist, N, flags);
    barrier();
    for (gasnet_node_t n = 0; n < nodes; n++)
        for (int k = 0; k < N; k++)
            want[n * N + k] = val(n, k);
    expect(dst, want, nodes * N, "gather_allm", flags);
    calls++;

    /* reduce and prefix_reduce of 3 ints per node with the client's function (index 0). */
    int *isrc = (int *)src, *idst = (int *)dst;
    for (int k = 0; k < 3; k++)
        isrc[k] = calls + (int)me * 3 + k;
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_reduce_nb(GASNET_TEAM_ALL, root, dst, src, 3, 0, sizeof(int),
                                      3 * nodes, 0, 1, flags));
    else
        gasnet_coll_reduce(GASNET_TEAM_ALL, root, dst, src, 3, 0, sizeof(int), 3 * nodes, 0, 1,
                           flags);
    barrier();
    int total = 3 * (int)nodes - 1; /* one arg per combination */
    for (gasnet_node_t n = 0; n < nodes; n++)
        for (int k = 0; k < 3; k++)
            total += calls + (int)n * 3 + k;
    if (me == root && idst[0] != total)
        FAILED("reduce (flags %#x): %d, wanted %d", flags, idst[0], total);
    calls++;

    for (int m = 0; m < 2; m++) {
        for (int k = 0; k < 3; k++)
            isrc[k] = calls + (int)me * 3 + k;
        memset(dst, 0, 64 * N);
        barrier();
        if (m && nb)
            sync_it(gasnet_coll_prefix_reducem_nb(GASNET_TEAM_ALL, dlist, 3, 0, slist, 3, 0,
                                                  sizeof(int), 3 * nodes, 0, 1, flags));
        else if (m)
            gasnet_coll_prefix_reducem(GASNET_TEAM_ALL, dlist, 3, 0, slist, 3, 0, sizeof(int),
                                       3 * nodes, 0, 1, flags);
        else if (nb)
            sync_it(gasnet_coll_prefix_reduce_nb(GASNET_TEAM_ALL, dst, 3, 0, src, 3, 0,
                                                 sizeof(int), 3 * nodes, 0, 1, flags));
        else
            gasnet_coll_prefix_reduce(GASNET_TEAM_ALL, dst, 3, 0, src, 3, 0, sizeof(int),
                                      3 * nodes, 0, 1, flags);
        barrier();
        int run = -1;
        for (gasnet_node_t n = 0; n <= me; n++)
            for (int k = 0; k < 3; k++) {
                run += calls + (int)n * 3 + k + 1;
                if (n == me && idst[k] != run)
                    FAILED("prefix_reduce%s (flags %#x): element %d is %d, wanted %d",
                           m ? "m" : "", flags, k, idst[k], run);
            }
        calls++;
    }

    /* The other m forms, in GASNet 1.x's spelling. */
    for (gasnet_node_t n = 0; n < nodes; n++)
        for (int k = 0; k < N; k++)
            src[n * N + k] = val(n, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_scatterM_nb(GASNET_TEAM_ALL, dlist, root, src, N, flags));
    else
        gasnet_coll_scatterM(GASNET_TEAM_ALL, dlist, root, src, N, flags);
    barrier();
    for (int k = 0; k < N; k++)
        want[k] = val(me, k);
    expect(dst, want, N, "scatterM", flags);
    calls++;

    for (int k = 0; k < N; k++)
        src[k] = val(me, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_gatherM_nb(GASNET_TEAM_ALL, root, dst, slist, N, flags));
    else
        gasnet_coll_gatherM(GASNET_TEAM_ALL, root, dst, slist, N, flags);
    barrier();
    if (me == root) {
        for (gasnet_node_t n = 0; n < nodes; n++)
            for (int k = 0; k < N; k++)
                want[n * N + k] = val(n, k);
        expect(dst, want, nodes * N, "gatherM", flags);
    }
    calls++;

    for (gasnet_node_t j = 0; j < nodes; j++)
        for (int k = 0; k < N; k++)
            src[j * N + k] = val(me * nodes + j, k);
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_exchangeM_nb(GASNET_TEAM_ALL, dlist, slist, N, flags));
    else
        gasnet_coll_exchangeM(GASNET_TEAM_ALL, dlist, slist, N, flags);
    barrier();
    for (gasnet_node_t i = 0; i < nodes; i++)
        for (int k = 0; k < N; k++)
            want[i * N + k] = val(i * nodes + me, k);
    expect(dst, want, nodes * N, "exchangeM", flags);
    calls++;

    for (int k = 0; k < 3; k++)
        isrc[k] = calls + (int)me * 3 + k;
    memset(dst, 0, 64 * N);
    barrier();
    if (nb)
        sync_it(gasnet_coll_reduceM_nb(GASNET_TEAM_ALL, root, dst, slist, 3, 0, sizeof(int),
                                       3 * nodes, 0, 1, flags));
    else
        gasnet_coll_reduceM(GASNET_TEAM_ALL, root, dst, slist, 3, 0, sizeof(int), 3 * nodes, 0,
                            1, flags);
    barrier();
    total = 3 * (int)nodes - 1;
    for (gasnet_node_t n = 0; n < nodes; n++)
        for (int k = 0; k < 3; k++)
            total += calls + (int)n * 3 + k;
    if (me == root && idst[0] != total)
        FAILED("reduceM (flags %#x): %d, wanted %d", flags, idst[0], total);
    calls++;
}

/* A second thread's gasnet_coll_init finds the node's collectives initialized. */
static void *second_init(void *arg) {
    gasnet_coll_init(NULL, 0, (const gasnet_coll_fn_entry_t *)arg, 1, 0);
    return NULL;
}

/* Image mode, as GASNet 1.x clients with threads use it: two image threads per node, each
 * calling gasnet_coll_init with the images, then every collective (no ALL_THREADS flag). */
#define IMAGES 2
static gasnet_image_t images_of[64];
static int img_src[IMAGES], img_dst[IMAGES], img_all[IMAGES][128];

static void *image_main(void *arg) {
    int mine = (int)(intptr_t)arg;
    gasnet_image_t my_image = me * IMAGES + (gasnet_image_t)mine, total = nodes * IMAGES;
    gasnet_coll_init(images_of, my_image, NULL, 0, 0);
    int fl = GASNET_COLL_IN_ALLSYNC | GASNET_COLL_OUT_ALLSYNC | GASNET_COLL_LOCAL;
    for (gasnet_image_t root = 0; root < total; root++) {
        int src = 700 + (int)root, dst = -1;
        gasnet_coll_broadcast(GASNET_TEAM_ALL, &dst, root, &src, sizeof dst, fl);
        if (dst != 700 + (int)root)
            FAILED("image %u: broadcast from %u gave %d", (unsigned)my_image, (unsigned)root, dst);
    }
    /* LOCAL lists hold this node's images; each thread's own entry is used. */
    img_src[mine] = 900 + (int)my_image;
    void *dl[IMAGES], *sl[IMAGES];
    for (int i = 0; i < IMAGES; i++) {
        dl[i] = img_all[i];
        sl[i] = &img_src[i];
    }
    gasnet_coll_gather_allM(GASNET_TEAM_ALL, dl, sl, sizeof(int), fl);
    for (gasnet_image_t i = 0; i < total; i++)
        if (img_all[mine][i] != 900 + (int)i)
            FAILED("image %u: gather_allM slot %u holds %d", (unsigned)my_image, (unsigned)i,
                   img_all[mine][i]);
    /* A SINGLE list has every image; only this thread's entry is read. */
    void *al[128];
    for (gasnet_image_t i = 0; i < total; i++)
        al[i] = i / IMAGES == me ? (void *)&img_dst[i % IMAGES] : NULL;
    int fs = GASNET_COLL_IN_ALLSYNC | GASNET_COLL_OUT_ALLSYNC | GASNET_COLL_SINGLE;
    int v = 1234;
    gasnet_coll_wait_sync(gasnet_coll_broadcastM_nb(GASNET_TEAM_ALL, al, total - 1, &v,
                                                    sizeof v, fs));
    if (img_dst[mine] != 1234)
        FAILED("image %u: broadcastM gave %d", (unsigned)my_image, img_dst[mine]);
    return NULL;
}

int main(int argc, char **argv) {
    if (gasnet_init(&argc, &argv) != GASNET_OK)
        return 1;
    me = gasnet_mynode();
    nodes = gasnet_nodes();
    if (nodes > 64)
        FAILED("at most 64 nodes");
    if (gasnet_attach(NULL, 0, SEGSZ, 0) != GASNET_OK)
        FAILED("gasnet_attach");
    segs = (gasnet_seginfo_t *)malloc(nodes * sizeof *segs);
    if (!segs || gasnet_getSegmentInfo(segs, (int)nodes) != GASNET_OK)
        FAILED("gasnet_getSegmentInfo");
    if (argc > 1 && strcmp(argv[1], "images") == 0) {
        for (gasnet_node_t n = 0; n < nodes; n++)
            images_of[n] = IMAGES;
        pthread_t t[IMAGES];
        for (intptr_t i = 0; i < IMAGES; i++)
            if (pthread_create(&t[i], NULL, image_main, (void *)i) != 0)
                FAILED("pthread_create");
        for (int i = 0; i < IMAGES; i++)
            pthread_join(t[i], NULL);
        barrier();
        gasnet_exit(0);
    }
    gasnet_coll_fn_entry_t fns[1];
    fns[0].fnptr = (gasnet_coll_fn_t)summation;
    fns[0].flags = 0;
    gasnet_coll_init(NULL, 0, fns, 1, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, second_init, fns) != 0 || pthread_join(th, NULL) != 0)
        FAILED("a second thread's gasnet_coll_init");
    /* The init's own agreement is not a client barrier: the last one (attach's) was
     * anonymous. */
    int bid = -1;
    if (gasnet_barrier_result(&bid) != GASNET_BARRIERFLAG_ANONYMOUS)
        FAILED("gasnet_barrier_result after gasnet_coll_init: named %d", bid);

    const int ins[3] = {GASNET_COLL_IN_NOSYNC, GASNET_COLL_IN_MYSYNC, GASNET_COLL_IN_ALLSYNC};
    const int outs[3] = {GASNET_COLL_OUT_NOSYNC, GASNET_COLL_OUT_MYSYNC,
                         GASNET_COLL_OUT_ALLSYNC};
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 3; o++)
            for (int a = 0; a < 2; a++)
                one_mode(ins[i] | outs[o] | (a ? GASNET_COLL_LOCAL : GASNET_COLL_SINGLE), (i + o + a) % 2);

    /* An aggregate of two broadcasts, then two independent ones synced together. */
    int flags = GASNET_COLL_IN_MYSYNC | GASNET_COLL_OUT_MYSYNC | GASNET_COLL_LOCAL;
    int a = 0, b = 0, va = 11, vb = 22;
    gasnet_coll_broadcast_nb(GASNET_TEAM_ALL, &a, 0, &va, sizeof a, flags | GASNET_COLL_AGGREGATE);
    gasnet_coll_wait_sync(gasnet_coll_broadcast_nb(GASNET_TEAM_ALL, &b, nodes - 1, &vb, sizeof b, flags));
    if (a != 11 || b != 22)
        FAILED("aggregate: %d %d", a, b);
    gasnet_coll_handle_t hs[2];
    hs[0] = gasnet_coll_broadcast_nb(GASNET_TEAM_ALL, &a, 0, &vb, sizeof a, flags);
    hs[1] = gasnet_coll_broadcast_nb(GASNET_TEAM_ALL, &b, 0, &va, sizeof b, flags);
    while (gasnet_coll_try_sync_all(hs, 2) == GASNET_ERR_NOT_READY)
        gasnet_AMPoll();
    if (a != 22 || b != 11 || hs[0] != GASNET_COLL_INVALID_HANDLE ||
        hs[1] != GASNET_COLL_INVALID_HANDLE)
        FAILED("try_sync_all: %d %d", a, b);

    /* A team of the nodes of this node's parity, numbered in node order. */
    gasnet_team_handle_t t = gasnet_coll_team_split(GASNET_TEAM_ALL, me % 2, me / 2, NULL);
    gasnet_node_t tsize = gasnet_coll_team_size(t);
    if (tsize != (nodes + 1 - me % 2) / 2 || gasnet_coll_team_rank2node(t, 0) != me % 2 ||
        gasnet_coll_team_node2rank(t, me) != me / 2)
        FAILED("team split: size %u", (unsigned)tsize);
    int from = -1, mine = (int)me;
    gasnet_coll_broadcast(t, &from, 0, &mine, sizeof from,
                          GASNET_COLL_IN_ALLSYNC | GASNET_COLL_OUT_ALLSYNC | GASNET_COLL_LOCAL);
    if (from != (int)(me % 2))
        FAILED("team broadcast: %d", from);

    if (fn_bad)
        FAILED("the reduction function got a wrong element size, argument or flags");
    barrier();
    free(segs);
    gasnet_exit(0);
    return 0;
}

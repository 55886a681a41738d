/* The collectives through the C ABI, each result checked against an oracle computed here:
 * every data movement operation (single-address, m and v forms) and every reduction (array
 * reductions with a client function that is not commutative and with built-ins, the vector
 * reductions with a built-in and in place), under each of the nine sync modes, blocking and
 * non-blocking (synced by wait, try and the _all/_some forms), with buffers in the segment
 * (SINGLE addressing) and on the heap (LOCAL). Then teams (split, create, strided, 2d,
 * destroy) with collectives on them, aggregation, and the errors: no init, a bad team, bad
 * flags, a bad handle.
 *
 * With the argument "images", two image threads per rank instead: each calls
 * amnet_coll_init with its image, the ALL_THREADS forms run from both, and one of them enters
 * m forms for both (a LOCAL and a SINGLE list). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "check.h"

#define AREA 65536

typedef struct {
    uint64_t a, b;
} aff; /* x -> a * x + b */

/* Apply l, then r. Associative, not commutative. */
static aff comb(aff l, aff r) {
    aff o = {l.a * r.a, r.a * l.b + r.b};
    return o;
}

static volatile int fn_bad; /* the callback saw an argument it should not have */

/* The client's function with the GASNet collectives' arguments. */
static void affine(void *results, size_t rc, const void *left, size_t lc, const void *right,
                   size_t es, int flags, int arg) {
    if (es != sizeof(aff) || arg != 5 || !(flags & (int)AMNET_COLL_NONCOMM) || rc == 0)
        fn_bad = 1;
    const aff *l = (const aff *)left, *r = (const aff *)right;
    aff *out = (aff *)results;
    aff acc = {1, 0};
    for (size_t i = 0; i < lc; i++)
        acc = comb(acc, l[i]);
    for (size_t i = 0; i < rc; i++) {
        acc = comb(acc, r[i]);
        out[i] = acc;
    }
}

static uint8_t *seg;           /* this rank's segment */
static uint8_t *heap_src, *heap_dst;
static uint32_t f_affine;      /* function indices */
static uint32_t f_sum_i64, f_max_u64;
static uint32_t pass;          /* numbers every call, so that stale data shows */

static const uint32_t ins[3] = {AMNET_COLL_IN_NOSYNC, AMNET_COLL_IN_MYSYNC, AMNET_COLL_IN_ALLSYNC};
static const uint32_t outs[3] = {AMNET_COLL_OUT_NOSYNC, AMNET_COLL_OUT_MYSYNC,
                                 AMNET_COLL_OUT_ALLSYNC};

static uint8_t val(uint32_t p, size_t k) { return (uint8_t)(pass * 31u + p * 7u + k * 3u + 1u); }

/* The element k of participant p's run of affine maps. */
static aff elem(uint32_t p, size_t k) {
    aff e = {2 * (pass + p * 16 + k) + 3, pass + p * 16 + k + 1};
    return e;
}

static const char *what;       /* the operation under test, for messages */
static uint32_t flags_now;
static amnet_coll_handle_t *hp; /* null: blocking */
static amnet_coll_handle_t h;
static int sync_kind;

/* Complete the call just started: nothing for a blocking call, else one of the syncs. */
static void finish(void) {
    if (!hp)
        return;
    switch (sync_kind++ % 4) {
    case 0:
        CHECK(amnet_coll_wait_sync(&h));
        break;
    case 1: {
        int rc;
        while ((rc = amnet_coll_try_sync(&h)) == AMNET_NOT_READY)
            ;
        CHECK(rc);
        break;
    }
    case 2:
        CHECK(amnet_coll_wait_sync_all(&h, 1));
        break;
    default:
        CHECK(amnet_coll_wait_sync_some(&h, 1));
        break;
    }
    if (h != AMNET_COLL_HANDLE_INVALID)
        FAIL("%s: the handle is still valid after its sync", what);
}

#define RUN(call)                                                                          \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != AMNET_OK)                                                               \
            FAIL("%s (flags %#x) returned %s: %s", what, flags_now, amnet_error_name(rc_), \
                 amnet_last_error());                                                      \
        finish();                                                                          \
    } while (0)

#define SAME(got, want, len)                                                         \
    do {                                                                             \
        if (memcmp((got), (want), (len)) != 0)                                       \
            FAIL("%s (flags %#x, pass %u): wrong result", what, flags_now, pass);    \
    } while (0)

/* Before a call: sources set, destinations cleared, then every rank past that point. */
static void ready(uint8_t *dst) {
    memset(dst, 0xEE, AREA);
    CHECK(amnet_coll_barrier(AMNET_TEAM_WORLD));
}

/* After a call: every rank's part in place (a barrier completes OUT_NOSYNC data too). */
static void done(void) { CHECK(amnet_coll_barrier(AMNET_TEAM_WORLD)); }

static void data_movement(uint8_t *src, uint8_t *dst, uint32_t fl, size_t n) {
    uint32_t P = nranks, root = pass % P;
    uint8_t want[AREA];
    void *dl[64], *sl[64];
    uint32_t single = fl & AMNET_COLL_SINGLE;
    size_t nl = single ? P : 1; /* list entries: every image under SINGLE, this rank's else */
    for (size_t i = 0; i < nl; i++) {
        dl[i] = dst;
        sl[i] = src;
    }
    flags_now = fl;

    what = "broadcast";
    for (size_t k = 0; k < n; k++)
        src[k] = val(root, k);
    ready(dst);
    RUN(amnet_coll_broadcast(AMNET_TEAM_WORLD, dst, root, src, n, fl, hp));
    done();
    for (size_t k = 0; k < n; k++)
        want[k] = val(root, k);
    SAME(dst, want, n);
    pass++;

    what = "broadcastm";
    for (size_t k = 0; k < n; k++)
        src[k] = val(root, k);
    ready(dst);
    RUN(amnet_coll_broadcastm(AMNET_TEAM_WORLD, dl, nl, root, src, n, fl, hp));
    done();
    for (size_t k = 0; k < n; k++)
        want[k] = val(root, k);
    SAME(dst, want, n);
    pass++;

    what = "scatter";
    for (uint32_t p = 0; p < P; p++)
        for (size_t k = 0; k < n; k++)
            src[p * n + k] = val(p, k);
    ready(dst);
    RUN(amnet_coll_scatter(AMNET_TEAM_WORLD, dst, root, src, n, fl, hp));
    done();
    for (size_t k = 0; k < n; k++)
        want[k] = val(me, k);
    SAME(dst, want, n);
    pass++;

    what = "scatterm";
    for (uint32_t p = 0; p < P; p++)
        for (size_t k = 0; k < n; k++)
            src[p * n + k] = val(p, k);
    ready(dst);
    RUN(amnet_coll_scatterm(AMNET_TEAM_WORLD, dl, nl, root, src, n, fl, hp));
    done();
    for (size_t k = 0; k < n; k++)
        want[k] = val(me, k);
    SAME(dst, want, n);
    pass++;

    what = "gather";
    for (size_t k = 0; k < n; k++)
        src[k] = val(me, k);
    ready(dst);
    RUN(amnet_coll_gather(AMNET_TEAM_WORLD, root, dst, src, n, fl, hp));
    done();
    if (me == root) {
        for (uint32_t p = 0; p < P; p++)
            for (size_t k = 0; k < n; k++)
                want[p * n + k] = val(p, k);
        SAME(dst, want, P * n);
    }
    pass++;

    what = "gatherm";
    for (size_t k = 0; k < n; k++)
        src[k] = val(me, k);
    ready(dst);
    RUN(amnet_coll_gatherm(AMNET_TEAM_WORLD, root, dst, sl, nl, n, fl, hp));
    done();
    if (me == root) {
        for (uint32_t p = 0; p < P; p++)
            for (size_t k = 0; k < n; k++)
                want[p * n + k] = val(p, k);
        SAME(dst, want, P * n);
    }
    pass++;

    for (int m = 0; m < 2; m++) {
        what = m ? "gather_allm" : "gather_all";
        for (size_t k = 0; k < n; k++)
            src[k] = val(me, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_gather_allm(AMNET_TEAM_WORLD, dl, nl, sl, nl, n, fl, hp));
        else
            RUN(amnet_coll_gather_all(AMNET_TEAM_WORLD, dst, src, n, fl, hp));
        done();
        for (uint32_t p = 0; p < P; p++)
            for (size_t k = 0; k < n; k++)
                want[p * n + k] = val(p, k);
        SAME(dst, want, P * n);
        pass++;
    }

    for (int m = 0; m < 2; m++) {
        what = m ? "exchangem" : "exchange";
        /* Block j of my source goes to participant j: it holds val(me * P + j, k). */
        for (uint32_t j = 0; j < P; j++)
            for (size_t k = 0; k < n; k++)
                src[j * n + k] = val(me * P + j, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_exchangem(AMNET_TEAM_WORLD, dl, nl, sl, nl, n, fl, hp));
        else
            RUN(amnet_coll_exchange(AMNET_TEAM_WORLD, dst, src, n, fl, hp));
        done();
        for (uint32_t i = 0; i < P; i++)
            for (size_t k = 0; k < n; k++)
                want[i * n + k] = val(i * P + me, k);
        SAME(dst, want, P * n);
        pass++;
    }

    /* v forms: participant i's block has n + i bytes; exchange_v moves n + i + j from i to j. */
    size_t counts[64 * 64], off[65];
    off[0] = 0;
    for (uint32_t p = 0; p < P; p++) {
        counts[p] = n + p;
        off[p + 1] = off[p] + counts[p];
    }
    for (int m = 0; m < 2; m++) {
        what = m ? "scatter_vm" : "scatter_v";
        for (uint32_t p = 0; p < P; p++)
            for (size_t k = 0; k < counts[p]; k++)
                src[off[p] + k] = val(p, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_scatter_vm(AMNET_TEAM_WORLD, dl, nl, root, src, counts, P, fl, hp));
        else
            RUN(amnet_coll_scatter_v(AMNET_TEAM_WORLD, dst, root, src, counts, P, fl, hp));
        done();
        for (size_t k = 0; k < counts[me]; k++)
            want[k] = val(me, k);
        SAME(dst, want, counts[me]);
        pass++;

        what = m ? "gather_vm" : "gather_v";
        for (size_t k = 0; k < counts[me]; k++)
            src[k] = val(me, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_gather_vm(AMNET_TEAM_WORLD, root, dst, sl, nl, counts, P, fl, hp));
        else
            RUN(amnet_coll_gather_v(AMNET_TEAM_WORLD, root, dst, src, counts, P, fl, hp));
        done();
        if (me == root) {
            for (uint32_t p = 0; p < P; p++)
                for (size_t k = 0; k < counts[p]; k++)
                    want[off[p] + k] = val(p, k);
            SAME(dst, want, off[P]);
        }
        pass++;

        what = m ? "gather_all_vm" : "gather_all_v";
        for (size_t k = 0; k < counts[me]; k++)
            src[k] = val(me, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_gather_all_vm(AMNET_TEAM_WORLD, dl, nl, sl, nl, counts, P, fl, hp));
        else
            RUN(amnet_coll_gather_all_v(AMNET_TEAM_WORLD, dst, src, counts, P, fl, hp));
        done();
        for (uint32_t p = 0; p < P; p++)
            for (size_t k = 0; k < counts[p]; k++)
                want[off[p] + k] = val(p, k);
        SAME(dst, want, off[P]);
        pass++;

        what = m ? "exchange_vm" : "exchange_v";
        size_t mat[64 * 64];
        for (uint32_t i = 0; i < P; i++)
            for (uint32_t j = 0; j < P; j++)
                mat[i * P + j] = n + i + j;
        size_t at = 0;
        for (uint32_t j = 0; j < P; j++)
            for (size_t k = 0; k < mat[me * P + j]; k++)
                src[at++] = val(me * P + j, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_exchange_vm(AMNET_TEAM_WORLD, dl, nl, sl, nl, mat, P * P, fl, hp));
        else
            RUN(amnet_coll_exchange_v(AMNET_TEAM_WORLD, dst, src, mat, P * P, fl, hp));
        done();
        at = 0;
        for (uint32_t i = 0; i < P; i++)
            for (size_t k = 0; k < mat[i * P + me]; k++)
                want[at++] = val(i * P + me, k);
        SAME(dst, want, at);
        pass++;
    }
}

static void reductions(uint8_t *src, uint8_t *dst, uint32_t fl) {
    uint32_t P = nranks, root = pass % P;
    const size_t K = 3; /* elements per participant */
    aff *s = (aff *)src, *d = (aff *)dst;
    void *dl[64], *sl[64];
    size_t nl = (fl & AMNET_COLL_SINGLE) ? P : 1;
    for (size_t i = 0; i < nl; i++) {
        dl[i] = dst;
        sl[i] = src;
    }
    flags_now = fl;

    /* Array reductions of K * P affine maps, K per participant (block-cyclic, blocks of K). */
    for (int m = 0; m < 2; m++) {
        what = m ? "reducem" : "reduce";
        for (size_t k = 0; k < K; k++)
            s[k] = elem(me, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_reducem(AMNET_TEAM_WORLD, root, dst, sl, nl, K, 0, sizeof(aff), K * P,
                                   f_affine, 5, fl, hp));
        else
            RUN(amnet_coll_reduce(AMNET_TEAM_WORLD, root, dst, src, K, 0, sizeof(aff), K * P,
                                  f_affine, 5, fl, hp));
        done();
        aff acc = {1, 0};
        for (uint32_t p = 0; p < P; p++)
            for (size_t k = 0; k < K; k++)
                acc = comb(acc, elem(p, k));
        if (me == root)
            SAME(d, &acc, sizeof acc);
        pass++;

        what = m ? "reduce_to_allm" : "reduce_to_all";
        for (size_t k = 0; k < K; k++)
            s[k] = elem(me, k);
        ready(dst);
        if (m)
            RUN(amnet_coll_reduce_to_allm(AMNET_TEAM_WORLD, dl, nl, sl, nl, K, 0, sizeof(aff),
                                          K * P, f_affine, 5, fl, hp));
        else
            RUN(amnet_coll_reduce_to_all(AMNET_TEAM_WORLD, dst, src, K, 0, sizeof(aff), K * P,
                                         f_affine, 5, fl, hp));
        done();
        acc = (aff){1, 0};
        for (uint32_t p = 0; p < P; p++)
            for (size_t k = 0; k < K; k++)
                acc = comb(acc, elem(p, k));
        SAME(d, &acc, sizeof acc);
        pass++;

        for (int ex = 0; ex < 2; ex++) {
            what = ex ? (m ? "exclusive_prefix_reducem" : "exclusive_prefix_reduce")
                      : (m ? "prefix_reducem" : "prefix_reduce");
            for (size_t k = 0; k < K; k++)
                s[k] = elem(me, k);
            ready(dst);
            int rc;
            if (ex && m)
                rc = amnet_coll_exclusive_prefix_reducem(AMNET_TEAM_WORLD, dl, nl, K, 0, sl, nl, K, 0,
                                                         sizeof(aff), K * P, f_affine, 5, fl, hp);
            else if (ex)
                rc = amnet_coll_exclusive_prefix_reduce(AMNET_TEAM_WORLD, dst, K, 0, src, K, 0,
                                                        sizeof(aff), K * P, f_affine, 5, fl, hp);
            else if (m)
                rc = amnet_coll_prefix_reducem(AMNET_TEAM_WORLD, dl, nl, K, 0, sl, nl, K, 0,
                                               sizeof(aff), K * P, f_affine, 5, fl, hp);
            else
                rc = amnet_coll_prefix_reduce(AMNET_TEAM_WORLD, dst, K, 0, src, K, 0, sizeof(aff),
                                              K * P, f_affine, 5, fl, hp);
            RUN(rc);
            done();
            acc = (aff){1, 0};
            for (uint32_t p = 0; p < P; p++)
                for (size_t k = 0; k < K; k++) {
                    aff before = acc;
                    acc = comb(acc, elem(p, k));
                    if (p != me)
                        continue;
                    if (ex && p == 0 && k == 0) {
                        uint8_t untouched[sizeof(aff)];
                        memset(untouched, 0xEE, sizeof untouched);
                        SAME(&d[k], untouched, sizeof(aff));
                    } else {
                        SAME(&d[k], ex ? &before : &acc, sizeof(aff));
                    }
                }
            pass++;
        }
    }

    /* A built-in on an array: the maximum of K * P u64 elements at the root. */
    what = "reduce (built-in max)";
    uint64_t *su = (uint64_t *)src;
    for (size_t k = 0; k < K; k++)
        su[k] = (uint64_t)(pass * 1000 + me * 10 + k);
    ready(dst);
    RUN(amnet_coll_reduce(AMNET_TEAM_WORLD, root, dst, src, K, 0, 8, K * P, f_max_u64, 0, fl, hp));
    done();
    uint64_t mx = (uint64_t)(pass * 1000 + (P - 1) * 10 + K - 1);
    if (me == root)
        SAME(dst, &mx, 8);
    pass++;

    /* Vector reductions: C int64 elements per participant. */
    const size_t C = 5;
    int64_t *si = (int64_t *)src, *di = (int64_t *)dst;
    for (int inplace = 0; inplace < 2; inplace++) {
        what = inplace ? "reduce_elems_to_all (in place)" : "reduce_elems_to_all";
        memset(dst, 0xEE, AREA);
        int64_t *in = inplace ? di : si;
        for (size_t i = 0; i < C; i++)
            in[i] = (int64_t)(pass + me * 100 + i) * (me % 2 ? -1 : 1);
        CHECK(amnet_coll_barrier(AMNET_TEAM_WORLD));
        RUN(amnet_coll_reduce_elems_to_all(AMNET_TEAM_WORLD, dst, inplace ? AMNET_COLL_IN_PLACE : src,
                                           8, C, f_sum_i64, 0, fl, hp));
        done();
        for (size_t i = 0; i < C; i++) {
            int64_t w = 0;
            for (uint32_t p = 0; p < P; p++)
                w += (int64_t)(pass + p * 100 + i) * (p % 2 ? -1 : 1);
            SAME(&di[i], &w, 8);
        }
        pass++;
    }
    what = "reduce_elems";
    for (size_t i = 0; i < C; i++)
        si[i] = (int64_t)(pass + me + i);
    ready(dst);
    RUN(amnet_coll_reduce_elems(AMNET_TEAM_WORLD, root, dst, src, 8, C, f_sum_i64, 0, fl, hp));
    done();
    if (me == root)
        for (size_t i = 0; i < C; i++) {
            int64_t w = 0;
            for (uint32_t p = 0; p < P; p++)
                w += (int64_t)(pass + p + i);
            SAME(&di[i], &w, 8);
        }
    pass++;
    for (int ex = 0; ex < 2; ex++) {
        what = ex ? "exclusive_scan_elems" : "scan_elems";
        for (size_t i = 0; i < C; i++)
            s[i] = elem(me, i);
        ready(dst);
        if (ex)
            RUN(amnet_coll_exclusive_scan_elems(AMNET_TEAM_WORLD, dst, src, sizeof(aff), C, f_affine,
                                                5, fl, hp));
        else
            RUN(amnet_coll_scan_elems(AMNET_TEAM_WORLD, dst, src, sizeof(aff), C, f_affine, 5, fl, hp));
        done();
        if (!(ex && me == 0))
            for (size_t i = 0; i < C; i++) {
                aff acc = {1, 0};
                for (uint32_t p = 0; p < (ex ? me : me + 1); p++)
                    acc = comb(acc, elem(p, i));
                SAME(&d[i], &acc, sizeof acc);
            }
        pass++;
    }
}

static void teams(void) {
    hp = NULL;
    flags_now = AMNET_COLL_IN_ALLSYNC | AMNET_COLL_OUT_ALLSYNC | AMNET_COLL_SINGLE;
    /* Even and odd ranks, numbered in reverse. */
    amnet_team_t t = AMNET_TEAM_NULL;
    CHECK(amnet_team_split(AMNET_TEAM_WORLD, me % 2, -(int32_t)me, &t));
    uint32_t trank, tsize, timages;
    CHECK(amnet_team_info(t, &trank, &tsize, &timages));
    uint32_t want_size = (nranks + 1 - me % 2) / 2;
    if (tsize != want_size || timages != tsize || trank != want_size - 1 - me / 2)
        FAIL("split: rank %u of %u (%u images), wanted rank %u of %u", trank, tsize, timages,
             want_size - 1 - me / 2, want_size);
    uint32_t w;
    CHECK(amnet_team_world_rank(t, trank, &w));
    if (w != me)
        FAIL("team rank %u is world rank %u, wanted %u", trank, w, me);
    EXPECT(amnet_team_world_rank(t, tsize, &w), AMNET_ERR_BAD_RANK);
    /* A broadcast from team rank 0 and a sum over the team. */
    what = "team broadcast";
    uint64_t v = me, got = 0;
    CHECK(amnet_coll_broadcast(t, &got, 0, &v, 8, flags_now, NULL));
    uint32_t r0;
    CHECK(amnet_team_world_rank(t, 0, &r0));
    if (got != r0)
        FAIL("team broadcast: got %llu, wanted %u", (unsigned long long)got, r0);
    what = "team reduce_elems_to_all";
    int64_t one = (int64_t)me, sum = 0, wsum = 0;
    CHECK(amnet_coll_reduce_elems_to_all(t, &sum, &one, 8, 1, f_sum_i64, 0, flags_now, NULL));
    for (uint32_t r = me % 2; r < nranks; r += 2)
        wsum += r;
    if (sum != wsum)
        FAIL("team sum: got %lld, wanted %lld", (long long)sum, (long long)wsum);
    CHECK(amnet_coll_barrier(t));
    CHECK(amnet_team_destroy(t));
    EXPECT(amnet_coll_barrier(t), AMNET_ERR_BAD_ARG);

    /* The world in reverse, as a list; then the first rank alone (strided). */
    uint32_t rev[64];
    for (uint32_t r = 0; r < nranks; r++)
        rev[r] = nranks - 1 - r;
    CHECK(amnet_team_create(AMNET_TEAM_WORLD, rev, nranks, &t));
    CHECK(amnet_team_info(t, &trank, &tsize, NULL));
    if (trank != nranks - 1 - me || tsize != nranks)
        FAIL("create: rank %u of %u", trank, tsize);
    what = "gather_all on the reversed team";
    uint32_t all[64];
    CHECK(amnet_coll_gather_all(t, all, &me, 4, flags_now, NULL));
    for (uint32_t r = 0; r < nranks; r++)
        if (all[r] != nranks - 1 - r)
            FAIL("gather_all on the reversed team: slot %u holds %u", r, all[r]);
    CHECK(amnet_team_destroy(t));
    CHECK(amnet_team_split_strided(AMNET_TEAM_WORLD, 0, 1, 1, &t));
    if ((me == 0) != (t != AMNET_TEAM_NULL))
        FAIL("split_strided(0, 1, 1): team %u on rank %u", t, me);
    if (t != AMNET_TEAM_NULL)
        CHECK(amnet_team_destroy(t));
    amnet_team_t row, col;
    CHECK(amnet_team_split_2d(AMNET_TEAM_WORLD, 2, &row, &col));
    CHECK(amnet_team_info(row, &trank, NULL, NULL));
    if (trank != me % 2)
        FAIL("split_2d: rank %u in its row, wanted %u", trank, me % 2);
    CHECK(amnet_team_destroy(row));
    CHECK(amnet_team_destroy(col));
    EXPECT(amnet_team_destroy(AMNET_TEAM_WORLD), AMNET_ERR_BAD_ARG);
    CHECK(amnet_team_split(AMNET_TEAM_WORLD, me == 0 ? AMNET_TEAM_NO_COLOR : 1, 0, &t));
    if ((me == 0) != (t == AMNET_TEAM_NULL))
        FAIL("split with no color: team %u on rank %u", t, me);
    if (t != AMNET_TEAM_NULL)
        CHECK(amnet_team_destroy(t));
}

static void aggregate(void) {
    /* Three broadcasts aggregated: one handle for all. */
    uint32_t fl = AMNET_COLL_IN_MYSYNC | AMNET_COLL_OUT_MYSYNC | AMNET_COLL_LOCAL;
    uint64_t src[3], dst[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        src[i] = 100 + (uint64_t)i;
    amnet_coll_handle_t hs[3];
    for (int i = 0; i < 3; i++)
        CHECK(amnet_coll_broadcast(AMNET_TEAM_WORLD, &dst[i], (uint32_t)i % nranks, &src[i], 8,
                                   fl | (i < 2 ? AMNET_COLL_AGGREGATE : 0), &hs[i]));
    CHECK(amnet_coll_wait_sync(&hs[2]));
    for (int i = 0; i < 3; i++)
        if (dst[i] != 100 + (uint64_t)i)
            FAIL("aggregate: broadcast %d delivered %llu", i, (unsigned long long)dst[i]);
    /* Two independent ones: try_sync_all until both are done. */
    for (int i = 0; i < 2; i++)
        CHECK(amnet_coll_broadcast(AMNET_TEAM_WORLD, &dst[i], 0, &src[2 - i], 8, fl, &hs[i]));
    int rc;
    while ((rc = amnet_coll_try_sync_all(hs, 2)) == AMNET_NOT_READY)
        ;
    CHECK(rc);
    if (hs[0] != AMNET_COLL_HANDLE_INVALID || hs[1] != AMNET_COLL_HANDLE_INVALID)
        FAIL("try_sync_all left a handle valid");
    if (dst[0] != 102 || dst[1] != 101)
        FAIL("two broadcasts synced together: %llu %llu", (unsigned long long)dst[0],
             (unsigned long long)dst[1]);
    CHECK(amnet_coll_barrier(AMNET_TEAM_WORLD));
}

static void errors(void) {
    uint64_t x = 0, y = 0;
    uint32_t ok = AMNET_COLL_IN_ALLSYNC | AMNET_COLL_OUT_ALLSYNC | AMNET_COLL_LOCAL;
    EXPECT(amnet_coll_broadcast(77, &x, 0, &y, 8, ok, NULL), AMNET_ERR_BAD_ARG);
    EXPECT(amnet_coll_broadcast(AMNET_TEAM_NULL, &x, 0, &y, 8, ok, NULL), AMNET_ERR_BAD_ARG);
    /* No IN flag: refused on every rank before anything moves. */
    EXPECT(amnet_coll_broadcast(AMNET_TEAM_WORLD, &x, 0, &y, 8, AMNET_COLL_OUT_ALLSYNC | AMNET_COLL_LOCAL,
                                NULL),
           AMNET_ERR_USAGE);
    if (!strstr(amnet_last_error(), "IN"))
        FAIL("the missing-flag message does not name the IN flag: %s", amnet_last_error());
    amnet_coll_handle_t bogus = 0x123456789ULL;
    EXPECT(amnet_coll_wait_sync(&bogus), AMNET_ERR_BAD_HANDLE);
    amnet_coll_handle_t none = AMNET_COLL_HANDLE_INVALID;
    CHECK(amnet_coll_wait_sync(&none));
    EXPECT(amnet_coll_init(NULL, 0, 0, NULL, 0), AMNET_ERR_STATE);
    uint32_t idx;
    EXPECT(amnet_coll_builtin(AMNET_RED_XOR, AMNET_TYPE_F64, &idx), AMNET_ERR_BAD_ARG);
    EXPECT(amnet_coll_builtin(99, AMNET_TYPE_I64, &idx), AMNET_ERR_BAD_ARG);
    CHECK(amnet_coll_barrier(AMNET_TEAM_WORLD));
}

/* ---- images: two image threads per rank ---------------------------------------------- */

static uint32_t images_of[64];
static pthread_barrier_t pair; /* the two image threads of this rank */
static uint64_t img_dst[2], img_src[2];
static uint32_t img_all[2][128];

static void *image_main(void *arg) {
    uint32_t mine = (uint32_t)(uintptr_t)arg; /* 0 or 1 */
    uint32_t my_image = me * 2 + mine;
    amnet_coll_fn_entry_t fns[1] = {{affine, AMNET_COLL_NONCOMM}};
    CHECK(amnet_coll_init(images_of, nranks, my_image, fns, 1));
    uint32_t img, total, local;
    CHECK(amnet_coll_images(&img, &total, &local));
    if (img != my_image || total != 2 * nranks || local != 2)
        FAIL("images: %u of %u (%u here), wanted %u of %u (2)", img, total, local, my_image,
             2 * nranks);
    uint32_t fl = AMNET_COLL_IN_ALLSYNC | AMNET_COLL_OUT_ALLSYNC | AMNET_COLL_LOCAL |
                  AMNET_COLL_ALL_THREADS;
    for (uint32_t root = 0; root < total; root++) {
        uint64_t src = 1000 + root, dst = 0;
        CHECK(amnet_coll_broadcast(AMNET_TEAM_WORLD, &dst, root, &src, 8, fl, NULL));
        if (dst != 1000 + root)
            FAIL("image %u: broadcast from %u gave %llu", my_image, root, (unsigned long long)dst);
    }
    uint32_t all[128];
    CHECK(amnet_coll_gather_all(AMNET_TEAM_WORLD, all, &my_image, 4, fl, NULL));
    for (uint32_t i = 0; i < total; i++)
        if (all[i] != i)
            FAIL("image %u: gather_all slot %u holds %u", my_image, i, all[i]);
    uint32_t fi = AMNET_COLL_N_BUILTIN; /* the affine map: client function 0 */
    aff e = elem(my_image, 0), out = {0, 0};
    CHECK(amnet_coll_reduce_elems_to_all(AMNET_TEAM_WORLD, &out, &e, sizeof e, 1, fi, 5, fl, NULL));
    aff acc = {1, 0};
    for (uint32_t i = 0; i < total; i++)
        acc = comb(acc, elem(i, 0));
    if (memcmp(&out, &acc, sizeof acc) != 0)
        FAIL("image %u: reduce_elems_to_all in image order is wrong", my_image);
    /* m forms entered by one representative thread for both images of its rank: a LOCAL
     * list holds this rank's images, a SINGLE list every image (only this rank's are used). */
    img_src[mine] = 5000 + my_image;
    pthread_barrier_wait(&pair);
    if (mine == 0) {
        uint32_t fm = AMNET_COLL_IN_ALLSYNC | AMNET_COLL_OUT_ALLSYNC | AMNET_COLL_LOCAL;
        void *dl[2] = {&img_dst[0], &img_dst[1]};
        uint32_t root = total - 1;
        CHECK(amnet_coll_broadcastm(AMNET_TEAM_WORLD, dl, 2, root, &img_src[1], 8, fm, NULL));
        void *al[128], *sl[128];
        for (uint32_t i = 0; i < total; i++) {
            al[i] = i / 2 == me ? (void *)img_all[i % 2] : NULL;
            sl[i] = i / 2 == me ? (void *)&img_src[i % 2] : NULL;
        }
        uint32_t fs = AMNET_COLL_IN_ALLSYNC | AMNET_COLL_OUT_ALLSYNC | AMNET_COLL_SINGLE;
        CHECK(amnet_coll_gather_allm(AMNET_TEAM_WORLD, al, total, sl, total, 8, fs, NULL));
    }
    pthread_barrier_wait(&pair);
    if (img_dst[mine] != 5000 + total - 1)
        FAIL("image %u: broadcastm gave %llu", my_image, (unsigned long long)img_dst[mine]);
    for (uint32_t i = 0; i < total; i++) {
        uint64_t got;
        memcpy(&got, &img_all[mine][2 * i], 8);
        if (got != 5000 + i)
            FAIL("image %u: gather_allm slot %u holds %llu", my_image, i,
                 (unsigned long long)got);
    }
    CHECK(amnet_coll_barrier_images(AMNET_TEAM_WORLD));
    return NULL;
}

int main(int argc, char **argv) {
    start();
    CHECK(amnet_attach(NULL, 0, 4 * AREA));
    if (nranks > 64)
        FAIL("at most 64 ranks");
    /* Before amnet_coll_init: no context on this thread. */
    EXPECT(amnet_coll_barrier(AMNET_TEAM_WORLD), AMNET_ERR_STATE);
    if (argc > 1 && strcmp(argv[1], "images") == 0) {
        for (uint32_t r = 0; r < nranks; r++)
            images_of[r] = 2;
        if (pthread_barrier_init(&pair, NULL, 2) != 0)
            FAIL("pthread_barrier_init");
        pthread_t th[2];
        for (uintptr_t i = 0; i < 2; i++)
            if (pthread_create(&th[i], NULL, image_main, (void *)i) != 0)
                FAIL("pthread_create");
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        if (fn_bad)
            FAIL("the reduction function got a wrong element size, argument or flags");
        CHECK(amnet_barrier());
        return 0;
    }
    amnet_coll_fn_entry_t fns[1] = {{affine, AMNET_COLL_NONCOMM}};
    CHECK(amnet_coll_init(NULL, 0, 0, fns, 1));
    /* The init's agreement across ranks is not a client barrier. */
    uint32_t bflags = 0, bid = 1;
    CHECK(amnet_barrier_result(&bflags, &bid));
    if (bflags != AMNET_BARRIER_ANONYMOUS || bid != 0)
        FAIL("amnet_barrier_result after amnet_coll_init: flags %u id %u", bflags, bid);
    f_affine = AMNET_COLL_N_BUILTIN;
    CHECK(amnet_coll_builtin(AMNET_RED_SUM, AMNET_TYPE_I64, &f_sum_i64));
    CHECK(amnet_coll_builtin(AMNET_RED_MAX, AMNET_TYPE_U64, &f_max_u64));
    void *base;
    CHECK(amnet_segment(&base, NULL));
    seg = (uint8_t *)base;
    heap_src = (uint8_t *)malloc(AREA);
    heap_dst = (uint8_t *)malloc(AREA);
    if (!heap_src || !heap_dst)
        FAIL("malloc");
    for (int io = 0; io < 9; io++) {
        for (int nb = 0; nb < 2; nb++) {
            int in_seg = (io + nb) % 2 == 0;
            uint32_t fl = ins[io / 3] | outs[io % 3] | (in_seg ? AMNET_COLL_SINGLE : AMNET_COLL_LOCAL);
            uint8_t *src = in_seg ? seg : heap_src, *dst = in_seg ? seg + AREA : heap_dst;
            hp = nb ? &h : NULL;
            data_movement(src, dst, fl, nb ? 300 : 8);
            reductions(src, dst, fl);
        }
    }
    if (fn_bad)
        FAIL("the reduction function got a wrong element size, argument or flags");
    teams();
    aggregate();
    errors();
    CHECK(amnet_barrier());
    free(heap_src);
    free(heap_dst);
    return 0;
}

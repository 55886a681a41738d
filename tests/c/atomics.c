/* Remote atomics: every rank adds to counters on rank 0 in every form (blocking fetch,
 * apply, explicit and implicit handles), takes a compare-and-swap turn, and updates a
 * floating-point minimum and maximum; rank 0 checks the totals. Also the errors: an unknown
 * operation or type, a misaligned element, a bitwise operation on a float domain, and ranks
 * that disagree on a domain. */
#include "check.h"

enum { ROUNDS = 100 };

int main(void) {
    start();
    CHECK(amnet_attach(NULL, 0, 4096));
    amnet_ad_t u64, i32, f64;
    CHECK(amnet_ad_create(AMNET_TYPE_U64, AMNET_AOPS_ALL, &u64));
    CHECK(amnet_ad_create(AMNET_TYPE_I32, (1u << AMNET_AOP_ADD) | (1u << AMNET_AOP_COMPARE_SWAP) |
                                              (1u << AMNET_AOP_GET), &i32));
    CHECK(amnet_ad_create(AMNET_TYPE_F64, AMNET_AOPS_ARITHMETIC, &f64));
    amnet_atomic_value_t one = {.u64 = 1}, none = {.u64 = 0}, old;
    /* Offsets on rank 0: 0 a u64 counter, 8 an i32 turn word, 16 and 24 f64 min and max. */
    if (me == 0) {
        CHECK(amnet_ad_apply(f64, 0, 16, AMNET_AOP_SET, (amnet_atomic_value_t){.f64 = 1e300}, none));
        CHECK(amnet_ad_apply(f64, 0, 24, AMNET_AOP_SET, (amnet_atomic_value_t){.f64 = -1e300}, none));
    }
    CHECK(amnet_barrier());
    for (int i = 0; i < ROUNDS; i++) {
        CHECK(amnet_ad_fetch(u64, 0, 0, AMNET_AOP_ADD, one, none, &old));
        CHECK(amnet_ad_apply(u64, 0, 0, AMNET_AOP_INC, none, none));
        amnet_handle_t h;
        CHECK(amnet_ad_apply_nb(u64, 0, 0, AMNET_AOP_ADD, (amnet_atomic_value_t){.u64 = 2}, none, &h));
        CHECK(amnet_sync(&h));
        CHECK(amnet_ad_apply_nbi(u64, 0, 0, AMNET_AOP_SUB, one, none));
        /* A fetching operation with a handle: add 0 and 1 in turn, waiting and trying. */
        amnet_handle_t f;
        amnet_atomic_value_t v;
        CHECK(amnet_ad_fetch_nb(u64, 0, 0, AMNET_AOP_ADD, i % 2 ? one : none, none, &f));
        if (i % 2) {
            int rc;
            while ((rc = amnet_ad_try_wait(&f, &v)) == AMNET_NOT_READY)
                ;
            CHECK(rc);
        } else {
            CHECK(amnet_ad_wait(&f, &v));
        }
        if (f != AMNET_HANDLE_INVALID)
            FAIL("a waited fetching handle is not reset");
    }
    CHECK(amnet_sync_nbi());
    /* Turns: rank r waits until the word is r, then makes it r + 1. */
    amnet_atomic_value_t want = {.i32 = (int32_t)me}, next = {.i32 = (int32_t)me + 1}, seen;
    do {
        CHECK(amnet_ad_fetch(i32, 0, 8, AMNET_AOP_COMPARE_SWAP, want, next, &seen));
        CHECK(amnet_poll(NULL));
    } while (seen.i32 != (int32_t)me);
    CHECK(amnet_ad_apply(f64, 0, 16, AMNET_AOP_MIN, (amnet_atomic_value_t){.f64 = me * 0.5}, none));
    CHECK(amnet_ad_apply(f64, 0, 24, AMNET_AOP_MAX, (amnet_atomic_value_t){.f64 = me * 0.5}, none));
    CHECK(amnet_barrier());
    if (me == 0) {
        amnet_atomic_value_t v;
        CHECK(amnet_ad_fetch(u64, 0, 0, AMNET_AOP_GET, none, none, &v));
        uint64_t total = (uint64_t)(ROUNDS * 3 + ROUNDS / 2) * nranks;
        if (v.u64 != total)
            FAIL("the counter is %llu, wanted %llu", (unsigned long long)v.u64,
                 (unsigned long long)total);
        CHECK(amnet_ad_fetch(i32, 0, 8, AMNET_AOP_GET, none, none, &v));
        if (v.i32 != (int32_t)nranks)
            FAIL("the turn word is %d, wanted %u", v.i32, nranks);
        CHECK(amnet_ad_fetch(f64, 0, 16, AMNET_AOP_GET, none, none, &v));
        if (v.f64 != 0.0)
            FAIL("the minimum is %g", v.f64);
        CHECK(amnet_ad_fetch(f64, 0, 24, AMNET_AOP_GET, none, none, &v));
        if (v.f64 != (nranks - 1) * 0.5)
            FAIL("the maximum is %g", v.f64);
    }
    /* Errors. */
    EXPECT(amnet_ad_apply(u64, 0, 0, 13, one, none), AMNET_ERR_BAD_ARG);
    EXPECT(amnet_ad_apply(u64, 0, 4, AMNET_AOP_INC, none, none), AMNET_ERR_USAGE);
    EXPECT(amnet_ad_apply(i32, 0, 8, AMNET_AOP_XOR, one, none), AMNET_ERR_USAGE);
    EXPECT(amnet_ad_apply(i32, nranks, 8, AMNET_AOP_ADD, one, none), AMNET_ERR_BAD_RANK);
    EXPECT(amnet_ad_apply(99, 0, 0, AMNET_AOP_INC, none, none), AMNET_ERR_BAD_HANDLE);
    /* Handles of one kind are refused by the other kind's syncs. */
    amnet_handle_t f, p;
    amnet_atomic_value_t v;
    CHECK(amnet_ad_fetch_nb(u64, nranks - 1, 0, AMNET_AOP_GET, none, none, &f));
    CHECK(amnet_ad_apply_nb(u64, nranks - 1, 0, AMNET_AOP_ADD, none, none, &p));
    EXPECT(amnet_sync(&f), AMNET_ERR_BAD_HANDLE);
    EXPECT(amnet_ad_wait(&p, &v), AMNET_ERR_BAD_HANDLE);
    if (p != AMNET_HANDLE_INVALID && !strstr(amnet_last_error(), "amnet_sync"))
        FAIL("the message does not point at amnet_sync: %s", amnet_last_error());
    CHECK(amnet_ad_wait(&f, &v));
    CHECK(amnet_sync(&p));
    EXPECT(amnet_ad_wait(&f, &v), AMNET_ERR_BAD_HANDLE); /* 0 names no fetching operation */
    amnet_ad_t bad;
    EXPECT(amnet_ad_create(9, AMNET_AOPS_ALL, &bad), AMNET_ERR_BAD_ARG);
    EXPECT(amnet_ad_create(AMNET_TYPE_U32, 1u << 20, &bad), AMNET_ERR_BAD_ARG);
    EXPECT(amnet_ad_create(AMNET_TYPE_F32, AMNET_AOPS_ALL, &bad), AMNET_ERR_USAGE);
    if (nranks > 1)
        EXPECT(amnet_ad_create(me == 0 ? AMNET_TYPE_U32 : AMNET_TYPE_I32, AMNET_AOPS_ALL, &bad),
               AMNET_ERR_MISMATCH);
    CHECK(amnet_barrier());
    printf("atomics: rank %u of %u: ok\n", me, nranks);
    CHECK(amnet_barrier());
    return 0;
}

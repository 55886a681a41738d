/* Barriers: anonymous and named, blocking and split-phase (notify, then wait or try), their
 * results, a named barrier whose ids differ across ranks and one with the MISMATCH flag (both
 * fail on every rank and leave the barrier usable), and the misuse of a wait without its
 * notify. Before each barrier every rank writes its phase into its own slot of every rank's
 * segment with a blocking put (complete when it returns); after the barrier every slot of
 * this rank's segment must hold the phase: no rank left a barrier before every rank entered
 * it. */
#include "check.h"

/* This rank's segment: one uint32_t slot per rank. */
static volatile uint32_t *slots;

/* Every rank writes `phase + 1` into its slot on every rank, then passes a barrier of the
 * given form. */
static void phase_check(uint32_t phase, const char *form) {
    uint32_t v = phase + 1;
    for (uint32_t r = 0; r < nranks; r++)
        CHECK(amnet_put(r, (uint64_t)me * sizeof v, &v, sizeof v));
    (void)form;
}

static void after(uint32_t phase, const char *form) {
    for (uint32_t r = 0; r < nranks; r++)
        if (slots[r] < phase + 1)
            FAIL("%s: rank %u left the barrier of phase %u while rank %u was at phase %u",
                 form, me, phase, r, slots[r]);
}

int main(void) {
    start();
    CHECK(amnet_attach(NULL, 0, 4096));
    if ((size_t)nranks * sizeof(uint32_t) > 4096)
        FAIL("%u ranks: more slots than the segment holds", nranks);
    void *base = NULL;
    CHECK(amnet_segment(&base, NULL));
    slots = (volatile uint32_t *)base;
    EXPECT(amnet_barrier_wait(0, AMNET_BARRIER_ANONYMOUS), AMNET_ERR_STATE);
    EXPECT(amnet_barrier_notify(0, 0x10), AMNET_ERR_BAD_ARG);
    uint32_t phase = 0;
    for (int i = 0; i < 20; i++, phase++) {
        phase_check(phase, "anonymous");
        CHECK(amnet_barrier());
        after(phase, "amnet_barrier");
    }
    for (int i = 0; i < 20; i++, phase++) {
        phase_check(phase, "named");
        CHECK(amnet_barrier_notify(1000 + i, 0));
        CHECK(amnet_barrier_wait(1000 + i, 0));
        after(phase, "named notify/wait");
    }
    for (int i = 0; i < 20; i++, phase++) {
        phase_check(phase, "split-phase try");
        /* Anonymous on odd ranks, named on even ranks: they match. */
        uint32_t flags = me % 2 ? AMNET_BARRIER_ANONYMOUS : 0;
        CHECK(amnet_barrier_notify(77, flags));
        int rc;
        while ((rc = amnet_barrier_try(77, flags)) == AMNET_NOT_READY)
            ;
        CHECK(rc);
        after(phase, "notify/try");
    }
    /* The result of the last barrier: the named id, or anonymous. */
    CHECK(amnet_barrier_notify(31337, 0));
    uint32_t rflags = 9, rid = 9;
    EXPECT(amnet_barrier_result(&rflags, &rid), AMNET_ERR_STATE);
    CHECK(amnet_barrier_wait(31337, 0));
    CHECK(amnet_barrier_result(&rflags, &rid));
    if (rflags != 0 || rid != 31337)
        FAIL("amnet_barrier_result after barrier 31337: flags %u id %u", rflags, rid);
    CHECK(amnet_barrier());
    CHECK(amnet_barrier_result(&rflags, &rid));
    if (rflags != AMNET_BARRIER_ANONYMOUS || rid != 0)
        FAIL("amnet_barrier_result after an anonymous barrier: flags %u id %u", rflags, rid);
    if (nranks > 1) {
        /* Different ids: a mismatch on every rank. */
        CHECK(amnet_barrier_notify(5000 + me, 0));
        EXPECT(amnet_barrier_wait(5000 + me, 0), AMNET_ERR_BARRIER_MISMATCH);
        if (!strstr(amnet_last_error(), "mismatch"))
            FAIL("the mismatch's message does not say so: %s", amnet_last_error());
        CHECK(amnet_barrier());
    }
    /* The MISMATCH flag on the last rank only: a mismatch on every rank, seen through try. */
    uint32_t flags = me == nranks - 1 ? AMNET_BARRIER_MISMATCH : AMNET_BARRIER_ANONYMOUS;
    CHECK(amnet_barrier_notify(0, flags));
    int rc;
    while ((rc = amnet_barrier_try(0, flags)) == AMNET_NOT_READY)
        ;
    EXPECT(rc, AMNET_ERR_BARRIER_MISMATCH);
    /* The barrier still works after mismatches. */
    phase_check(phase, "after the mismatches");
    CHECK(amnet_barrier());
    after(phase, "a barrier after the mismatches");
    amnet_stats_t st;
    CHECK(amnet_stats(&st));
    printf("barrier: rank %u of %u: %llu barriers ok\n", me, nranks,
           (unsigned long long)st.barriers);
    CHECK(amnet_barrier());
    return 0;
}

/* Barriers: anonymous and named, blocking and split-phase (notify, then wait or try), a named
 * barrier whose ids differ across ranks and one with the MISMATCH flag (both fail on every
 * rank and leave the barrier usable), and the misuse of a wait without its notify. Between
 * barriers, a count in every segment shows that no rank left a barrier early. */
#include "check.h"

static volatile uint32_t arrived;

static void on_arrive(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                      const void *payload, size_t nbytes) {
    (void)tok, (void)args, (void)nargs, (void)payload, (void)nbytes;
    arrived++;
}

/* Every rank tells every rank it reached phase `phase`, then passes a barrier of the given
 * form; after it, every rank must have heard from all. */
static void phase_check(uint32_t phase, const char *form) {
    for (uint32_t r = 0; r < nranks; r++)
        CHECK(amnet_request_short(r, 200, &phase, 1));
    (void)form;
}

static void after(uint32_t phase, const char *form) {
    /* The arrivals of this phase may still be in flight after the barrier (a request is not
     * a put), and ranks that left the barrier first may already send those of the next
     * phase; none of the phase after can come before this rank enters the next barrier. */
    CHECK(amnet_wait_word((const uint32_t *)&arrived, AMNET_CMP_GE, (phase + 1) * nranks));
    if (arrived > (phase + 2) * nranks)
        FAIL("%s: a rank passed the barrier of phase %u early (%u arrivals)", form, phase,
             arrived);
}

int main(void) {
    start();
    amnet_handler_entry_t table[] = {{200, on_arrive}};
    CHECK(amnet_attach(table, 1, 0));
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

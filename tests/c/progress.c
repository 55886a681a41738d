/* The progress thread answers for a rank that computes: the last rank starts it and spins on
 * a flag in its segment without any amnet call, while rank 0 makes an active-message round
 * trip, a get and an atomic to it and then sets the flag with a put. Without the thread, rank
 * 0's first round trip would wait for the last rank's polls, which never come. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "check.h"

static uint32_t replies;

static void on_req(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                   size_t n) {
    (void)p, (void)n;
    CHECK(amnet_reply_short(tok, 201, args, nargs));
}

static void on_rep(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                   size_t n) {
    (void)tok, (void)args, (void)nargs, (void)p, (void)n;
    __atomic_fetch_add(&replies, 1, __ATOMIC_RELEASE);
}

int main(void) {
    start();
    amnet_handler_entry_t table[] = {{200, on_req}, {201, on_rep}};
    CHECK(amnet_attach(table, 2, 4096));
    amnet_ad_t ad;
    CHECK(amnet_ad_create(AMNET_TYPE_U64, AMNET_AOPS_ALL, &ad));
    uint32_t last = nranks - 1;
    int running = -1;
    CHECK(amnet_progress_thread_running(&running));
    if (running)
        FAIL("a progress thread runs before it was started");
    if (me == last)
        CHECK(amnet_progress_thread_start());
    CHECK(amnet_barrier());
    if (me == last && last != 0) {
        volatile uint32_t *flag;
        CHECK(amnet_segment((void **)&flag, NULL));
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (!*flag) { /* computing: no amnet call */
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec > 20)
                FAIL("rank 0 did not set the flag in 20 s: the progress thread did not answer");
        }
    } else if (me == 0 && last != 0) {
        uint32_t arg = 5;
        CHECK(amnet_request_short(last, 200, &arg, 1));
        CHECK(amnet_wait_word(&replies, AMNET_CMP_EQ, 1));
        uint64_t v = 0;
        CHECK(amnet_get(&v, last, 8, sizeof v));
        amnet_atomic_value_t one = {.u64 = 1}, none = {.u64 = 0}, old;
        CHECK(amnet_ad_fetch(ad, last, 16, AMNET_AOP_ADD, one, none, &old));
        uint32_t set = 1;
        CHECK(amnet_put(last, 0, &set, sizeof set));
    }
    CHECK(amnet_barrier());
    if (me == last) {
        CHECK(amnet_progress_thread_running(&running));
        if (!running)
            FAIL("the progress thread stopped early");
        CHECK(amnet_progress_thread_stop());
        CHECK(amnet_progress_thread_running(&running));
        if (running)
            FAIL("the progress thread runs after it was stopped");
    }
    CHECK(amnet_barrier());
    printf("progress: rank %u of %u: ok\n", me, nranks);
    CHECK(amnet_barrier());
    return 0;
}

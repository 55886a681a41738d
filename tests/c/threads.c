/* Several threads of each rank use amnet at once: each sends requests whose replies it waits
 * for, moves its own slice of the segment with implicit-handle puts synced by its own
 * amnet_sync_nbi, and sees only its own last error message. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "check.h"

enum { THREADS = 4, ROUNDS = 200, SLICE = 4096, H_REQ = 200, H_REP = 201 };

static uint32_t replies[THREADS];

static void on_req(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                   size_t n) {
    (void)p, (void)n;
    CHECK(amnet_reply_short(tok, H_REP, args, nargs));
}

static void on_rep(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                   size_t n) {
    (void)tok, (void)p, (void)n;
    if (nargs != 1 || args[0] >= THREADS)
        FAIL("a reply with %zu arguments, the first %u", nargs, nargs ? args[0] : 0);
    __atomic_fetch_add(&replies[args[0]], 1, __ATOMIC_RELEASE);
}

static void *work(void *arg) {
    uint32_t t = (uint32_t)(uintptr_t)arg, next = (me + 1) % nranks;
    unsigned char src[SLICE], back[SLICE];
    for (uint32_t i = 0; i < ROUNDS; i++) {
        CHECK(amnet_request_short(next, H_REQ, &t, 1));
        CHECK(amnet_wait_word(&replies[t], AMNET_CMP_GE, i + 1));
        memset(src, (int)(t * 31 + i), SLICE);
        CHECK(amnet_put_nbi(next, (uint64_t)t * SLICE, src, SLICE));
        CHECK(amnet_sync_nbi());
        CHECK(amnet_get(back, next, (uint64_t)t * SLICE, SLICE));
        if (memcmp(src, back, SLICE))
            FAIL("thread %u round %u: the slice read back differs", t, i);
    }
    /* This thread's failure is its own message. */
    char want[64];
    snprintf(want, sizeof want, "rank %u does not exist", nranks + t);
    EXPECT(amnet_put(nranks + t, 0, src, 1), AMNET_ERR_BAD_RANK);
    if (!strstr(amnet_last_error(), want))
        FAIL("thread %u sees the message \"%s\"", t, amnet_last_error());
    return NULL;
}

int main(void) {
    start();
    amnet_handler_entry_t table[] = {{H_REQ, on_req}, {H_REP, on_rep}};
    CHECK(amnet_attach(table, 2, THREADS * SLICE));
    pthread_t th[THREADS];
    for (uintptr_t t = 0; t < THREADS; t++)
        if (pthread_create(&th[t], NULL, work, (void *)t))
            FAIL("pthread_create failed");
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    CHECK(amnet_barrier());
    printf("threads: rank %u of %u: %d threads ok\n", me, nranks, THREADS);
    CHECK(amnet_barrier());
    return 0;
}

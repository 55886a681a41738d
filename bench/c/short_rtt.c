/* Short round trip through the C ABI: rank 0 sends a Short request with one argument to rank
 * 1, whose handler replies with a Short; rank 0 waits for the reply with amnet_wait_word.
 * The same loop as src/capi_rtt.rs (the Rust API), which bench/capi.sh runs in the same
 * invocation. Prints, on rank 0, one line: "c short_rtt_ns MEDIAN min MIN" over BATCHES
 * batches of ITERS round trips (arguments: ITERS BATCHES, default 20000 15). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "amnet.h"

enum { H_REQ = 200, H_REP = 201, H_DONE = 202 };

static uint32_t replies, done;

static void on_req(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                   size_t n) {
    (void)p, (void)n;
    if (amnet_reply_short(tok, H_REP, args, nargs) != AMNET_OK) {
        fprintf(stderr, "short_rtt: reply failed: %s\n", amnet_last_error());
        amnet_exit(3);
    }
}

static void on_rep(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                   size_t n) {
    (void)tok, (void)args, (void)nargs, (void)p, (void)n;
    __atomic_store_n(&replies, replies + 1, __ATOMIC_RELEASE);
}

static void on_done(amnet_token_t *tok, const uint32_t *args, size_t nargs, const void *p,
                    size_t n) {
    (void)tok, (void)args, (void)nargs, (void)p, (void)n;
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define CHECK(call)                                                                    \
    do {                                                                               \
        if ((call) != AMNET_OK) {                                                      \
            fprintf(stderr, "short_rtt: %s failed: %s\n", #call, amnet_last_error());  \
            amnet_exit(2);                                                             \
        }                                                                              \
    } while (0)

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000, batches = argc > 2 ? atol(argv[2]) : 15;
    if (iters < 1 || batches < 1 || batches > 1000) {
        fprintf(stderr, "usage: short_rtt [ITERS [BATCHES]] (both at least 1)\n");
        return 2;
    }
    uint32_t me, n;
    CHECK(amnet_init());
    amnet_handler_entry_t table[] = {{H_REQ, on_req}, {H_REP, on_rep}, {H_DONE, on_done}};
    CHECK(amnet_attach(table, 3, 0));
    CHECK(amnet_rank(&me));
    CHECK(amnet_size(&n));
    if (n < 2) {
        fprintf(stderr, "short_rtt: needs 2 ranks (amrun -n 2)\n");
        return 2;
    }
    CHECK(amnet_barrier());
    if (me == 0) {
        double t[1000];
        uint32_t arg = 7, sent = 0;
        for (long b = -1; b < batches; b++) { /* batch -1 warms up */
            double t0 = now_ns();
            for (long i = 0; i < iters; i++) {
                CHECK(amnet_request_short(1, H_REQ, &arg, 1));
                CHECK(amnet_wait_word(&replies, AMNET_CMP_EQ, ++sent));
            }
            if (b >= 0)
                t[b] = (now_ns() - t0) / iters;
        }
        qsort(t, batches, sizeof t[0], cmp);
        printf("c short_rtt_ns %.1f min %.1f\n", t[batches / 2], t[0]);
        fflush(stdout);
        CHECK(amnet_request_short(1, H_DONE, NULL, 0));
    } else if (me == 1) {
        CHECK(amnet_wait_word(&done, AMNET_CMP_EQ, 1));
    }
    CHECK(amnet_barrier());
    return 0;
}

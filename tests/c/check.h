/* Helpers shared by the C tests: every failure prints where, the rank, the status code's name
 * and amnet's message, then ends the whole job with exit code 1. */
#ifndef AMNET_TEST_CHECK_H
#define AMNET_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amnet.h"

static uint32_t me, nranks;

#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "%s:%d: rank %u: ", __FILE__, __LINE__, (unsigned)me); \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        fflush(stderr);                                                        \
        amnet_exit(1);                                                         \
    } while (0)

/* The call must return `want`. */
#define EXPECT(call, want)                                                     \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != (want))                                                     \
            FAIL("%s returned %s (%d), wanted %s: %s", #call,                  \
                 amnet_error_name(rc_), rc_, amnet_error_name(want),           \
                 amnet_last_error());                                          \
    } while (0)

#define CHECK(call) EXPECT(call, AMNET_OK)

/* amnet_init, then rank and size into `me` and `nranks`. */
static void start(void) {
    CHECK(amnet_init());
    CHECK(amnet_rank(&me));
    CHECK(amnet_size(&nranks));
}

#endif

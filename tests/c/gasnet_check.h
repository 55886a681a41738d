/* Helpers shared by the GASNet-1 client tests (gasnet_coll.c, gasnet_tools.c, gasnet_vis.c),
 * written against GASNet's headers only: a failure prints the file, the node and the message,
 * then ends the job with exit code 1. */
#ifndef AMNET_TEST_GASNET_CHECK_H
#define AMNET_TEST_GASNET_CHECK_H

#include <gasnet.h>

static gasnet_node_t me, nodes;

#define FAILED(...)                                                                          \
    do {                                                                                     \
        fprintf(stderr, "%s: node %u: ", __FILE__, (unsigned)me);                           \
        fprintf(stderr, __VA_ARGS__);                                                        \
        fprintf(stderr, "\n");                                                               \
        gasnet_exit(1);                                                                      \
    } while (0)

/* An anonymous GASNet barrier. */
static inline void barrier(void) {
    gasnet_barrier_notify(0, GASNET_BARRIERFLAG_ANONYMOUS);
    if (gasnet_barrier_wait(0, GASNET_BARRIERFLAG_ANONYMOUS) != GASNET_OK)
        FAILED("barrier");
}

#endif

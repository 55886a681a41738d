/* GASNet-1's handler helper header (gasnet_handler.h), written only against GASNet's headers:
 * a Short request carries a pointer to the sender's flag (PACK: two arguments on a 64-bit
 * platform) to the next node, whose handler replies with it; the reply handler sets the flag
 * through the unpacked pointer. A Medium request carries a pointer and a payload the same way.
 * The handlers are defined with SHORT_HANDLER / MEDIUM_HANDLER and registered with
 * gasneti_handler_tableentry_with_bits. */
#include "gasnet_check.h"
#include <gasnet_handler.h>

#define _hidx_ping_handler 201
#define _hidx_pong_handler 202
#define _hidx_data_handler 203

static volatile int flag, got_bytes;

static void ping_handler_inner(gasnet_token_t token, void *reply_to) {
    if (SHORT_REP(1, 2, (token, gasneti_handleridx(pong_handler), PACK(reply_to))) != GASNET_OK)
        FAILED("the reply failed");
}
SHORT_HANDLER(ping_handler, 1, 2, (token, UNPACK(a0)), (token, UNPACK2(a0, a1)));

static void pong_handler_inner(gasnet_token_t token, void *flagp) {
    (void)token;
    *(volatile int *)flagp = 1;
}
SHORT_HANDLER(pong_handler, 1, 2, (token, UNPACK(a0)), (token, UNPACK2(a0, a1)));

static void data_handler_inner(gasnet_token_t token, void *addr, size_t nbytes, int tag,
                               void *where) {
    (void)token, (void)where;
    const unsigned char *b = (const unsigned char *)addr;
    int ok = tag == 77;
    for (size_t i = 0; i < nbytes; i++)
        ok = ok && b[i] == (unsigned char)i;
    got_bytes = ok ? (int)nbytes : -1;
}
MEDIUM_HANDLER(data_handler, 2, 3, (token, addr, nbytes, a0, UNPACK(a1)),
               (token, addr, nbytes, a0, UNPACK2(a1, a2)));

int main(int argc, char **argv) {
    if (gasnet_init(&argc, &argv) != GASNET_OK)
        return 1;
    me = gasnet_mynode();
    nodes = gasnet_nodes();
    gasnet_handlerentry_t table[] = {
        gasneti_handler_tableentry_with_bits(ping_handler),
        gasneti_handler_tableentry_with_bits(pong_handler),
        gasneti_handler_tableentry_with_bits(data_handler),
    };
    if (gasnet_attach(table, 3, 16 * GASNET_PAGESIZE, 0) != GASNET_OK)
        FAILED("gasnet_attach");
    gasnet_node_t peer = (me + 1) % nodes;
    for (int i = 0; i < 100; i++) {
        flag = 0;
        if (SHORT_REQ(1, 2, (peer, gasneti_handleridx(ping_handler), PACK(&flag))) != GASNET_OK)
            FAILED("the request failed");
        GASNET_BLOCKUNTIL(flag == 1);
    }
    unsigned char payload[200];
    for (int i = 0; i < 200; i++)
        payload[i] = (unsigned char)i;
    if (MEDIUM_REQ(2, 3, (me, gasneti_handleridx(data_handler), payload, sizeof payload, 77,
                          PACK(payload))) != GASNET_OK)
        FAILED("the Medium request failed");
    GASNET_BLOCKUNTIL(got_bytes != 0);
    if (got_bytes != 200)
        FAILED("the Medium handler saw %d bytes", got_bytes);
    barrier();
    gasnet_exit(0);
    return 0;
}

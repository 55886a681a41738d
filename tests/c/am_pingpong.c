/* Active-message ping-pong: every rank sends to the next rank a Short, a Medium and a Long
 * request with each argument count 0..16; the request handler checks the arguments, the
 * source and the payload, checks that it may not send a request, and replies with the same
 * arguments and payload; the reply handler checks them again and checks that it may not
 * reply. Medium payloads go up to amnet_max_medium, Long payloads into both segments. */
#include "check.h"

enum { H_REQ = 200, H_REP = 201, SEG = 1 << 20, REPLY_AT = SEG / 2 };
enum { SHORT, MEDIUM, LONG };

static volatile uint32_t replies;
static size_t max_medium;
static char *seg;

static uint32_t arg_of(uint32_t src, size_t nargs, size_t i, uint32_t kind) {
    return (src << 24) | (kind << 20) | ((uint32_t)nargs << 8) | (uint32_t)i;
}

static unsigned char byte_of(uint32_t src, size_t nargs, size_t j) {
    return (unsigned char)(j * 7 + nargs * 13 + src);
}

static size_t len_of(uint32_t kind, size_t nargs) {
    if (kind == MEDIUM)
        return nargs == 16 ? max_medium : (nargs * 997) % max_medium + 1;
    if (kind == LONG)
        return nargs == 16 ? REPLY_AT : nargs * 4099 + 3;
    return 0;
}

/* The kind travels in the arguments; with 0 arguments the payload length tells it. */
static uint32_t kind_of(const uint32_t *args, size_t nargs, size_t nbytes) {
    if (nargs > 0)
        return (args[0] >> 20) & 0xf;
    return nbytes == 0 ? SHORT : nbytes == len_of(MEDIUM, 0) ? MEDIUM : LONG;
}

/* Check a message: arguments from `origin`, payload from `origin`. */
static uint32_t check_msg(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                          const void *payload, size_t nbytes, uint32_t origin) {
    uint32_t kind = kind_of(args, nargs, nbytes);
    for (size_t i = 0; i < nargs; i++)
        if (args[i] != arg_of(origin, nargs, i, kind))
            FAIL("kind %u nargs %zu: args[%zu] = %#x, wanted %#x", kind, nargs, i, args[i],
                 arg_of(origin, nargs, i, kind));
    if (nbytes != len_of(kind, nargs))
        FAIL("kind %u nargs %zu: payload of %zu bytes, wanted %zu", kind, nargs, nbytes,
             len_of(kind, nargs));
    const unsigned char *p = payload;
    for (size_t j = 0; j < nbytes; j++)
        if (p[j] != byte_of(origin, nargs, j))
            FAIL("kind %u nargs %zu: payload byte %zu is %u, wanted %u", kind, nargs, j, p[j],
                 byte_of(origin, nargs, j));
    amnet_token_info_t info;
    CHECK(amnet_token_info(tok, &info));
    if (info.category != (int)kind || info.source != (origin == me ? (me + 1) % nranks : origin))
        FAIL("token info: category %d source %u, wanted %u and the sender", info.category,
             info.source, kind);
    if (info.is_request != (origin != me) || info.handler != (origin != me ? H_REQ : H_REP))
        FAIL("token info: is_request %d handler %u", info.is_request, info.handler);
    return kind;
}

static void on_request(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                       const void *payload, size_t nbytes) {
    uint32_t src;
    CHECK(amnet_token_source(tok, &src));
    if (src != (me + nranks - 1) % nranks)
        FAIL("request from rank %u, wanted the previous rank", src);
    uint32_t kind = check_msg(tok, args, nargs, payload, nbytes, src);
    if (kind == LONG && (const char *)payload != seg)
        FAIL("Long payload at %p, wanted the segment's start %p", payload, (void *)seg);
    /* No request from a handler. */
    EXPECT(amnet_request_short(src, H_REQ, NULL, 0), AMNET_ERR_IN_HANDLER);
    if (kind == SHORT)
        CHECK(amnet_reply_short(tok, H_REP, args, nargs));
    else if (kind == MEDIUM)
        CHECK(amnet_reply_medium(tok, H_REP, args, nargs, payload, nbytes));
    else
        CHECK(amnet_reply_long(tok, H_REP, args, nargs, payload, nbytes, REPLY_AT));
    /* One reply at most. */
    EXPECT(amnet_reply_short(tok, H_REP, NULL, 0), AMNET_ERR_REPLY);
}

static void on_reply(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                     const void *payload, size_t nbytes) {
    uint32_t src;
    CHECK(amnet_token_source(tok, &src));
    if (src != (me + 1) % nranks)
        FAIL("reply from rank %u, wanted the next rank", src);
    uint32_t kind = check_msg(tok, args, nargs, payload, nbytes, me);
    if (kind == LONG && (const char *)payload != seg + REPLY_AT)
        FAIL("Long reply payload at %p, wanted %p", payload, (void *)(seg + REPLY_AT));
    EXPECT(amnet_reply_short(tok, H_REP, NULL, 0), AMNET_ERR_REPLY);
    replies++;
}

int main(void) {
    start();
    amnet_handler_entry_t table[] = {{H_REQ, on_request}, {H_REP, on_reply}};
    CHECK(amnet_attach(table, 2, SEG));
    CHECK(amnet_segment((void **)&seg, NULL));
    CHECK(amnet_max_medium(&max_medium));
    uint32_t next = (me + 1) % nranks;
    size_t max_long;
    CHECK(amnet_max_long(next, &max_long));
    if (max_long != SEG)
        FAIL("max_long %zu, wanted %d", max_long, SEG);

    unsigned char *buf = malloc(max_medium > REPLY_AT ? max_medium : REPLY_AT);
    uint32_t args[AMNET_MAX_ARGS];
    uint32_t sent = 0;
    for (uint32_t kind = SHORT; kind <= LONG; kind++) {
        for (size_t nargs = 0; nargs <= AMNET_MAX_ARGS; nargs++) {
            for (size_t i = 0; i < nargs; i++)
                args[i] = arg_of(me, nargs, i, kind);
            size_t len = len_of(kind, nargs);
            for (size_t j = 0; j < len; j++)
                buf[j] = byte_of(me, nargs, j);
            if (kind == SHORT)
                CHECK(amnet_request_short(next, H_REQ, args, nargs));
            else if (kind == MEDIUM)
                CHECK(amnet_request_medium(next, H_REQ, args, nargs, buf, len));
            else
                CHECK(amnet_request_long(next, H_REQ, args, nargs, buf, len, 0));
            sent++;
            /* Wait for this reply before the next request: the Long payloads reuse the
             * same bytes of the segments. */
            CHECK(amnet_wait_word((const uint32_t *)&replies, AMNET_CMP_EQ, sent));
        }
    }
    /* Too many arguments and payloads too large are refused before anything is sent. */
    EXPECT(amnet_request_short(next, H_REQ, args, AMNET_MAX_ARGS + 1), AMNET_ERR_TOO_MANY_ARGS);
    EXPECT(amnet_request_medium(next, H_REQ, NULL, 0, buf, max_medium + 1), AMNET_ERR_TOO_LARGE);
    EXPECT(amnet_request_long(next, H_REQ, NULL, 0, buf, 16, SEG - 8), AMNET_ERR_OUT_OF_SEGMENT);
    CHECK(amnet_barrier());
    amnet_stats_t st;
    CHECK(amnet_stats(&st));
    if (st.replies_received.short_msgs < AMNET_MAX_ARGS + 1 ||
        st.replies_received.medium_msgs < AMNET_MAX_ARGS + 1 ||
        st.replies_received.long_msgs < AMNET_MAX_ARGS + 1)
        FAIL("the statistics miss replies");
    printf("am_pingpong: rank %u of %u: %u round trips ok\n", me, nranks, sent);
    free(buf);
    CHECK(amnet_barrier());
    return 0;
}

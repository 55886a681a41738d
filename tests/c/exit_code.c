/* The job's exit code: `exit_code main` has the last rank call amnet_exit(42) while the
 * others wait for a flag no one sets; `exit_code handler` has rank 0 send a request whose
 * handler, on the last rank, calls amnet_exit(43). amrun must exit with that code (the
 * script checks it). `exit_code return` returns 7 from main on the last rank;
 * `exit_code prepared` has the last rank call amnet_exit(44) while it holds a prepared
 * request. */
#include "check.h"

static volatile uint32_t never;

static void on_exit_request(amnet_token_t *tok, const uint32_t *args, size_t nargs,
                            const void *payload, size_t nbytes) {
    (void)tok, (void)nargs, (void)payload, (void)nbytes;
    amnet_exit((int)args[0]);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "main";
    start();
    amnet_handler_entry_t table[] = {{130, on_exit_request}};
    CHECK(amnet_attach(table, 1, 64));
    CHECK(amnet_barrier());
    uint32_t last = nranks - 1;
    if (!strcmp(mode, "main")) {
        if (me == last)
            amnet_exit(42);
    } else if (!strcmp(mode, "handler")) {
        uint32_t code = 43;
        if (me == 0)
            CHECK(amnet_request_short(last, 130, &code, 1));
    } else if (!strcmp(mode, "prepared")) {
        if (me == last) {
            void *buf;
            CHECK(amnet_prepare_request_medium(0, 130, 8, &buf));
            amnet_exit(44);
        }
    } else if (!strcmp(mode, "return")) {
        if (me == last)
            return 7;
    } else {
        FAIL("unknown mode %s (main, handler, prepared or return)", mode);
    }
    /* The other ranks leave from inside this wait, with the job's code. */
    CHECK(amnet_wait_word((const uint32_t *)&never, AMNET_CMP_NE, 0));
    FAIL("the wait returned");
}

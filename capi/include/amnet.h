/* amnet: the C ABI of an active-message communication library.
 *
 * Generated from the Rust crate amnet-capi by cbindgen: do not edit. Regenerate with
 *   UPDATE_HEADER=1 cargo test -p amnet-capi --test header
 * The contract (status codes, threads, handlers, lifetimes) is spec/capi.md.
 *
 * Every function but amnet_exit, amnet_last_error and amnet_error_name returns a status:
 * AMNET_OK (0), AMNET_NOT_READY (1) from the try functions, or a negative AMNET_ERR_* code,
 * with the message in amnet_last_error(). */

#ifndef AMNET_H
#define AMNET_H

#include <stddef.h>
#include <stdint.h>
/* The source address of the in-place forms of the collectives: the participant's own
 * destination is its source. */
#define AMNET_COLL_IN_PLACE ((void *)1)

// The most arguments an active message carries.
#define AMNET_MAX_ARGS 16

// The first handler index a client may register; indices 1..=127 belong to amnet.
#define AMNET_FIRST_CLIENT_HANDLER 128

// The last handler index a client may register (255).
#define AMNET_LAST_CLIENT_HANDLER 255

// `*word == value` (for `amnet_wait_word`).
#define AMNET_CMP_EQ 0

// `*word != value`.
#define AMNET_CMP_NE 1

// `*word >= value` (unsigned).
#define AMNET_CMP_GE 2

// `*word > value` (unsigned).
#define AMNET_CMP_GT 3

// `*word <= value` (unsigned).
#define AMNET_CMP_LE 4

// `*word < value` (unsigned).
#define AMNET_CMP_LT 5

// A Short message (arguments only).
#define AMNET_CATEGORY_SHORT 0

// A Medium message (arguments and a payload in a library buffer).
#define AMNET_CATEGORY_MEDIUM 1

// A Long message (arguments and a payload written into the segment).
#define AMNET_CATEGORY_LONG 2

// Element type `int32_t`.
#define AMNET_TYPE_I32 0

// Element type `uint32_t`.
#define AMNET_TYPE_U32 1

// Element type `int64_t`.
#define AMNET_TYPE_I64 2

// Element type `uint64_t`.
#define AMNET_TYPE_U64 3

// Element type `float`.
#define AMNET_TYPE_F32 4

// Element type `double`.
#define AMNET_TYPE_F64 5

// Read the element (fetching only).
#define AMNET_AOP_GET 0

// Write `a`.
#define AMNET_AOP_SET 1

// Write `a` (fetching: the value it replaced).
#define AMNET_AOP_SWAP 2

// Write `b` if the element equals `a` (bit patterns compared, floats too).
#define AMNET_AOP_COMPARE_SWAP 3

// Add `a` (integers wrap around).
#define AMNET_AOP_ADD 4

// Subtract `a` (integers wrap around).
#define AMNET_AOP_SUB 5

// Add one.
#define AMNET_AOP_INC 6

// Subtract one.
#define AMNET_AOP_DEC 7

// Bitwise and with `a` (integer types).
#define AMNET_AOP_AND 8

// Bitwise or with `a` (integer types).
#define AMNET_AOP_OR 9

// Bitwise exclusive or with `a` (integer types).
#define AMNET_AOP_XOR 10

// Keep the smaller of the element and `a` (floats: a NaN operand loses).
#define AMNET_AOP_MIN 11

// Keep the larger of the element and `a` (floats: a NaN operand loses).
#define AMNET_AOP_MAX 12

// Every operation, as a set for `amnet_ad_create` (bit `1 << op` per operation).
#define AMNET_AOPS_ALL ((1 << 13) - 1)

// Every operation but the bitwise ones: what a floating-point domain may have.
#define AMNET_AOPS_ARITHMETIC (AMNET_AOPS_ALL & ~(((1 << AMNET_AOP_AND) | (1 << AMNET_AOP_OR)) | (1 << AMNET_AOP_XOR)))

// Barrier flag: the barrier matches any id (the id argument is ignored).
#define AMNET_BARRIER_ANONYMOUS 1

// Barrier flag: force a mismatch on every rank (this rank found an inconsistency).
#define AMNET_BARRIER_MISMATCH 2

// The color of a rank that joins no team in `amnet_team_split`.
#define AMNET_TEAM_NO_COLOR UINT32_MAX

// Sync flag: data movement may start before other participants enter.
#define AMNET_COLL_IN_NOSYNC (1 << 0)

// Sync flag: data moves in or out of a participant's memory once it entered.
#define AMNET_COLL_IN_MYSYNC (1 << 1)

// Sync flag: data moves once every participant entered.
#define AMNET_COLL_IN_ALLSYNC (1 << 2)

// Sync flag: a sync may succeed before the data is in place anywhere.
#define AMNET_COLL_OUT_NOSYNC (1 << 3)

// Sync flag: a sync succeeds once this participant's part is done.
#define AMNET_COLL_OUT_MYSYNC (1 << 4)

// Sync flag: a sync succeeds once every participant's part is done.
#define AMNET_COLL_OUT_ALLSYNC (1 << 5)

// Addressing: the same arguments on every participant (UPC single-valued).
#define AMNET_COLL_SINGLE (1 << 6)

// Addressing: each participant passes its own addresses.
#define AMNET_COLL_LOCAL (1 << 7)

// Aggregate with the following collective on the team (non-blocking calls only).
#define AMNET_COLL_AGGREGATE (1 << 8)

// Every image thread calls (images in the participant space).
#define AMNET_COLL_ALL_THREADS (1 << 9)

// Asserts that every source lies in the segment.
#define AMNET_COLL_SRC_IN_SEGMENT (1 << 10)

// Asserts that every destination lies in the segment.
#define AMNET_COLL_DST_IN_SEGMENT (1 << 11)

// Function-table flag: the function may run from any amnet call that polls.
#define AMNET_COLL_AMSAFE 1

// Function-table flag: the function is not commutative (operands combine in order).
#define AMNET_COLL_NONCOMM 2

// The number of built-in reduction functions, which come first in every function table:
// entry `i` of the table given to `amnet_coll_init` has index `AMNET_COLL_N_BUILTIN + i`.
#define AMNET_COLL_N_BUILTIN 48

// Built-in operator: sum (wrapping for integers).
#define AMNET_RED_SUM 0

// Built-in operator: product (wrapping for integers).
#define AMNET_RED_PROD 1

// Built-in operator: minimum.
#define AMNET_RED_MIN 2

// Built-in operator: maximum.
#define AMNET_RED_MAX 3

// Built-in operator: bitwise and (integers).
#define AMNET_RED_AND 4

// Built-in operator: bitwise or (integers).
#define AMNET_RED_OR 5

// Built-in operator: bitwise exclusive or (integers).
#define AMNET_RED_XOR 6

// Built-in operator: minimum of (value, location) pairs, 16 bytes each (value at byte 0,
// a `uint64_t` location at byte 8); the smaller location wins between equal values.
#define AMNET_RED_MINLOC 7

// Built-in operator: maximum of (value, location) pairs, laid out as for `RED_MINLOC`.
#define AMNET_RED_MAXLOC 8

// Success.
#define AMNET_OK 0

// Not an error: a `try` call found the operation, the barrier or the handles not complete
// yet. Poll and try again.
#define AMNET_NOT_READY 1

// `amnet_init` has not been called (or failed) in this process.
#define AMNET_ERR_NOT_INIT -1

// The call needs an attached endpoint: call `amnet_attach` first.
#define AMNET_ERR_NOT_ATTACHED -2

// A call at the wrong time: `amnet_init` or `amnet_attach` a second time, a barrier wait
// without its notify or a second notify, an access region begun twice or ended without one.
#define AMNET_ERR_STATE -3

// An invalid argument: a null pointer where one is required, unknown flags, an unknown
// comparison, a misaligned word.
#define AMNET_ERR_BAD_ARG -4

// A rank outside `0..size`.
#define AMNET_ERR_BAD_RANK -5

// A handler index that is 0, reserved for the library (1..=127), above 255, registered twice
// in the table, or not registered.
#define AMNET_ERR_BAD_HANDLER -6

// More than 16 arguments.
#define AMNET_ERR_TOO_MANY_ARGS -7

// A Medium payload above `amnet_max_medium`, or a Long payload above the target's segment.
#define AMNET_ERR_TOO_LARGE -8

// A range outside the segment of the rank it addresses.
#define AMNET_ERR_OUT_OF_SEGMENT -9

// A reply from a reply handler, or a second reply from a request handler.
#define AMNET_ERR_REPLY -10

// A request, poll, wait, put/get, sync, barrier or attach called from a handler.
#define AMNET_ERR_IN_HANDLER -11

// Ranks registered different handler indices at attach (returned on every rank).
#define AMNET_ERR_MISMATCH -12

// A named barrier whose ids differ across ranks, or a rank passed the mismatch flag
// (returned on every rank); also a wait whose id or flags differ from its notify's.
#define AMNET_ERR_BARRIER_MISMATCH -13

// A handle that names no operation outstanding (already synced, never made, or being
// synced by another thread at the same moment).
#define AMNET_ERR_BAD_HANDLE -14

// A token used outside the handler it was given to, on another thread, or null.
#define AMNET_ERR_BAD_TOKEN -15

// A configuration variable or start-up setting is wrong (the message names it).
#define AMNET_ERR_CONFIG -16

// A peer rank failed: it died, went silent, or left without ending the job.
#define AMNET_ERR_PEER_FAILED -17

// An operating-system call failed (shared memory, sockets, memory maps, threads).
#define AMNET_ERR_OS -18

// The transport failed in a way no other code describes.
#define AMNET_ERR_CONDUIT -19

// A call used in a way its rules forbid; the message says which argument and why.
#define AMNET_ERR_USAGE -20

// An immediate send found no room; nothing was sent.
#define AMNET_ERR_WOULD_BLOCK -21

// A watchdog found a wait that made no progress for too long.
#define AMNET_ERR_HANG -22

// A wait (start-up, attach) exceeded its time limit.
#define AMNET_ERR_TIMEOUT -23

// amnet failed internally (a bug); the message says where.
#define AMNET_ERR_INTERNAL -24

// What a handler receives to identify its message: pass it to `amnet_reply_*` and
// `amnet_token_source`. Valid only inside the handler it was given to, on that thread.
typedef struct amnet_token_t amnet_token_t;

// One setting for `amnet_init_with`: an environment variable's name and the value to use
// instead of the environment's.
typedef struct {
  // The variable's name (one of those the README lists), NUL-terminated.
  const char *name;
  // Its value, NUL-terminated; an empty value means the default whatever the environment
  // says.
  const char *value;
} amnet_setting_t;

// A condition for `amnet_wait_until`: non-zero when the wait is over.
typedef int (*amnet_wait_cond_fn)(void *arg);

// Message and byte counts for one direction and kind of active message.
typedef struct {
  // Short messages.
  uint64_t short_msgs;
  // Medium messages.
  uint64_t medium_msgs;
  // Long messages.
  uint64_t long_msgs;
  // Payload bytes carried by Medium messages.
  uint64_t medium_bytes;
  // Payload bytes carried by Long messages.
  uint64_t long_bytes;
} amnet_am_counts_t;

// A snapshot of this rank's counters, summed over every thread that used it (as printed at
// exit with `AMNET_STATS=1`).
typedef struct {
  // Requests this rank sent (amnet's own traffic for put/get and barriers included).
  amnet_am_counts_t requests_sent;
  // Replies this rank sent.
  amnet_am_counts_t replies_sent;
  // Requests whose handlers ran on this rank.
  amnet_am_counts_t requests_received;
  // Replies whose handlers ran on this rank.
  amnet_am_counts_t replies_received;
  // Put operations started (any form).
  uint64_t puts;
  // Bytes written by put.
  uint64_t put_bytes;
  // Get operations started (any form).
  uint64_t gets;
  // Bytes read by get.
  uint64_t get_bytes;
  // Barriers completed.
  uint64_t barriers;
  // Calls into the conduit's poll.
  uint64_t polls;
  // Handlers run.
  uint64_t handler_calls;
  // Times a send found no room and polled before retrying.
  uint64_t send_stalls;
  // Put acknowledgements and get replies that named no operation waiting for them,
  // dropped.
  uint64_t stray_rma_replies;
} amnet_stats_t;

// A handler: called with its message's token, the `nargs` 32-bit arguments at `args`, and
// the payload (`payload`, `nbytes`): nothing for Short; for Medium a library buffer valid
// until the handler returns; for Long the bytes in this rank's segment where the payload
// landed. The payload must not be written through `payload` for Medium. A request handler
// may reply once; no handler may send a request, poll, wait or enter a barrier.
typedef void (*amnet_handler_fn)(amnet_token_t *token,
                                 const uint32_t *args,
                                 size_t nargs,
                                 const void *payload,
                                 size_t nbytes);

// One entry of the handler table given to `amnet_attach`.
typedef struct {
  // The handler's index, 128..=255; each index at most once per table.
  unsigned int index;
  // The function that runs when a message names `index`; not null.
  amnet_handler_fn handler;
} amnet_handler_entry_t;

// What a token tells about its message (`amnet_token_info`).
typedef struct {
  // The rank that sent the message.
  uint32_t source;
  // The index of the running handler.
  uint32_t handler;
  // The message's category: one of the `AMNET_CATEGORY_*` constants.
  int category;
  // 1 in a request handler, 0 in a reply handler.
  int is_request;
} amnet_token_info_t;

// The id of an atomic domain (0 names none).
typedef uint32_t amnet_ad_t;

// An operand or a result: the member of the domain's element type is the one used.
typedef union {
  // For `int32_t` domains.
  int32_t i32;
  // For `uint32_t` domains.
  uint32_t u32;
  // For `int64_t` domains.
  int64_t i64;
  // For `uint64_t` domains.
  uint64_t u64;
  // For `float` domains.
  float f32;
  // For `double` domains.
  double f64;
} amnet_atomic_value_t;

// The handle of a non-blocking put or get: 0 (the invalid handle) when there is nothing to
// wait for.
typedef uint64_t amnet_handle_t;

// A reduction function, with the arguments of the GASNet collectives: write `result_count`
// results of `elem_size` bytes at `results`, result `i` being the combination, in order, of
// the `left_count` operands at `left_operands` and of right operands `0..=i` at
// `right_operands`. `flags` holds `AMNET_COLL_NONCOMM` when the entry was registered with
// it; `arg` is the call's function argument. It must not call amnet or unwind.
typedef void (*amnet_coll_fn)(void *results,
                              size_t result_count,
                              const void *left_operands,
                              size_t left_count,
                              const void *right_operands,
                              size_t elem_size,
                              int flags,
                              int arg);

// One entry of the function table given to `amnet_coll_init`.
typedef struct {
  // The function; not null.
  amnet_coll_fn fnptr;
  // `AMNET_COLL_AMSAFE` and `AMNET_COLL_NONCOMM` bits.
  uint32_t flags;
} amnet_coll_fn_entry_t;

// A team: an id valid in this process (every rank numbers its teams itself).
typedef uint32_t amnet_team_t;

// The handle of a non-blocking collective: 0 (the invalid handle) when the call completed
// before returning. It belongs to the thread that started the collective.
typedef uint64_t amnet_coll_handle_t;

// A range of a segment: `len` bytes at `offset`.
typedef struct {
  // Where the range starts in the segment.
  uint64_t offset;
  // Its length in bytes.
  size_t len;
} amnet_range_t;

// A local buffer that is read: `len` bytes at `addr`.
typedef struct {
  // The first byte (may be null when `len` is 0).
  const void *addr;
  // Its length in bytes.
  size_t len;
} amnet_cbuf_t;

// A local buffer that is written: `len` bytes at `addr`.
typedef struct {
  // The first byte (may be null when `len` is 0).
  void *addr;
  // Its length in bytes.
  size_t len;
} amnet_buf_t;

// The collective handle that names no operation: complete from the start.
#define AMNET_COLL_HANDLE_INVALID 0

// No team (what a creation call returns to a rank that is not in the new team).
#define AMNET_TEAM_NULL 0

// The team of every rank of the job.
#define AMNET_TEAM_WORLD 1

// The handle that names no operation: complete from the start.
#define AMNET_HANDLE_INVALID 0

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Join the job this process belongs to, as started by `amrun` (without it, a job of one
// rank), on the conduit named by `AMNET_CONDUIT` (default smp), with the settings of the
// environment (the README lists every variable). Call it once per process, before every
// other call but `amnet_exit`, `amnet_last_error` and `amnet_error_name`; then call
// `amnet_attach`. A second call fails with the state code.
int amnet_init(void);

// `amnet_init` with the `count` settings at `settings` taking the place of the environment's
// values for their variables (`amnet::Builder::var`); the others still come from the
// environment. An unknown name or a value its variable does not accept fails with the
// configuration code naming it, before anything is joined (a later call may try again).
//
// # Safety
// - `settings` is null with `count` 0, or valid for reads of `count` settings, each with
//   two valid NUL-terminated strings.
int amnet_init_with(const amnet_setting_t *settings, size_t count);

// This rank's number, `0..size`, in `*rank`.
//
// # Safety
// - `rank` is valid for a write of a `uint32_t`.
int amnet_rank(uint32_t *rank);

// The number of ranks in the job, in `*size`.
//
// # Safety
// - `size` is valid for a write of a `uint32_t`.
int amnet_size(uint32_t *size);

// This rank's segment: its base address in `*base` and its length in bytes in `*size`
// (either may be null). Needs attach. Other ranks may write it at any time (Long payloads,
// puts); the program decides who owns which bytes when. It stays mapped until the process
// ends.
//
// # Safety
// - `base` is null or valid for a write of a pointer; `size` is null or valid for a write
//   of a `size_t`.
int amnet_segment(void **base, size_t *size);

// The length in bytes of `rank`'s segment, in `*size`. Needs attach. Other ranks' segments
// are addressed by (rank, offset): put/get and Long messages take offsets, not addresses.
//
// # Safety
// - `size` is valid for a write of a `size_t`.
int amnet_segment_size_of(uint32_t rank, size_t *size);

// The ranks on this rank's host (spec/core.md §7d), as GASNet-EX's
// `gex_System_QueryHostInfo`: `*host_peers` points at their numbers, ascending (valid until
// the process ends), `*host_count` is how many, `*host_rank` this rank's index among them.
// Each pointer may be null. Needs attach.
//
// # Safety
// - `host_peers` is null or valid for a write of a pointer; `host_count` and `host_rank` are
//   null or valid for a write of a `uint32_t`.
int amnet_host_info(const uint32_t **host_peers, uint32_t *host_count, uint32_t *host_rank);

// How many hosts the job runs on (`*hosts`, may be null) and the host index of `rank`
// (`*host`, may be null; hosts are numbered in the order of their lowest rank). Needs
// attach; `AMNET_ERR_BAD_RANK` for a rank outside the job.
//
// # Safety
// - `hosts` and `host` are null or valid for a write of a `uint32_t`.
int amnet_host_of(uint32_t rank, uint32_t *hosts, uint32_t *host);

// Run the handlers of every message that has arrived; how many ran goes to `*ran` (which
// may be null). Handlers run only inside amnet calls that poll, on the calling thread.
//
// # Safety
// - `ran` is null or valid for a write of a `size_t`.
int amnet_poll(size_t *ran);

// Start this rank's progress thread, which polls while the program's threads compute, so
// that the rank answers active messages, AM-path put/get and atomics without calls of its
// own (handlers then also run on that thread). Needs attach; starting it twice is harmless.
// `AMNET_PROGRESS_THREAD=1` starts it at attach.
int amnet_progress_thread_start(void);

// Stop this rank's progress thread and wait for it to end (refused from a handler running
// on that thread).
int amnet_progress_thread_stop(void);

// Whether this rank's progress thread runs, in `*running` (1 or 0).
//
// # Safety
// - `running` is valid for a write of an `int`.
int amnet_progress_thread_running(int *running);

// Poll until `cond(arg)` returns non-zero, backing off while idle (spin, then yield, then
// sleep). `cond` is checked before each poll and after every handler a poll runs, so the
// wait ends the moment a handler makes it true. It must be a cheap check of state that
// handlers update, and must not call amnet.
//
// # Safety
// - `cond` is a function that may be called with `arg` any number of times during the call,
//   and calls no amnet function.
int amnet_wait_until(amnet_wait_cond_fn cond, void *arg);

// Poll until the 32-bit `*word` compares to `value` as `cmp` says (one of the
// `AMNET_CMP_*` constants), as `amnet_wait_until` does. `*word` is read with atomic loads
// (acquire): handlers that run on the waiting thread (inside its polls) set it with plain
// stores; other threads, the progress thread's handlers among them, with atomic stores.
//
// # Safety
// - `word` is valid for reads of a 4-byte-aligned `uint32_t` for the whole call, written
//   only by handlers running on the calling thread or by atomic stores.
int amnet_wait_word(const uint32_t *word, int cmp, uint32_t value);

// Whether some rank has asked the job to end: `*requested` becomes 1 and `*code` the
// job-wide exit code if so, 0 otherwise (`*code` is then left alone). Callable from handlers.
//
// # Safety
// - `requested` is valid for a write of an `int`; `code` is null or valid for a write of an
//   `int`.
int amnet_exit_requested(int *requested, int *code);

// End the whole job with `code`: every rank stops promptly and `amrun` exits with the first
// code any rank passed. Callable from anywhere: any thread, a handler, before `amnet_init`
// (then only this process ends). Never returns. Returning from `main` also ends the job
// with `main`'s status, so programs end with a barrier first.
void amnet_exit(int code) __attribute__((noreturn));

// This rank's counters, in `*stats`. Works before attach too.
//
// # Safety
// - `stats` is valid for a write of an `amnet_stats_t`.
int amnet_stats(amnet_stats_t *stats);

// Collective: register the `count` handlers of `table` and a segment of `segment_size` bytes
// on every rank (sizes may differ between ranks, 0 included). Every rank must register the
// same indices, or every rank fails with the mismatch code. Call once, after `amnet_init`.
// The table is copied: it may be freed on return.
//
// # Safety
// - `table` is null with `count` 0, or valid for reads of `count` entries.
// - Each entry's handler is a function with the `amnet_handler_fn` signature that stays
//   callable until the process ends.
int amnet_attach(const amnet_handler_entry_t *table, size_t count, size_t segment_size);

// The rank that sent the message of `token`, in `*rank`.
//
// # Safety
// - `rank` is valid for a write of a `uint32_t`.
int amnet_token_source(amnet_token_t *token, uint32_t *rank);

// What `token` tells about its message, in `*info`: the source, the handler's index, the
// category, and whether it is a request. For layers that register one function for every
// index and category and dispatch themselves.
//
// # Safety
// - `info` is valid for a write of an `amnet_token_info_t`.
int amnet_token_info(amnet_token_t *token, amnet_token_info_t *info);

// The largest Medium payload, in `*nbytes` (64 KiB on smp). Works before attach too.
//
// # Safety
// - `nbytes` is valid for a write of a `size_t`.
int amnet_max_medium(size_t *nbytes);

// The largest Long payload to `rank` (its whole segment), in `*nbytes`. Needs attach.
//
// # Safety
// - `nbytes` is valid for a write of a `size_t`.
int amnet_max_long(uint32_t rank, size_t *nbytes);

// Send a Short request to handler `handler` of `rank` with the `nargs` (0 to 16) arguments
// at `args` (null when `nargs` is 0). May poll while the conduit has no room.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
int amnet_request_short(uint32_t rank, unsigned int handler, const uint32_t *args, size_t nargs);

// Send a Medium request: arguments as for Short, plus the `nbytes` bytes at `payload` (at
// most `amnet_max_medium`), delivered to the handler in a library buffer. The payload may be
// reused on return.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
// - `payload` is null or valid for reads of `nbytes` bytes.
int amnet_request_medium(uint32_t rank,
                         unsigned int handler,
                         const uint32_t *args,
                         size_t nargs,
                         const void *payload,
                         size_t nbytes);

// Send a Long request: the `nbytes` bytes at `payload` are written at `dest_offset` in
// `rank`'s segment before its handler runs (and the handler gets their address there). The
// payload may be reused on return.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
// - `payload` is null or valid for reads of `nbytes` bytes.
int amnet_request_long(uint32_t rank,
                       unsigned int handler,
                       const uint32_t *args,
                       size_t nargs,
                       const void *payload,
                       size_t nbytes,
                       uint64_t dest_offset);

// Reply to the message of `token` with a Short message. Only from a request handler, at
// most once.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
int amnet_reply_short(amnet_token_t *token,
                      unsigned int handler,
                      const uint32_t *args,
                      size_t nargs);

// Reply with a Medium message (see `amnet_request_medium`).
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
// - `payload` is null or valid for reads of `nbytes` bytes.
int amnet_reply_medium(amnet_token_t *token,
                       unsigned int handler,
                       const uint32_t *args,
                       size_t nargs,
                       const void *payload,
                       size_t nbytes);

// Reply with a Long message whose payload lands at `dest_offset` in the requester's segment.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
// - `payload` is null or valid for reads of `nbytes` bytes.
int amnet_reply_long(amnet_token_t *token,
                     unsigned int handler,
                     const uint32_t *args,
                     size_t nargs,
                     const void *payload,
                     size_t nbytes,
                     uint64_t dest_offset);

// Register the handler `entry` after attach (not collective): every rank must register the
// same index before any rank sends to it (register, then barrier); a message that reaches a
// rank which has not registered its index yet is dropped with a diagnostic. An index in use
// already fails with the bad-handler code; a handler is never replaced.
//
// # Safety
// - `entry` is valid for reads of one `amnet_handler_entry_t`, whose handler is a function
//   with the `amnet_handler_fn` signature that stays callable until the process ends.
int amnet_register_handler(const amnet_handler_entry_t *entry);

// `amnet_request_short` with the immediate flag: when the conduit has no room for the
// message now (a full ring or send window), returns the would-block code at once instead of
// polling until there is. Nothing was sent then; poll and retry, or do other work.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
int amnet_try_request_short(uint32_t rank,
                            unsigned int handler,
                            const uint32_t *args,
                            size_t nargs);

// `amnet_request_medium` with the immediate flag (see `amnet_try_request_short`).
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
// - `payload` is null or valid for reads of `nbytes` bytes.
int amnet_try_request_medium(uint32_t rank,
                             unsigned int handler,
                             const uint32_t *args,
                             size_t nargs,
                             const void *payload,
                             size_t nbytes);

// `amnet_request_long` with the immediate flag (see `amnet_try_request_short`).
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
// - `payload` is null or valid for reads of `nbytes` bytes.
int amnet_try_request_long(uint32_t rank,
                           unsigned int handler,
                           const uint32_t *args,
                           size_t nargs,
                           const void *payload,
                           size_t nbytes,
                           uint64_t dest_offset);

// Collective: make an atomic domain for elements of `type` (one of the `AMNET_TYPE_*`
// constants) allowing the operations of `ops` (bit `1 << op` for each `AMNET_AOP_*`
// operation; the header defines the sets of all operations and of the arithmetic ones), and
// store its id in `*ad`. Every rank creates its domains in the same order with the same type
// and operations; ranks that disagree all get the mismatch code. Floating-point domains
// refuse the bitwise operations (the usage code, on every rank that asked for them).
//
// # Safety
// - `ad` is valid for a write of an `amnet_ad_t`.
int amnet_ad_create(int type, uint32_t ops, amnet_ad_t *ad);

// Blocking fetching operation: perform `op` with operands `a` and `b` (used as the operation
// says) on the element at `offset` in `rank`'s segment, and store its value before the
// operation in `*result`. The offset is a multiple of the element's size.
//
// # Safety
// - The operands the operation uses (`a` for all but GET, INC and DEC; `b` for
//   COMPARE_SWAP) hold a value in the member of the domain's element type.
// - `result` is valid for a write of an `amnet_atomic_value_t`.
int amnet_ad_fetch(amnet_ad_t ad,
                   uint32_t rank,
                   uint64_t offset,
                   int op,
                   amnet_atomic_value_t a,
                   amnet_atomic_value_t b,
                   amnet_atomic_value_t *result);

// Blocking non-fetching operation: complete at the target on return.
//
// # Safety
// - The operands the operation uses hold a value in the member of the domain's element
//   type (as for `amnet_ad_fetch`).
int amnet_ad_apply(amnet_ad_t ad,
                   uint32_t rank,
                   uint64_t offset,
                   int op,
                   amnet_atomic_value_t a,
                   amnet_atomic_value_t b);

// Non-blocking non-fetching operation with an explicit handle, stored in `*handle` and
// synced as a put's (`amnet_sync` and the others).
//
// # Safety
// - The operands the operation uses hold a value in the member of the domain's element
//   type (as for `amnet_ad_fetch`).
// - `handle` is valid for a write of an `amnet_handle_t`.
int amnet_ad_apply_nb(amnet_ad_t ad,
                      uint32_t rank,
                      uint64_t offset,
                      int op,
                      amnet_atomic_value_t a,
                      amnet_atomic_value_t b,
                      amnet_handle_t *handle);

// Non-blocking non-fetching operation with the calling thread's implicit handle (or its
// open access region), synced by `amnet_sync_nbi` like `amnet_put_nbi`.
//
// # Safety
// - The operands the operation uses hold a value in the member of the domain's element
//   type (as for `amnet_ad_fetch`).
int amnet_ad_apply_nbi(amnet_ad_t ad,
                       uint32_t rank,
                       uint64_t offset,
                       int op,
                       amnet_atomic_value_t a,
                       amnet_atomic_value_t b);

// Non-blocking fetching operation: as `amnet_ad_fetch`, with a handle in `*handle` for
// `amnet_ad_wait` or `amnet_ad_try_wait`, which give the value (the put/get syncs refuse it).
//
// # Safety
// - The operands the operation uses hold a value in the member of the domain's element
//   type (as for `amnet_ad_fetch`).
// - `handle` is valid for a write of an `amnet_handle_t`.
int amnet_ad_fetch_nb(amnet_ad_t ad,
                      uint32_t rank,
                      uint64_t offset,
                      int op,
                      amnet_atomic_value_t a,
                      amnet_atomic_value_t b,
                      amnet_handle_t *handle);

// Wait for the fetching operation of `*handle` and store the value it fetched in
// `*result`; `*handle` becomes 0. On an error the handle is spent all the same.
//
// # Safety
// - `handle` is valid for reads and writes of an `amnet_handle_t`, `result` for a write of
//   an `amnet_atomic_value_t`.
int amnet_ad_wait(amnet_handle_t *handle, amnet_atomic_value_t *result);

// OK (with the value in `*result`, and `*handle` 0) when the fetching operation of
// `*handle` completed, NOT_READY when not yet (polls once).
//
// # Safety
// - `handle` is valid for reads and writes of an `amnet_handle_t`, `result` for a write of
//   an `amnet_atomic_value_t`.
int amnet_ad_try_wait(amnet_handle_t *handle, amnet_atomic_value_t *result);

// Anonymous blocking barrier: returns once every rank entered it. Needs attach.
int amnet_barrier(void);

// Start a barrier with `id`, or anonymous with the ANONYMOUS flag; the MISMATCH flag makes
// it fail on every rank. Complete it with `amnet_barrier_wait`, or with
// `amnet_barrier_try` until that returns other than NOT_READY; work may run in between.
int amnet_barrier_notify(uint32_t id, uint32_t flags);

// Complete the barrier started by `amnet_barrier_notify`, polling until every rank
// notified; `id` and `flags` repeat the notify's. Returns the barrier-mismatch code on
// every rank when named ids differ or a rank passed MISMATCH (the barrier is complete all
// the same).
int amnet_barrier_wait(uint32_t id, uint32_t flags);

// The non-blocking form of `amnet_barrier_wait`: NOT_READY while some rank has not
// notified (polls once), otherwise what `amnet_barrier_wait` returns.
int amnet_barrier_try(uint32_t id, uint32_t flags);

// The outcome of the last barrier this rank completed (GASNet's `gasnet_barrier_result`):
// `*flags` gets `AMNET_BARRIER_ANONYMOUS` when every rank notified it anonymously and 0
// otherwise, `*id` the named id the ranks matched on (0 for an anonymous one). Before the
// first barrier, and after one that failed with a mismatch, the outcome is anonymous.
// Between a notify and its wait the call fails with the state code.
//
// # Safety
// - `flags` and `id` are each null or valid for a write of a `uint32_t`.
int amnet_barrier_result(uint32_t *flags, uint32_t *id);

// Initialize the collectives: collective over the job, once per process (`images` null),
// or once on every image thread (`images` given), after `amnet_attach`.
//
// `images`: null for one image per rank, or `nranks` (the job's size) counts of images per
// rank, none zero, the same on every rank; the calling thread is then image `my_image`
// (images are numbered rank by rank) and only it may use this context. `fns`: the client's
// `nfns` reduction functions, registered after the built-ins (entry `i` has function index
// `AMNET_COLL_N_BUILTIN + i`); the table's size and flags must agree on every rank (the
// functions themselves may differ). A second call on the same thread (or in the process,
// without images) fails with the state code.
//
// # Safety
// - `images` is null or valid for reads of `nranks` `uint32_t`s; `fns` is null with `nfns`
//   0 or valid for reads of `nfns` entries, whose functions stay callable for the process's
//   life.
int amnet_coll_init(const uint32_t *images,
                    size_t nranks,
                    uint32_t my_image,
                    const amnet_coll_fn_entry_t *fns,
                    size_t nfns);

// The calling thread's image in `*my_image`, the job's images in `*total` and this rank's
// in `*local` (each may be null).
//
// # Safety
// - Each pointer is null or valid for a write of a `uint32_t`.
int amnet_coll_images(uint32_t *my_image, uint32_t *total, uint32_t *local);

// The function index of the built-in `op` (`AMNET_RED_*`) on elements of `type`
// (`AMNET_TYPE_*`), in `*index`. The bitwise operators have no float forms.
//
// # Safety
// - `index` is valid for a write of a `uint32_t`.
int amnet_coll_builtin(int op, int elem_type, uint32_t *index);

// Run handlers and move this thread's collectives in flight along.
int amnet_coll_poll(void);

// Split `parent` MPI-style: the ranks passing the same `color` form a team, numbered by
// `key` (ties by parent rank); `*out` gets the new team, or `AMNET_TEAM_NULL` for a rank
// that passed `AMNET_TEAM_NO_COLOR`. Collective over `parent` (one thread per rank).
//
// # Safety
// - `out` is valid for a write of an `amnet_team_t`.
int amnet_team_split(amnet_team_t parent, uint32_t color, int32_t key, amnet_team_t *out);

// The team of `parent`'s ranks `start + stride * i` for `i` in `0..size` (OpenSHMEM's
// strided split); `*out` gets `AMNET_TEAM_NULL` on ranks outside it. Collective over
// `parent`.
//
// # Safety
// - `out` is valid for a write of an `amnet_team_t`.
int amnet_team_split_strided(amnet_team_t parent,
                             int64_t start,
                             int64_t stride,
                             int64_t size,
                             amnet_team_t *out);

// Split `parent` into the rows (`*row`) and columns (`*col`) of a grid `xrange` wide.
// Collective over `parent`.
//
// # Safety
// - `row` and `col` are valid for writes of an `amnet_team_t`.
int amnet_team_split_2d(amnet_team_t parent, uint32_t xrange, amnet_team_t *row, amnet_team_t *col);

// The team of the `n` parent ranks at `members`, in that order (the same list on every rank
// of `parent`); `*out` gets `AMNET_TEAM_NULL` on ranks not listed. Collective over `parent`.
//
// # Safety
// - `members` is valid for reads of `n` `uint32_t`s; `out` for a write of an `amnet_team_t`.
int amnet_team_create(amnet_team_t parent, const uint32_t *members, size_t n, amnet_team_t *out);

// Destroy `team` (a barrier over it); its id names no team afterwards. Every collective
// started on it must be synced first. The world cannot be destroyed.
int amnet_team_destroy(amnet_team_t team_id);

// This rank's number in `team` (`*rank`), the team's ranks (`*size`) and its images
// (`*images`); each pointer may be null.
//
// # Safety
// - Each pointer is null or valid for a write of a `uint32_t`.
int amnet_team_info(amnet_team_t team_id, uint32_t *rank, uint32_t *size, uint32_t *images);

// The job rank of `team`'s rank `rank`, in `*out`.
//
// # Safety
// - `out` is valid for a write of a `uint32_t`.
int amnet_team_world_rank(amnet_team_t team_id, uint32_t rank, uint32_t *out);

// Wait until every rank of `team` called it: a collective of the team (one thread per rank),
// ordered with its other collectives.
int amnet_coll_barrier(amnet_team_t team_id);

// Wait until every image thread of every rank of `team` called it (UPC's barrier with
// images); with one image per rank the same as `amnet_coll_barrier`.
int amnet_coll_barrier_images(amnet_team_t team_id);

// Set this rank's forced algorithm choices, in the grammar of the tuning variable (an
// empty string clears them). Every rank makes the same call at the same point of its
// sequence of collectives.
//
// # Safety
// - `text` is a valid NUL-terminated string.
int amnet_coll_tune(const char *text);

// Wait until the collective of `*handle` completed as its OUT mode promises; `*handle`
// becomes `AMNET_COLL_HANDLE_INVALID`. On an error the handle keeps its value (the
// collective may still be in flight: its memory stays in use; a later sync completes it or
// reports the bad-handle code once the error ended it).
//
// # Safety
// - `handle` is valid for reads and writes of an `amnet_coll_handle_t`.
int amnet_coll_wait_sync(amnet_coll_handle_t *handle);

// `AMNET_OK` (and `*handle` invalid) when the collective of `*handle` completed as its OUT
// mode promises, `AMNET_NOT_READY` when not yet; never blocks.
//
// # Safety
// - `handle` is valid for reads and writes of an `amnet_coll_handle_t`.
int amnet_coll_try_sync(amnet_coll_handle_t *handle);

// Wait until every collective of the `n` handles completed; each becomes invalid.
//
// # Safety
// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
int amnet_coll_wait_sync_all(amnet_coll_handle_t *handles, size_t n);

// `AMNET_OK` when every collective of the `n` handles completed, `AMNET_NOT_READY` when not
// yet; the completed ones become invalid either way. Never blocks.
//
// # Safety
// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
int amnet_coll_try_sync_all(amnet_coll_handle_t *handles, size_t n);

// Wait until at least one collective of the `n` handles completed (at once when none is
// live); the completed ones become invalid.
//
// # Safety
// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
int amnet_coll_wait_sync_some(amnet_coll_handle_t *handles, size_t n);

// `AMNET_OK` when at least one collective of the `n` handles completed (or none is live),
// `AMNET_NOT_READY` otherwise; the completed ones become invalid. Never blocks.
//
// # Safety
// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
int amnet_coll_try_sync_some(amnet_coll_handle_t *handles, size_t n);

// Broadcast `nbytes` from the root image's `src` to every participant's `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_broadcast(amnet_team_t team,
                         void *dst,
                         uint32_t root,
                         const void *src,
                         size_t nbytes,
                         uint32_t flags,
                         amnet_coll_handle_t *handle);

// Broadcast to a list of `ndst` destinations (one per image: every image of the team under
// `AMNET_COLL_SINGLE`, this rank's under `AMNET_COLL_LOCAL`).
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_broadcastm(amnet_team_t team,
                          void *const *dstlist,
                          size_t ndst,
                          uint32_t root,
                          const void *src,
                          size_t nbytes,
                          uint32_t flags,
                          amnet_coll_handle_t *handle);

// Scatter: block `i` (of `nbytes`) of the root image's `src` to participant `i`'s `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_scatter(amnet_team_t team,
                       void *dst,
                       uint32_t root,
                       const void *src,
                       size_t nbytes,
                       uint32_t flags,
                       amnet_coll_handle_t *handle);

// Scatter to a list of `ndst` destinations.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_scatterm(amnet_team_t team,
                        void *const *dstlist,
                        size_t ndst,
                        uint32_t root,
                        const void *src,
                        size_t nbytes,
                        uint32_t flags,
                        amnet_coll_handle_t *handle);

// Gather: participant `i`'s `nbytes` at `src` to block `i` of the root image's `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gather(amnet_team_t team,
                      uint32_t root,
                      void *dst,
                      const void *src,
                      size_t nbytes,
                      uint32_t flags,
                      amnet_coll_handle_t *handle);

// Gather from a list of `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gatherm(amnet_team_t team,
                       uint32_t root,
                       void *dst,
                       void *const *srclist,
                       size_t nsrc,
                       size_t nbytes,
                       uint32_t flags,
                       amnet_coll_handle_t *handle);

// Gather to every participant: participant `i`'s `nbytes` to block `i` of every `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gather_all(amnet_team_t team,
                          void *dst,
                          const void *src,
                          size_t nbytes,
                          uint32_t flags,
                          amnet_coll_handle_t *handle);

// gather_all with lists of `ndst` destinations and `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gather_allm(amnet_team_t team,
                           void *const *dstlist,
                           size_t ndst,
                           void *const *srclist,
                           size_t nsrc,
                           size_t nbytes,
                           uint32_t flags,
                           amnet_coll_handle_t *handle);

// All-to-all: block `j` of participant `i`'s `src` to block `i` of participant `j`'s `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_exchange(amnet_team_t team,
                        void *dst,
                        const void *src,
                        size_t nbytes,
                        uint32_t flags,
                        amnet_coll_handle_t *handle);

// exchange with lists of `ndst` destinations and `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_exchangem(amnet_team_t team,
                         void *const *dstlist,
                         size_t ndst,
                         void *const *srclist,
                         size_t nsrc,
                         size_t nbytes,
                         uint32_t flags,
                         amnet_coll_handle_t *handle);

// Scatter with `counts[i]` bytes for participant `i` (`ncounts` entries, one per participant;
// blocks packed in order in `src`).
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_scatter_v(amnet_team_t team,
                         void *dst,
                         uint32_t root,
                         const void *src,
                         const size_t *counts,
                         size_t ncounts,
                         uint32_t flags,
                         amnet_coll_handle_t *handle);

// scatter_v with a list of `ndst` destinations.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_scatter_vm(amnet_team_t team,
                          void *const *dstlist,
                          size_t ndst,
                          uint32_t root,
                          const void *src,
                          const size_t *counts,
                          size_t ncounts,
                          uint32_t flags,
                          amnet_coll_handle_t *handle);

// Gather `counts[i]` bytes from participant `i` (packed in order in the root image's `dst`).
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gather_v(amnet_team_t team,
                        uint32_t root,
                        void *dst,
                        const void *src,
                        const size_t *counts,
                        size_t ncounts,
                        uint32_t flags,
                        amnet_coll_handle_t *handle);

// gather_v with a list of `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gather_vm(amnet_team_t team,
                         uint32_t root,
                         void *dst,
                         void *const *srclist,
                         size_t nsrc,
                         const size_t *counts,
                         size_t ncounts,
                         uint32_t flags,
                         amnet_coll_handle_t *handle);

// gather_all with `counts[i]` bytes from participant `i`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gather_all_v(amnet_team_t team,
                            void *dst,
                            const void *src,
                            const size_t *counts,
                            size_t ncounts,
                            uint32_t flags,
                            amnet_coll_handle_t *handle);

// gather_all_v with lists of `ndst` destinations and `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_gather_all_vm(amnet_team_t team,
                             void *const *dstlist,
                             size_t ndst,
                             void *const *srclist,
                             size_t nsrc,
                             const size_t *counts,
                             size_t ncounts,
                             uint32_t flags,
                             amnet_coll_handle_t *handle);

// All-to-all with `counts[i * P + j]` bytes from participant `i` to `j` (`ncounts` = P x P;
// each source packs its blocks in destination order, each destination in source order).
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_exchange_v(amnet_team_t team,
                          void *dst,
                          const void *src,
                          const size_t *counts,
                          size_t ncounts,
                          uint32_t flags,
                          amnet_coll_handle_t *handle);

// exchange_v with lists of `ndst` destinations and `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_exchange_vm(amnet_team_t team,
                           void *const *dstlist,
                           size_t ndst,
                           void *const *srclist,
                           size_t nsrc,
                           const size_t *counts,
                           size_t ncounts,
                           uint32_t flags,
                           amnet_coll_handle_t *handle);

// Reduce the `elem_count` elements of `elem_size` bytes of the distributed array at `src`
// (block-cyclic: `src_blksz` elements per block, starting at element `src_offset`; `src_blksz`
// 0: every element on participant `src_offset`) with function `func` (argument `func_arg`) to
// one element at the root image's `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_reduce(amnet_team_t team,
                      uint32_t root,
                      void *dst,
                      const void *src,
                      size_t src_blksz,
                      size_t src_offset,
                      size_t elem_size,
                      size_t elem_count,
                      uint32_t func,
                      int func_arg,
                      uint32_t flags,
                      amnet_coll_handle_t *handle);

// reduce with a list of `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_reducem(amnet_team_t team,
                       uint32_t root,
                       void *dst,
                       void *const *srclist,
                       size_t nsrc,
                       size_t src_blksz,
                       size_t src_offset,
                       size_t elem_size,
                       size_t elem_count,
                       uint32_t func,
                       int func_arg,
                       uint32_t flags,
                       amnet_coll_handle_t *handle);

// reduce, with the result at every participant's `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_reduce_to_all(amnet_team_t team,
                             void *dst,
                             const void *src,
                             size_t src_blksz,
                             size_t src_offset,
                             size_t elem_size,
                             size_t elem_count,
                             uint32_t func,
                             int func_arg,
                             uint32_t flags,
                             amnet_coll_handle_t *handle);

// reduce_to_all with lists of `ndst` destinations and `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_reduce_to_allm(amnet_team_t team,
                              void *const *dstlist,
                              size_t ndst,
                              void *const *srclist,
                              size_t nsrc,
                              size_t src_blksz,
                              size_t src_offset,
                              size_t elem_size,
                              size_t elem_count,
                              uint32_t func,
                              int func_arg,
                              uint32_t flags,
                              amnet_coll_handle_t *handle);

// Inclusive prefix reduction: element `k` of the distributed destination array (`dst`,
// `dst_blksz`, `dst_offset`) gets the combination of source elements `0..=k` (`src`,
// `src_blksz`, `src_offset`).
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_prefix_reduce(amnet_team_t team,
                             void *dst,
                             size_t dst_blksz,
                             size_t dst_offset,
                             const void *src,
                             size_t src_blksz,
                             size_t src_offset,
                             size_t elem_size,
                             size_t elem_count,
                             uint32_t func,
                             int func_arg,
                             uint32_t flags,
                             amnet_coll_handle_t *handle);

// prefix_reduce with lists of `ndst` destinations and `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_prefix_reducem(amnet_team_t team,
                              void *const *dstlist,
                              size_t ndst,
                              size_t dst_blksz,
                              size_t dst_offset,
                              void *const *srclist,
                              size_t nsrc,
                              size_t src_blksz,
                              size_t src_offset,
                              size_t elem_size,
                              size_t elem_count,
                              uint32_t func,
                              int func_arg,
                              uint32_t flags,
                              amnet_coll_handle_t *handle);

// Exclusive prefix reduction: element `k > 0` gets source elements `0..k`; element 0 is left
// unchanged.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_exclusive_prefix_reduce(amnet_team_t team,
                                       void *dst,
                                       size_t dst_blksz,
                                       size_t dst_offset,
                                       const void *src,
                                       size_t src_blksz,
                                       size_t src_offset,
                                       size_t elem_size,
                                       size_t elem_count,
                                       uint32_t func,
                                       int func_arg,
                                       uint32_t flags,
                                       amnet_coll_handle_t *handle);

// exclusive_prefix_reduce with lists of `ndst` destinations and `nsrc` sources.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_exclusive_prefix_reducem(amnet_team_t team,
                                        void *const *dstlist,
                                        size_t ndst,
                                        size_t dst_blksz,
                                        size_t dst_offset,
                                        void *const *srclist,
                                        size_t nsrc,
                                        size_t src_blksz,
                                        size_t src_offset,
                                        size_t elem_size,
                                        size_t elem_count,
                                        uint32_t func,
                                        int func_arg,
                                        uint32_t flags,
                                        amnet_coll_handle_t *handle);

// Vector reduction (MPI's reduce): element `i` of the root image's `dst` gets `src_0[i] op
// src_1[i] op ...` over the `count` elements of `elem_size` bytes at every participant's
// `src`, in participant order. `AMNET_COLL_IN_PLACE` as the root's `src` takes its operands
// from its `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_reduce_elems(amnet_team_t team,
                            uint32_t root,
                            void *dst,
                            const void *src,
                            size_t elem_size,
                            size_t count,
                            uint32_t func,
                            int func_arg,
                            uint32_t flags,
                            amnet_coll_handle_t *handle);

// Vector reduction to every participant (MPI's allreduce); `AMNET_COLL_IN_PLACE` as `src`
// takes a participant's operands from its `dst`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_reduce_elems_to_all(amnet_team_t team,
                                   void *dst,
                                   const void *src,
                                   size_t elem_size,
                                   size_t count,
                                   uint32_t func,
                                   int func_arg,
                                   uint32_t flags,
                                   amnet_coll_handle_t *handle);

// Inclusive vector scan (MPI's scan): element `i` of participant `p`'s `dst` gets `src_0[i] op
// ... op src_p[i]`.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_scan_elems(amnet_team_t team,
                          void *dst,
                          const void *src,
                          size_t elem_size,
                          size_t count,
                          uint32_t func,
                          int func_arg,
                          uint32_t flags,
                          amnet_coll_handle_t *handle);

// Exclusive vector scan (MPI's exscan): participant `p > 0` gets `src_0[i] op ... op
// src_{p-1}[i]`; participant 0's `dst` is left unchanged.
//
// # Safety
// - Every address and list entry the call reads or writes through is valid for the bytes the
//   operation addresses there, and not otherwise accessed, from the call until the collective
//   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
//   their lengths during the call; `handle` is null or valid for a write.
int amnet_coll_exclusive_scan_elems(amnet_team_t team,
                                    void *dst,
                                    const void *src,
                                    size_t elem_size,
                                    size_t count,
                                    uint32_t func,
                                    int func_arg,
                                    uint32_t flags,
                                    amnet_coll_handle_t *handle);

// Prepare a Medium request to handler `handler` of `rank` with a payload of at most
// `max_len` bytes (at most `amnet_max_medium`): `*buf` receives the buffer to build the
// payload in (its initial contents are unspecified), sent by `amnet_commit_request`. The
// checks of `amnet_request_medium` apply. Until it commits or cancels, this thread may not
// wait (waits fail with the usage code) nor prepare another request.
//
// # Safety
// - `buf` is valid for a write of a pointer.
int amnet_prepare_request_medium(uint32_t rank, unsigned int handler, size_t max_len, void **buf);

// Prepare a Long request whose payload (at most `max_len` bytes) lands at `dest_offset` in
// `rank`'s segment: as `amnet_prepare_request_medium`, with the checks of
// `amnet_request_long`.
//
// # Safety
// - `buf` is valid for a write of a pointer.
int amnet_prepare_request_long(uint32_t rank,
                               unsigned int handler,
                               size_t max_len,
                               uint64_t dest_offset,
                               void **buf);

// Send this thread's prepared request with the `nargs` arguments at `args` and the first
// `len` bytes of its buffer (at most the prepared `max_len`: the usage code beyond, and
// nothing is sent). The buffer is gone afterwards, whatever the result.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
int amnet_commit_request(const uint32_t *args, size_t nargs, size_t len);

// Drop this thread's prepared request: nothing is sent, and the buffer is gone.
int amnet_cancel_request(void);

// In a request handler: prepare the handler's reply, a Medium message to the requester's
// `handler` with a payload of at most `max_len` bytes; `*buf` receives the buffer to build it
// in (on smp, in place in the reply ring). The checks of `amnet_reply_medium` apply. Send it
// with `amnet_commit_reply`, which is the handler's one reply, or drop it with
// `amnet_cancel_reply` (the handler may then reply otherwise); one the handler leaves behind
// is cancelled when it returns. While it is held, the token's other reply calls fail with
// the state code.
//
// # Safety
// - `buf` is valid for a write of a pointer.
int amnet_prepare_reply_medium(amnet_token_t *token,
                               unsigned int handler,
                               size_t max_len,
                               void **buf);

// Send the handler's prepared reply with the `nargs` arguments at `args` and the first `len`
// bytes of its buffer (at most the prepared `max_len`: the usage code beyond, nothing is
// sent, and the handler may still reply). The buffer is gone afterwards.
//
// # Safety
// - `args` is null or valid for reads of `nargs` `uint32_t`.
int amnet_commit_reply(amnet_token_t *token, const uint32_t *args, size_t nargs, size_t len);

// Drop the handler's prepared reply: nothing is sent, and the handler may reply otherwise.
int amnet_cancel_reply(amnet_token_t *token);

// Blocking put: copy the `nbytes` bytes at `src` to `rank`'s segment at `dest_offset`;
// complete on return.
//
// # Safety
// - `src` is null or valid for reads of `nbytes` bytes.
int amnet_put(uint32_t rank, uint64_t dest_offset, const void *src, size_t nbytes);

// Blocking get: copy `nbytes` bytes from `rank`'s segment at `src_offset` to `dst`.
//
// # Safety
// - `dst` is null or valid for writes of `nbytes` bytes, which nothing else touches during
//   the call.
int amnet_get(void *dst, uint32_t rank, uint64_t src_offset, size_t nbytes);

// Non-blocking put with an explicit handle, stored in `*handle`. `src` may be reused on
// return; the handle completes when the data is in the target segment.
//
// # Safety
// - `src` is null or valid for reads of `nbytes` bytes.
// - `handle` is valid for a write of an `amnet_handle_t`.
int amnet_put_nb(uint32_t rank,
                 uint64_t dest_offset,
                 const void *src,
                 size_t nbytes,
                 amnet_handle_t *handle);

// Non-blocking get with an explicit handle, stored in `*handle`: `dst` holds the data once
// the handle is synced.
//
// # Safety
// - `dst` is null or valid for writes of `nbytes` bytes until the handle is synced, and
//   nothing else reads or writes them until then.
// - `handle` is valid for a write of an `amnet_handle_t`.
int amnet_get_nb(void *dst,
                 uint32_t rank,
                 uint64_t src_offset,
                 size_t nbytes,
                 amnet_handle_t *handle);

// Non-blocking put with the calling thread's implicit handle (or its open access region).
// `src` may be reused on return.
//
// # Safety
// - `src` is null or valid for reads of `nbytes` bytes.
int amnet_put_nbi(uint32_t rank, uint64_t dest_offset, const void *src, size_t nbytes);

// Non-blocking get with the calling thread's implicit handle (or its open access region).
//
// # Safety
// - `dst` is null or valid for writes of `nbytes` bytes until the implicit handle (or the
//   region's handle) is synced, and nothing else reads or writes them until then.
int amnet_get_nbi(void *dst, uint32_t rank, uint64_t src_offset, size_t nbytes);

// Wait until the operation of `*handle` completes; `*handle` becomes 0. A 0 handle returns
// at once. When the operation completed with a failure, the error is returned and the handle
// is spent all the same; when the wait itself fails before the operation completed
// (a hang, a peer's failure, a wait refused), `*handle` stays outstanding: the
// operation may still write its destination, and a later sync waits for it.
//
// # Safety
// - `handle` is valid for reads and writes of an `amnet_handle_t`.
int amnet_sync(amnet_handle_t *handle);

// OK (and `*handle` becomes 0) when the operation of `*handle` completed, NOT_READY when
// not yet (polls once).
//
// # Safety
// - `handle` is valid for reads and writes of an `amnet_handle_t`.
int amnet_try_sync(amnet_handle_t *handle);

// Wait until every one of the `count` handles at `handles` completed; each becomes 0
// (0 handles are skipped).
//
// # Safety
// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
int amnet_sync_all(amnet_handle_t *handles, size_t count);

// OK when every one of the handles completed, NOT_READY otherwise (polls once); those that
// completed become 0.
//
// # Safety
// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
int amnet_try_sync_all(amnet_handle_t *handles, size_t count);

// Wait until at least one of the handles completed or none is outstanding; those that
// completed become 0.
//
// # Safety
// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
int amnet_sync_some(amnet_handle_t *handles, size_t count);

// OK when at least one of the handles completed or none is outstanding, NOT_READY
// otherwise (polls once); those that completed become 0.
//
// # Safety
// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
int amnet_try_sync_some(amnet_handle_t *handles, size_t count);

// Wait for every implicit-handle operation this thread started outside access regions.
int amnet_sync_nbi(void);

// OK when every implicit-handle operation this thread started outside access regions
// completed, NOT_READY otherwise (polls once).
int amnet_try_sync_nbi(void);

// Open an access region on this thread: the implicit-handle operations it starts until
// `amnet_end_nbi_region` are collected into one explicit handle.
int amnet_begin_nbi_region(void);

// Close this thread's access region; the handle of everything started in it goes to
// `*handle` (0 when all of it already completed).
//
// # Safety
// - `handle` is valid for a write of an `amnet_handle_t`.
int amnet_end_nbi_region(amnet_handle_t *handle);

// The message of the last call on this thread that failed, naming the function and what was
// wrong (`amnet_put: rank 7 does not exist: the job has 2 ranks`); an empty string when no
// call on this thread has failed. The string belongs to amnet and stays valid until this
// thread's next amnet call; copy it to keep it. Never null.
const char *amnet_last_error(void);

// The name of a status code as the header spells it (0 gives the name of the OK code), or
// "unknown status code" for a number that is none of them. The string is static: never
// freed, never changed.
const char *amnet_error_name(int code);

// Vector put: the `srccount` local pieces at `src`, in order, into the `dstcount` ranges of
// `rank`'s segment at `dst`, in order (equal totals). Complete on return.
//
// # Safety
// - `dst` is valid for reads of `dstcount` ranges, `src` of `srccount` buffers, and each
//   buffer for reads of its length.
int amnet_put_vector(uint32_t rank,
                     const amnet_range_t *dst,
                     size_t dstcount,
                     const amnet_cbuf_t *src,
                     size_t srccount);

// Vector put with an explicit handle in `*handle`; the local pieces may be reused on return.
//
// # Safety
// - As `amnet_put_vector`; `handle` is valid for a write of an `amnet_handle_t`.
int amnet_put_vector_nb(uint32_t rank,
                        const amnet_range_t *dst,
                        size_t dstcount,
                        const amnet_cbuf_t *src,
                        size_t srccount,
                        amnet_handle_t *handle);

// Vector get: the `srccount` ranges of `rank`'s segment at `src`, in order, into the
// `dstcount` local pieces at `dst`, in order (equal totals; the pieces may not overlap).
// Complete on return.
//
// # Safety
// - `src` is valid for reads of `srccount` ranges, `dst` of `dstcount` buffers, and each
//   buffer for writes of its length, untouched by anything else during the call.
int amnet_get_vector(uint32_t rank,
                     const amnet_range_t *src,
                     size_t srccount,
                     const amnet_buf_t *dst,
                     size_t dstcount);

// Vector get into this rank's own segment (the `dst` ranges are local segment offsets),
// with an explicit handle in `*handle`; leave those bytes alone until it is synced.
//
// # Safety
// - `src` is valid for reads of `srccount` ranges, `dst` of `dstcount`; `handle` for a write
//   of an `amnet_handle_t`.
int amnet_get_vector_nb_local(uint32_t rank,
                              const amnet_range_t *src,
                              size_t srccount,
                              const amnet_range_t *dst,
                              size_t dstcount,
                              amnet_handle_t *handle);

// Indexed put: `srccount` local pieces of `srclen` bytes each (pointers at `src`) into
// `dstcount` ranges of `dstlen` bytes each at the offsets at `dst` (equal totals). Complete
// on return.
//
// # Safety
// - `dst` is valid for reads of `dstcount` offsets, `src` of `srccount` pointers, each
//   valid for reads of `srclen` bytes.
int amnet_put_indexed(uint32_t rank,
                      const uint64_t *dst,
                      size_t dstcount,
                      size_t dstlen,
                      const void *const *src,
                      size_t srccount,
                      size_t srclen);

// Indexed put with an explicit handle in `*handle`; the local pieces may be reused on
// return.
//
// # Safety
// - As `amnet_put_indexed`; `handle` is valid for a write of an `amnet_handle_t`.
int amnet_put_indexed_nb(uint32_t rank,
                         const uint64_t *dst,
                         size_t dstcount,
                         size_t dstlen,
                         const void *const *src,
                         size_t srccount,
                         size_t srclen,
                         amnet_handle_t *handle);

// Indexed get: `srccount` ranges of `srclen` bytes at the offsets at `src` into `dstcount`
// local pieces of `dstlen` bytes (pointers at `dst`; they may not overlap). Complete on
// return.
//
// # Safety
// - `src` is valid for reads of `srccount` offsets, `dst` of `dstcount` pointers, each
//   valid for writes of `dstlen` bytes, untouched by anything else during the call.
int amnet_get_indexed(uint32_t rank,
                      const uint64_t *src,
                      size_t srccount,
                      size_t srclen,
                      void *const *dst,
                      size_t dstcount,
                      size_t dstlen);

// Indexed get into this rank's own segment (`dst` holds local segment offsets), with an
// explicit handle in `*handle`.
//
// # Safety
// - `src` is valid for reads of `srccount` offsets, `dst` of `dstcount`; `handle` for a
//   write of an `amnet_handle_t`.
int amnet_get_indexed_nb_local(uint32_t rank,
                               const uint64_t *src,
                               size_t srccount,
                               size_t srclen,
                               const uint64_t *dst,
                               size_t dstcount,
                               size_t dstlen,
                               amnet_handle_t *handle);

// Strided put (GASNet's convention): `count[0]` contiguous bytes per chunk and `count[k + 1]`
// chunks at level `k`, `strides[k]` bytes apart, with `stridelevels` strides per side and
// `stridelevels + 1` counts; the local region starts at `src`, the target's at `dst_offset`
// in `rank`'s segment. Complete on return.
//
// # Safety
// - `dst_strides` and `src_strides` are valid for reads of `stridelevels` elements, `count`
//   of `stridelevels + 1`; `src` for reads of the bytes the local region spans.
int amnet_put_strided(uint32_t rank,
                      uint64_t dst_offset,
                      const uint64_t *dst_strides,
                      const void *src,
                      const size_t *src_strides,
                      const size_t *count,
                      size_t stridelevels);

// Strided put with an explicit handle in `*handle`; the local region may be reused on
// return.
//
// # Safety
// - As `amnet_put_strided`; `handle` is valid for a write of an `amnet_handle_t`.
int amnet_put_strided_nb(uint32_t rank,
                         uint64_t dst_offset,
                         const uint64_t *dst_strides,
                         const void *src,
                         const size_t *src_strides,
                         const size_t *count,
                         size_t stridelevels,
                         amnet_handle_t *handle);

// Strided get: the target's region at `src_offset` in `rank`'s segment into the local
// region at `dst` (see `amnet_put_strided`). Complete on return.
//
// # Safety
// - `src_strides` and `dst_strides` are valid for reads of `stridelevels` elements, `count`
//   of `stridelevels + 1`; `dst` for writes of the bytes the local region spans, untouched
//   by anything else during the call.
int amnet_get_strided(uint32_t rank,
                      uint64_t src_offset,
                      const uint64_t *src_strides,
                      void *dst,
                      const size_t *dst_strides,
                      const size_t *count,
                      size_t stridelevels);

// Strided get into this rank's own segment (the local region at `dst_offset`, its strides
// in segment bytes), with an explicit handle in `*handle`.
//
// # Safety
// - The stride arrays are valid for reads of `stridelevels` elements, `count` of
//   `stridelevels + 1`; `handle` for a write of an `amnet_handle_t`.
int amnet_get_strided_nb_local(uint32_t rank,
                               uint64_t src_offset,
                               const uint64_t *src_strides,
                               uint64_t dst_offset,
                               const uint64_t *dst_strides,
                               const size_t *count,
                               size_t stridelevels,
                               amnet_handle_t *handle);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* AMNET_H */

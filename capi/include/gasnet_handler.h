/* gasnet_handler.h: GASNet-1's helpers for active-message handlers that pass pointers, written
 * once for 32- and 64-bit platforms: a pointer travels as one 32-bit handler argument or as two
 * (high word, low word). A client writes `NAME_inner` with the unpacked arguments and declares
 * the handler with SHORT_HANDLER / MEDIUM_HANDLER / LONG_HANDLER(NAME, cnt32, cnt64, args32,
 * args64), which defines NAME_32 or NAME_64 with the packed arguments; the requests and replies
 * go through SHORT_REQ(cnt32, cnt64, (args with PACK(ptr))) and its kin, and
 * gasneti_handler_tableentry_with_bits(NAME) makes the handler table's entry. */

#ifndef AMNET_GASNET_HANDLER_H
#define AMNET_GASNET_HANDLER_H

#include "gasnet.h"

/* ARGSn: the n handler arguments a0.. of a handler's parameter list; ARGNAMESn: their names. */
#define ARGS0
#define ARGS1 , gasnet_handlerarg_t a0
#define ARGS2 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1
#define ARGS3 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2
#define ARGS4 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3
#define ARGS5 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4
#define ARGS6 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5
#define ARGS7 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6
#define ARGS8 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7
#define ARGS9 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8
#define ARGS10 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8, \
    gasnet_handlerarg_t a9
#define ARGS11 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8, \
    gasnet_handlerarg_t a9, gasnet_handlerarg_t a10
#define ARGS12 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8, \
    gasnet_handlerarg_t a9, gasnet_handlerarg_t a10, gasnet_handlerarg_t a11
#define ARGS13 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8, \
    gasnet_handlerarg_t a9, gasnet_handlerarg_t a10, gasnet_handlerarg_t a11, \
    gasnet_handlerarg_t a12
#define ARGS14 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8, \
    gasnet_handlerarg_t a9, gasnet_handlerarg_t a10, gasnet_handlerarg_t a11, \
    gasnet_handlerarg_t a12, gasnet_handlerarg_t a13
#define ARGS15 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8, \
    gasnet_handlerarg_t a9, gasnet_handlerarg_t a10, gasnet_handlerarg_t a11, \
    gasnet_handlerarg_t a12, gasnet_handlerarg_t a13, gasnet_handlerarg_t a14
#define ARGS16 , gasnet_handlerarg_t a0, gasnet_handlerarg_t a1, gasnet_handlerarg_t a2, \
    gasnet_handlerarg_t a3, gasnet_handlerarg_t a4, gasnet_handlerarg_t a5, \
    gasnet_handlerarg_t a6, gasnet_handlerarg_t a7, gasnet_handlerarg_t a8, \
    gasnet_handlerarg_t a9, gasnet_handlerarg_t a10, gasnet_handlerarg_t a11, \
    gasnet_handlerarg_t a12, gasnet_handlerarg_t a13, gasnet_handlerarg_t a14, \
    gasnet_handlerarg_t a15
#define ARGNAMES0
#define ARGNAMES1 , a0
#define ARGNAMES2 , a0, a1
#define ARGNAMES3 , a0, a1, a2
#define ARGNAMES4 , a0, a1, a2, a3
#define ARGNAMES5 , a0, a1, a2, a3, a4
#define ARGNAMES6 , a0, a1, a2, a3, a4, a5
#define ARGNAMES7 , a0, a1, a2, a3, a4, a5, a6
#define ARGNAMES8 , a0, a1, a2, a3, a4, a5, a6, a7
#define ARGNAMES9 , a0, a1, a2, a3, a4, a5, a6, a7, a8
#define ARGNAMES10 , a0, a1, a2, a3, a4, a5, a6, a7, a8, a9
#define ARGNAMES11 , a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10
#define ARGNAMES12 , a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11
#define ARGNAMES13 , a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12
#define ARGNAMES14 , a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13
#define ARGNAMES15 , a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14
#define ARGNAMES16 , a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15

/* The 32-bit words of a 64-bit value, and the value from them. */
#define GASNETI_HIWORD(arg) ((uint32_t)(((uint64_t)(arg)) >> 32))
#define GASNETI_LOWORD(arg) ((uint32_t)((uint64_t)(arg)))
#define GASNETI_MAKEWORD(hi, lo) ((((uint64_t)(hi)) << 32) | (((uint64_t)(lo)) & 0xFFFFFFFFu))

#if UINTPTR_MAX > 0xffffffffu
/* A pointer as two handler arguments (high word first), and back. */
#define PACK(ptr) \
    ((gasnet_handlerarg_t)GASNETI_HIWORD(ptr)), ((gasnet_handlerarg_t)GASNETI_LOWORD(ptr))
#define UNPACK2(a0, a1) ((void *)(uintptr_t)GASNETI_MAKEWORD((a0), (a1)))
/* The call with the 64-bit argument count. */
#define AMNET_GASNET_PICK(cnt32, cnt64) cnt64
#define AMNET_GASNET_BITS _64
#else
#define PACK(ptr) ((gasnet_handlerarg_t)(uintptr_t)(ptr))
#define UNPACK(a0) ((void *)(uintptr_t)(uint32_t)(a0))
#define AMNET_GASNET_PICK(cnt32, cnt64) cnt32
#define AMNET_GASNET_BITS _32
#endif

#define AMNET_GASNET_CAT(a, b) AMNET_GASNET_CAT_(a, b)
#define AMNET_GASNET_CAT_(a, b) a##b

/* Requests and replies with the argument count of this platform. */
#define SHORT_REQ(cnt32, cnt64, args) \
    AMNET_GASNET_CAT(gasnet_AMRequestShort, AMNET_GASNET_PICK(cnt32, cnt64)) args
#define SHORT_REP(cnt32, cnt64, args) \
    AMNET_GASNET_CAT(gasnet_AMReplyShort, AMNET_GASNET_PICK(cnt32, cnt64)) args
#define MEDIUM_REQ(cnt32, cnt64, args) \
    AMNET_GASNET_CAT(gasnet_AMRequestMedium, AMNET_GASNET_PICK(cnt32, cnt64)) args
#define MEDIUM_REP(cnt32, cnt64, args) \
    AMNET_GASNET_CAT(gasnet_AMReplyMedium, AMNET_GASNET_PICK(cnt32, cnt64)) args
#define LONG_REQ(cnt32, cnt64, args) \
    AMNET_GASNET_CAT(gasnet_AMRequestLong, AMNET_GASNET_PICK(cnt32, cnt64)) args
#define LONG_REP(cnt32, cnt64, args) \
    AMNET_GASNET_CAT(gasnet_AMReplyLong, AMNET_GASNET_PICK(cnt32, cnt64)) args
#define LONGASYNC_REQ(cnt32, cnt64, args) \
    AMNET_GASNET_CAT(gasnet_AMRequestLongAsync, AMNET_GASNET_PICK(cnt32, cnt64)) args

/* The storage class of the handlers the macros below define. */
#ifndef GASNETI_HANDLER_SCOPE
#define GASNETI_HANDLER_SCOPE extern
#endif

/* Declarations and definitions of NAME_32 / NAME_64; a definition calls NAME_inner with the
 * platform's inner argument list. The closing declaration takes the caller's semicolon. */
#define SHORT_HANDLER_DECL(name, cnt32, cnt64)                                       \
    GASNETI_HANDLER_SCOPE void AMNET_GASNET_CAT(name, AMNET_GASNET_BITS)(          \
        gasnet_token_t token AMNET_GASNET_CAT(ARGS, AMNET_GASNET_PICK(cnt32, cnt64)))
#define SHORT_HANDLER(name, cnt32, cnt64, innerargs32, innerargs64)                  \
    SHORT_HANDLER_DECL(name, cnt32, cnt64) {                                         \
        name##_inner AMNET_GASNET_PICK(innerargs32, innerargs64);                    \
    }                                                                                \
    extern int amnet_gasnet_handler_##name##_defined
#define MEDIUM_HANDLER_DECL(name, cnt32, cnt64)                                      \
    GASNETI_HANDLER_SCOPE void AMNET_GASNET_CAT(name, AMNET_GASNET_BITS)(          \
        gasnet_token_t token, void *addr,                                            \
        size_t nbytes AMNET_GASNET_CAT(ARGS, AMNET_GASNET_PICK(cnt32, cnt64)))
#define MEDIUM_HANDLER(name, cnt32, cnt64, innerargs32, innerargs64)                 \
    MEDIUM_HANDLER_DECL(name, cnt32, cnt64) {                                        \
        name##_inner AMNET_GASNET_PICK(innerargs32, innerargs64);                    \
    }                                                                                \
    extern int amnet_gasnet_handler_##name##_defined
#define LONG_HANDLER MEDIUM_HANDLER
#define LONG_HANDLER_DECL MEDIUM_HANDLER_DECL

/* Handlers whose arguments are the same on every platform. */
#define SHORT_HANDLER_NOBITS_DECL(name, cnt) \
    GASNETI_HANDLER_SCOPE void name(gasnet_token_t token ARGS##cnt)
#define MEDIUM_HANDLER_NOBITS_DECL(name, cnt) \
    GASNETI_HANDLER_SCOPE void name(gasnet_token_t token, void *addr, size_t nbytes ARGS##cnt)
#define LONG_HANDLER_NOBITS_DECL MEDIUM_HANDLER_NOBITS_DECL

/* Handler table entries: index _hidx_NAME (the client defines it), function NAME, or NAME_32 /
 * NAME_64 for the handlers above. */
typedef void (*gasneti_handler_fn_t)();
#define gasneti_handleridx(fnname) _hidx_##fnname
#define gasneti_handler_tableentry_no_bits(fnname) \
    { gasneti_handleridx(fnname), (gasneti_handler_fn_t)fnname }
#define gasneti_handler_tableentry_with_bits(fnname) \
    {                                                \
        gasneti_handleridx(fnname),                  \
            (gasneti_handler_fn_t)AMNET_GASNET_CAT(fnname, AMNET_GASNET_BITS) \
    }

#endif

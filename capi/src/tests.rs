//! The entry points' error paths, in a job of one rank (no launcher): every bad input gets
//! its code and a message naming what was wrong. One test, since the process has one
//! endpoint.

use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

use crate::*;

fn last() -> String {
    // SAFETY: amnet_last_error never returns null and its string is NUL-terminated.
    unsafe { CStr::from_ptr(amnet_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[track_caller]
fn expect(code: i32, want: i32, words: &[&str]) {
    assert_eq!(code, want, "code {code}, wanted {want}: {}", last());
    let msg = last();
    for w in words {
        assert!(msg.contains(w), "{msg:?} lacks {w:?}");
    }
}

/// What a handler found wrong (a panic may not leave an `extern "C"` function).
static FAULTS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn check(ok: bool, what: &str) {
    if !ok {
        FAULTS.lock().unwrap().push(format!("{what}: {}", last()));
    }
}

unsafe extern "C" fn echo(
    tok: *mut AmToken,
    args: *const u32,
    nargs: usize,
    _: *const c_void,
    _: usize,
) {
    // SAFETY: the handler's arguments are valid for the call.
    unsafe {
        let a = std::slice::from_raw_parts(args, nargs);
        let mut src = u32::MAX;
        check(
            amnet_token_source(tok, &mut src) == OK && src == 0,
            "token source",
        );
        if a[0] == 1 {
            // A request from a handler is refused by the core.
            let rc = amnet_request_short(0, 201, null(), 0);
            check(rc == ERR_IN_HANDLER, "request in handler");
            let reply = [2u32];
            check(
                amnet_reply_short(tok, 201, reply.as_ptr(), 1) == OK,
                "first reply",
            );
            let rc = amnet_reply_short(tok, 201, reply.as_ptr(), 1);
            check(rc == ERR_REPLY, "second reply");
            KEPT.store(tok as usize, std::sync::atomic::Ordering::Relaxed);
        }
        HITS.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

static HITS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static KEPT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn error_paths_give_codes_and_messages() {
    // SAFETY: every pointer passed below is valid for what the call does with it, or
    // deliberately null where the call must refuse it.
    unsafe {
        let mut r = 0u32;
        expect(
            amnet_rank(&mut r),
            ERR_NOT_INIT,
            &["amnet_rank", "amnet_init"],
        );
        // Settings from code: an unknown name and a bad value are refused before joining.
        let unknown = std::ffi::CString::new(format!("{}_NO_SUCH_VARIABLE", "AMNET")).unwrap();
        let bad = [Setting {
            name: unknown.as_ptr(),
            value: c"1".as_ptr(),
        }];
        expect(
            amnet_init_with(bad.as_ptr(), 1),
            ERR_CONFIG,
            &["NO_SUCH_VARIABLE"],
        );
        let bad = [Setting {
            name: c"AMNET_SPIN".as_ptr(),
            value: c"lots".as_ptr(),
        }];
        expect(
            amnet_init_with(bad.as_ptr(), 1),
            ERR_CONFIG,
            &["AMNET_SPIN", "lots"],
        );
        expect(
            amnet_init_with(null(), 1),
            ERR_BAD_ARG,
            &["settings is null"],
        );
        let good = [Setting {
            name: c"AMNET_SPIN".as_ptr(),
            value: c"50".as_ptr(),
        }];
        assert_eq!(amnet_init_with(good.as_ptr(), 1), OK, "{}", last());
        expect(amnet_init(), ERR_STATE, &["amnet_init", "already"]);
        expect(amnet_rank(null_mut()), ERR_BAD_ARG, &["rank is null"]);
        let mut size = 0u32;
        assert_eq!(amnet_size(&mut size), OK);
        assert_eq!(size, 1);
        expect(
            amnet_poll(null_mut()),
            ERR_NOT_ATTACHED,
            &["amnet_poll", "attach"],
        );

        let late = HandlerEntry {
            index: 210,
            handler: Some(echo),
        };
        expect(
            amnet_register_handler(&late),
            ERR_NOT_ATTACHED,
            &["amnet_register_handler"],
        );

        // Handler tables: out of range, reserved, null function, duplicate.
        let bad = [HandlerEntry {
            index: 300,
            handler: Some(echo),
        }];
        expect(
            amnet_attach(bad.as_ptr(), 1, 0),
            ERR_BAD_HANDLER,
            &["table[0]", "300"],
        );
        let bad = [HandlerEntry {
            index: 7,
            handler: Some(echo),
        }];
        expect(
            amnet_attach(bad.as_ptr(), 1, 0),
            ERR_BAD_HANDLER,
            &["table[0]", "reserved"],
        );
        let bad = [HandlerEntry {
            index: 200,
            handler: None,
        }];
        expect(amnet_attach(bad.as_ptr(), 1, 0), ERR_BAD_ARG, &["null"]);
        let bad = [
            HandlerEntry {
                index: 200,
                handler: Some(echo),
            },
            HandlerEntry {
                index: 200,
                handler: Some(echo),
            },
        ];
        expect(
            amnet_attach(bad.as_ptr(), 2, 0),
            ERR_BAD_HANDLER,
            &["table[1]", "twice"],
        );
        let good = [
            HandlerEntry {
                index: 200,
                handler: Some(echo),
            },
            HandlerEntry {
                index: 201,
                handler: Some(echo),
            },
        ];
        assert_eq!(amnet_attach(good.as_ptr(), 2, 4096), OK, "{}", last());
        expect(amnet_attach(good.as_ptr(), 2, 4096), ERR_STATE, &["attach"]);

        // Requests.
        let args = [1u32; 17];
        expect(
            amnet_request_short(1, 200, args.as_ptr(), 1),
            ERR_BAD_RANK,
            &["rank 1", "1 ranks"],
        );
        expect(
            amnet_request_short(0, 200, args.as_ptr(), 17),
            ERR_TOO_MANY_ARGS,
            &["17"],
        );
        expect(
            amnet_request_short(0, 200, null(), 3),
            ERR_BAD_ARG,
            &["args is null"],
        );
        expect(
            amnet_request_short(0, 202, args.as_ptr(), 1),
            ERR_BAD_HANDLER,
            &["202"],
        );
        expect(
            amnet_request_short(0, 256, args.as_ptr(), 1),
            ERR_BAD_HANDLER,
            &["256"],
        );
        let mut mm = 0usize;
        assert_eq!(amnet_max_medium(&mut mm), OK);
        let big = vec![0u8; mm + 1];
        expect(
            amnet_request_medium(0, 200, args.as_ptr(), 1, big.as_ptr().cast(), big.len()),
            ERR_TOO_LARGE,
            &["Medium"],
        );
        expect(
            amnet_request_medium(0, 200, args.as_ptr(), 1, null(), 5),
            ERR_BAD_ARG,
            &["payload is null"],
        );
        expect(
            amnet_request_long(0, 200, args.as_ptr(), 1, big.as_ptr().cast(), 8, 4090),
            ERR_OUT_OF_SEGMENT,
            &["4090"],
        );

        // Handlers registered after attach, immediate requests, the exit state.
        assert_eq!(amnet_register_handler(&late), OK, "{}", last());
        expect(
            amnet_register_handler(&late),
            ERR_BAD_HANDLER,
            &["210", "twice"],
        );
        expect(
            amnet_register_handler(null()),
            ERR_BAD_ARG,
            &["entry is null"],
        );
        expect(
            amnet_try_request_short(2, 210, args.as_ptr(), 1),
            ERR_BAD_RANK,
            &["amnet_try_request_short", "rank 2"],
        );
        let zero = [0u32];
        assert_eq!(amnet_try_request_short(0, 210, zero.as_ptr(), 1), OK);
        assert_eq!(amnet_wait_word(HITS.as_ptr(), CMP_EQ, 1), OK, "{}", last());
        let (mut requested, mut code) = (-1, -1);
        assert_eq!(amnet_exit_requested(&mut requested, &mut code), OK);
        assert_eq!((requested, code), (0, -1));

        // A handler's rules, and its token after it returned.
        assert_eq!(amnet_request_short(0, 200, args.as_ptr(), 1), OK);
        let w = HITS.as_ptr();
        assert_eq!(amnet_wait_word(w, CMP_GE, 3), OK, "{}", last());
        assert!(
            FAULTS.lock().unwrap().is_empty(),
            "{:?}",
            FAULTS.lock().unwrap()
        );
        let kept = KEPT.load(std::sync::atomic::Ordering::Relaxed) as *mut AmToken;
        expect(
            amnet_reply_short(kept, 201, null(), 0),
            ERR_BAD_TOKEN,
            &["valid only inside"],
        );
        expect(
            amnet_reply_short(null_mut(), 201, null(), 0),
            ERR_BAD_TOKEN,
            &["null"],
        );
        expect(amnet_wait_word(w, 9, 2), ERR_BAD_ARG, &["cmp 9"]);
        expect(
            amnet_wait_word(w.cast::<u8>().add(1).cast(), CMP_EQ, 2),
            ERR_BAD_ARG,
            &["aligned"],
        );
        expect(amnet_wait_until(None, null_mut()), ERR_BAD_ARG, &["cond"]);

        // Put/get and handles.
        let data = [7u8; 64];
        let mut back = [0u8; 64];
        expect(
            amnet_put(3, 0, data.as_ptr().cast(), 64),
            ERR_BAD_RANK,
            &["rank 3"],
        );
        expect(
            amnet_put(0, 4090, data.as_ptr().cast(), 64),
            ERR_OUT_OF_SEGMENT,
            &["4090..4154", "4096 bytes"],
        );
        expect(
            amnet_get(null_mut(), 0, 0, 4),
            ERR_BAD_ARG,
            &["dst is null"],
        );
        let mut h: HandleId = 0;
        assert_eq!(amnet_put_nb(0, 0, data.as_ptr().cast(), 64, &mut h), OK);
        assert_eq!(amnet_sync(&mut h), OK);
        assert_eq!(h, HANDLE_INVALID);
        assert_eq!(amnet_get_nb(back.as_mut_ptr().cast(), 0, 0, 64, &mut h), OK);
        let mut hs = [h, 0];
        assert_eq!(amnet_sync_all(hs.as_mut_ptr(), 2), OK, "{}", last());
        assert_eq!(back, data);
        let mut stale = h.max(0x1_0000_0001);
        expect(
            amnet_sync(&mut stale),
            ERR_BAD_HANDLE,
            &["names none of the outstanding"],
        );
        expect(
            amnet_end_nbi_region(&mut h),
            ERR_BAD_HANDLE,
            &["no access region"],
        );

        // Barriers.
        expect(
            amnet_barrier_wait(0, BARRIER_ANONYMOUS),
            ERR_STATE,
            &["barrier"],
        );
        expect(
            amnet_barrier_notify(0, 4),
            ERR_BAD_ARG,
            &["unknown bits 0x4"],
        );
        assert_eq!(amnet_barrier_notify(5, BARRIER_MISMATCH), OK);
        expect(
            amnet_barrier_wait(5, BARRIER_MISMATCH),
            ERR_BARRIER_MISMATCH,
            &["mismatch"],
        );
        assert_eq!(amnet_barrier(), OK);

        let mut st = Stats::default();
        assert_eq!(amnet_stats(&mut st), OK);
        assert!(
            st.requests_sent.short_msgs >= 1 && st.puts >= 1 && st.gets >= 1,
            "{st:?}"
        );
        let name = CStr::from_ptr(amnet_error_name(ERR_BAD_RANK));
        assert_eq!(name.to_str().unwrap(), concat!("AMNET_", "ERR_BAD_RANK"));
    }
}

#[test]
fn a_panic_becomes_the_internal_code_with_its_message() {
    let rc = crate::status::guard("amnet_example", || panic!("the example's panic"));
    assert_eq!(rc, ERR_INTERNAL);
    let msg = last();
    assert!(
        msg.starts_with("amnet_example: internal error") && msg.contains("the example's panic"),
        "{msg}"
    );
}

//! The suite and the exit rules in thread mode (ranks as threads of one process).

use std::sync::mpsc;
use std::time::Duration;

use amnet::RankOutcome;
use amnet_testsuite::{run_suite, Summary};

/// Run `f` on a helper thread and fail if it takes longer than `secs` (a hang fails the test
/// instead of hanging CI).
fn bounded<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("did not finish within {secs} s"))
}

fn suite(n: u32) {
    let out = bounded(600, move || {
        amnet::run_threads(n, |ep| {
            run_suite(&ep, None, false).map_err(|e| e.to_string())
        })
    })
    .expect("run_threads");
    for (r, o) in out.iter().enumerate() {
        match o {
            RankOutcome::Returned(Ok(_)) => {}
            other => panic!("rank {r}: {other:?}"),
        }
    }
    let Some(RankOutcome::Returned(Ok(Summary { passed, failed, .. }))) = out.first() else {
        unreachable!()
    };
    assert_eq!(*failed, 0);
    assert!(*passed > 10, "only {passed} tests ran");
}

#[test]
fn suite_threads_1() {
    suite(1);
}

#[test]
fn suite_threads_4() {
    suite(4);
}

#[test]
fn exit_in_thread_mode_ends_every_rank() {
    let out = bounded(60, || {
        amnet::run_threads(3, |ep| {
            ep.attach(amnet::HandlerTable::new(), 4096).unwrap();
            if ep.rank() == 1 {
                std::thread::sleep(Duration::from_millis(50));
                ep.exit(5);
            }
            ep.barrier().unwrap();
            ep.barrier().unwrap();
        })
    })
    .unwrap();
    assert!(out.iter().all(|o| *o == RankOutcome::Exited(5)), "{out:?}");
}

#[test]
fn panic_in_thread_mode_ends_the_job() {
    let out = bounded(60, || {
        amnet::run_threads(3, |ep| {
            ep.attach(amnet::HandlerTable::new(), 4096).unwrap();
            if ep.rank() == 2 {
                panic!("on purpose");
            }
            loop {
                ep.barrier().unwrap();
            }
        })
    })
    .unwrap();
    assert!(
        matches!(&out[2], RankOutcome::Panicked(m) if m.contains("on purpose")),
        "{out:?}"
    );
    assert_eq!(out[0], RankOutcome::Exited(101));
    assert_eq!(out[1], RankOutcome::Exited(101));
}

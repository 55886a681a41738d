//! The emulated device's verbs semantics, between two devices of one process (the bytes still
//! move through process_vm_readv/writev, to this process).

use super::*;

const PREFIX: &str = "amnet-ibvemu-test-";

struct Side {
    dev: EmuDevice,
    cq: EmuCq,
    qp: EmuQp,
}

fn side(srq: Option<&EmuSrq>, dev: EmuDevice) -> Side {
    let cq = dev.create_cq(256).unwrap();
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_inline: 64,
    };
    let qp = dev.create_qp(&cq, &cq, srq, &init).unwrap();
    dev.to_init(&qp).unwrap();
    Side { dev, cq, qp }
}

fn connect(a: &Side, b: &Side, attr: &ConnectAttr) {
    connect_qps((&a.dev, &a.qp), (&b.dev, &b.qp), attr);
}

fn connect_qps(a: (&EmuDevice, &EmuQp), b: (&EmuDevice, &EmuQp), attr: &ConnectAttr) {
    let (aa, ba) = (a.0.address(a.1), b.0.address(b.1));
    a.0.to_rtr(a.1, &ba, attr).unwrap();
    b.0.to_rtr(b.1, &aa, attr).unwrap();
    a.0.to_rts(a.1, attr).unwrap();
    b.0.to_rts(b.1, attr).unwrap();
}

fn pair(attr: &ConnectAttr) -> (Side, Side) {
    let a = side(None, EmuDevice::open(PREFIX).unwrap());
    let b = side(None, EmuDevice::open(PREFIX).unwrap());
    connect(&a, &b, attr);
    (a, b)
}

fn all_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

fn reg(s: &Side, buf: &mut [u8], access: Access) -> EmuMr {
    // SAFETY: the buffers outlive their regions and every request in these tests.
    unsafe { s.dev.reg_mr(buf.as_mut_ptr(), buf.len(), access).unwrap() }
}

fn sge(buf: &[u8], mr: &EmuMr) -> Sge {
    Sge {
        addr: buf.as_ptr() as u64,
        len: u32::try_from(buf.len()).unwrap(),
        lkey: mr.lkey(),
    }
}

fn send_wr(wr_id: u64, op: SendOp, sg: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op,
        sg,
        signaled: true,
        inline: false,
        fence: false,
    }
}

fn post(s: &Side, wr: SendWr<'_>) {
    // SAFETY: the tests keep every buffer alive until its completion was polled.
    unsafe { s.dev.post_send(&s.qp, &[wr]).unwrap() }
}

fn post_recv(s: &Side, wr_id: u64, buf: &mut [u8], mr: &EmuMr) {
    let wr = RecvWr {
        wr_id,
        sge: sge(buf, mr),
    };
    // SAFETY: as above.
    unsafe { s.dev.post_recv(&s.qp, &[wr]).unwrap() }
}

/// Poll `s` until `n` completions arrived (bounded).
fn wait(s: &Side, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [Wc::EMPTY; 8];
    while got.len() < n {
        let k = s.dev.poll_cq(&s.cq, &mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        assert!(Instant::now() < deadline, "timed out with {got:?}");
        if k == 0 {
            std::thread::yield_now();
        }
    }
    got
}

fn quiet(s: &Side) {
    std::thread::sleep(Duration::from_millis(2));
    let mut buf = [Wc::EMPTY; 4];
    assert_eq!(
        s.dev.poll_cq(&s.cq, &mut buf).unwrap(),
        0,
        "{:?}",
        &buf[..1]
    );
}

#[test]
fn send_with_immediate_lands_in_the_posted_buffer() {
    let (a, b) = pair(&ConnectAttr::default());
    let mut src = *b"hello, verbs";
    let mut dst = [0u8; 64];
    let smr = reg(&a, &mut src, Access::default());
    let dmr = reg(&b, &mut dst, Access::LOCAL_WRITE);
    post_recv(&b, 77, &mut dst, &dmr);
    post(
        &a,
        send_wr(5, SendOp::SendWithImm { imm: 0xfeed }, &[sge(&src, &smr)]),
    );
    let sent = wait(&a, 1);
    assert_eq!(sent[0].wr_id, 5);
    assert_eq!(sent[0].status, WcStatus::Success);
    assert_eq!(sent[0].opcode, WcOpcode::Send);
    assert_eq!(sent[0].qp_num, a.qp.num());
    let got = wait(&b, 1);
    assert_eq!(
        got[0],
        Wc {
            wr_id: 77,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 12,
            imm: Some(0xfeed),
            qp_num: b.qp.num(),
        }
    );
    assert_eq!(&dst[..12], b"hello, verbs");
    assert!(dst[12..].iter().all(|&x| x == 0));
}

#[test]
fn inline_gather_and_order_are_kept() {
    let (a, b) = pair(&ConnectAttr::default());
    let mut dst = [[0u8; 16]; 3];
    let mrs: Vec<EmuMr> = dst
        .iter_mut()
        .map(|d| reg(&b, d, Access::LOCAL_WRITE))
        .collect();
    for (i, (d, m)) in dst.iter_mut().zip(&mrs).enumerate() {
        post_recv(&b, i as u64, d, m);
    }
    for i in 0..3u8 {
        let head = [i; 3];
        let tail = [0xa0 + i; 2];
        let sg = [
            Sge {
                addr: head.as_ptr() as u64,
                len: 3,
                lkey: 0,
            },
            Sge {
                addr: tail.as_ptr() as u64,
                len: 2,
                lkey: 0,
            },
        ];
        let mut wr = send_wr(u64::from(i), SendOp::Send, &sg);
        wr.inline = true;
        wr.signaled = i == 2;
        post(&a, wr);
    }
    assert_eq!(wait(&a, 1)[0].wr_id, 2, "only the signaled send completes");
    let got = wait(&b, 3);
    for (i, wc) in got.iter().enumerate() {
        assert_eq!((wc.wr_id, wc.byte_len, wc.imm), (i as u64, 5, None));
        let i = u8::try_from(i).unwrap();
        assert_eq!(&dst[usize::from(i)][..5], &[i, i, i, 0xa0 + i, 0xa0 + i]);
    }
}

#[test]
fn rdma_write_read_and_atomics() {
    let (a, b) = pair(&ConnectAttr::default());
    let mut seg = vec![0u8; 4096];
    let smr = reg(&b, &mut seg, all_access());
    let base = seg.as_ptr() as u64;
    let mut local = vec![0u8; 256];
    let lmr = reg(&a, &mut local, Access::LOCAL_WRITE);
    local[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
    post(
        &a,
        send_wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: base + 1000,
                rkey: smr.rkey(),
            },
            &[Sge {
                addr: local.as_ptr() as u64,
                len: 8,
                lkey: lmr.lkey(),
            }],
        ),
    );
    assert_eq!(wait(&a, 1)[0].opcode, WcOpcode::RdmaWrite);
    assert_eq!(seg[1000..1008], 0x1122_3344_5566_7788u64.to_le_bytes());
    seg[2000..2004].copy_from_slice(b"read");
    post(
        &a,
        send_wr(
            2,
            SendOp::RdmaRead {
                remote_addr: base + 2000,
                rkey: smr.rkey(),
            },
            &[Sge {
                addr: local.as_ptr() as u64 + 100,
                len: 4,
                lkey: lmr.lkey(),
            }],
        ),
    );
    let r = wait(&a, 1)[0];
    assert_eq!((r.opcode, r.byte_len), (WcOpcode::RdmaRead, 4));
    assert_eq!(&local[100..104], b"read");
    seg[8..16].copy_from_slice(&40u64.to_le_bytes());
    let result = Sge {
        addr: local.as_ptr() as u64 + 64,
        len: 8,
        lkey: lmr.lkey(),
    };
    post(
        &a,
        send_wr(
            3,
            SendOp::FetchAdd {
                remote_addr: base + 8,
                rkey: smr.rkey(),
                add: 2,
            },
            &[result],
        ),
    );
    assert_eq!(wait(&a, 1)[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(local[64..72], 40u64.to_le_bytes());
    assert_eq!(seg[8..16], 42u64.to_le_bytes());
    for (compare, expect) in [(41u64, 42u64), (42, 7)] {
        post(
            &a,
            send_wr(
                4,
                SendOp::CompareSwap {
                    remote_addr: base + 8,
                    rkey: smr.rkey(),
                    compare,
                    swap: 7,
                },
                &[result],
            ),
        );
        assert_eq!(wait(&a, 1)[0].opcode, WcOpcode::CompareSwap);
        assert_eq!(
            local[64..72],
            42u64.to_le_bytes(),
            "the old value comes back"
        );
        assert_eq!(seg[8..16], expect.to_le_bytes());
    }
    // Write with immediate: the data, then a receive completion carrying the length.
    let mut rbuf = [0u8; 4];
    let rmr = reg(&b, &mut rbuf, Access::LOCAL_WRITE);
    post_recv(&b, 9, &mut rbuf, &rmr);
    post(
        &a,
        send_wr(
            5,
            SendOp::RdmaWriteWithImm {
                remote_addr: base + 3000,
                rkey: smr.rkey(),
                imm: 31,
            },
            &[Sge {
                addr: local.as_ptr() as u64 + 100,
                len: 4,
                lkey: lmr.lkey(),
            }],
        ),
    );
    wait(&a, 1);
    let got = wait(&b, 1)[0];
    assert_eq!(
        (got.wr_id, got.opcode, got.byte_len, got.imm),
        (9, WcOpcode::RecvRdmaWithImm, 4, Some(31))
    );
    assert_eq!(&seg[3000..3004], b"read");
    assert_eq!(
        rbuf, [0; 4],
        "a write with immediate leaves the receive buffer alone"
    );
}

#[test]
fn remote_access_errors_move_both_queue_pairs_to_err_and_flush() {
    let (a, b) = pair(&ConnectAttr::default());
    let mut seg = vec![0u8; 64];
    let ro = reg(&b, &mut seg, Access::REMOTE_READ);
    let mut local = [0u8; 16];
    let lmr = reg(&a, &mut local, Access::LOCAL_WRITE);
    let mut rbuf = [0u8; 8];
    let rmr = reg(&b, &mut rbuf, Access::LOCAL_WRITE);
    post_recv(&b, 40, &mut rbuf, &rmr);
    // A write to a read-only region.
    post(
        &a,
        send_wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: seg.as_ptr() as u64,
                rkey: ro.rkey(),
            },
            &[sge(&local[..8], &lmr)],
        ),
    );
    let e = wait(&a, 1)[0];
    assert_eq!((e.wr_id, e.status), (1, WcStatus::RemAccessErr));
    assert_eq!(a.dev.state(&a.qp), QpState::Err);
    assert_eq!(b.dev.state(&b.qp), QpState::Err);
    assert_eq!(seg, vec![0u8; 64], "nothing was written");
    // What follows flushes, signaled or not.
    let mut wr = send_wr(2, SendOp::Send, &[]);
    wr.signaled = false;
    post(&a, wr);
    let f = wait(&a, 1)[0];
    assert_eq!((f.wr_id, f.status), (2, WcStatus::WrFlushErr));
    // The peer's posted receive flushes at its next poll.
    let f = wait(&b, 1)[0];
    assert_eq!(
        (f.wr_id, f.status, f.opcode),
        (40, WcStatus::WrFlushErr, WcOpcode::Recv)
    );
}

#[test]
fn bad_keys_ranges_and_sizes_are_named_by_their_status() {
    type Case = (SendOp, bool, WcStatus);
    let attr = ConnectAttr::default();
    let cases = |base: u64, rkey: u32| -> Vec<Case> {
        vec![
            // A remote key that names nothing.
            (
                SendOp::RdmaRead {
                    remote_addr: base,
                    rkey: rkey ^ 0x100,
                },
                true,
                WcStatus::RemAccessErr,
            ),
            // A range past the region's end.
            (
                SendOp::RdmaWrite {
                    remote_addr: base + 60,
                    rkey,
                },
                true,
                WcStatus::RemAccessErr,
            ),
            // A misaligned atomic.
            (
                SendOp::FetchAdd {
                    remote_addr: base + 4,
                    rkey,
                    add: 1,
                },
                true,
                WcStatus::RemInvReqErr,
            ),
            // A bad local key.
            (
                SendOp::RdmaWrite {
                    remote_addr: base,
                    rkey,
                },
                false,
                WcStatus::LocProtErr,
            ),
        ]
    };
    for i in 0..4 {
        let (a, b) = pair(&attr);
        let mut seg = vec![0u8; 64];
        let smr = reg(&b, &mut seg, all_access());
        let mut local = [0u8; 8];
        let lmr = reg(&a, &mut local, Access::LOCAL_WRITE);
        let (op, good_lkey, status) = cases(seg.as_ptr() as u64, smr.rkey())[i];
        let mut s = sge(&local, &lmr);
        if !good_lkey {
            s.lkey ^= 0x300;
        }
        post(&a, send_wr(i as u64, op, &[s]));
        let e = wait(&a, 1)[0];
        assert_eq!((e.wr_id, e.status), (i as u64, status), "case {i}: {op:?}");
        assert_eq!(a.dev.state(&a.qp), QpState::Err, "case {i}");
    }
    // A receive buffer too small: LOC_LEN_ERR there, REM_INV_REQ_ERR here.
    let (a, b) = pair(&attr);
    let mut small = [0u8; 4];
    let smr = reg(&b, &mut small, Access::LOCAL_WRITE);
    post_recv(&b, 8, &mut small, &smr);
    let mut big = [1u8; 16];
    let bmr = reg(&a, &mut big, Access::default());
    post(&a, send_wr(3, SendOp::Send, &[sge(&big, &bmr)]));
    assert_eq!(wait(&a, 1)[0].status, WcStatus::RemInvReqErr);
    let r = wait(&b, 1)[0];
    assert_eq!((r.wr_id, r.status), (8, WcStatus::LocLenErr));
    assert_eq!(small, [0; 4], "nothing truncated into the small buffer");
}

#[test]
fn receiver_not_ready_waits_then_runs_in_order_or_fails_after_the_retries() {
    // rnr_retry 7: wait for the receive, and keep later requests behind the waiting one.
    let (a, b) = pair(&ConnectAttr::default());
    let mut one = [1u8; 4];
    let mut two = [2u8; 4];
    let m1 = reg(&a, &mut one, Access::default());
    let m2 = reg(&a, &mut two, Access::default());
    post(&a, send_wr(1, SendOp::Send, &[sge(&one, &m1)]));
    post(&a, send_wr(2, SendOp::Send, &[sge(&two, &m2)]));
    quiet(&a);
    let mut r = [[0u8; 4]; 2];
    let rm: Vec<EmuMr> = r
        .iter_mut()
        .map(|x| reg(&b, x, Access::LOCAL_WRITE))
        .collect();
    for (i, (x, m)) in r.iter_mut().zip(&rm).enumerate() {
        post_recv(&b, 10 + i as u64, x, m);
    }
    let done = wait(&a, 2);
    assert_eq!(
        done.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let got = wait(&b, 2);
    assert_eq!(
        got.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![10, 11]
    );
    assert_eq!(r, [[1; 4], [2; 4]]);

    // rnr_retry 1 with the shortest timer: RNR_RETRY_EXC_ERR, and the request behind flushes.
    let attr = ConnectAttr {
        rnr_retry: 1,
        min_rnr_timer: 1,
        ..ConnectAttr::default()
    };
    let (a, _b) = pair(&attr);
    let (m1, m2) = (
        reg(&a, &mut one, Access::default()),
        reg(&a, &mut two, Access::default()),
    );
    post(&a, send_wr(1, SendOp::Send, &[sge(&one, &m1)]));
    post(&a, send_wr(2, SendOp::Send, &[sge(&two, &m2)]));
    let e = wait(&a, 2);
    assert_eq!(
        e.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn a_peer_that_is_gone_ends_in_retry_exceeded() {
    let attr = ConnectAttr {
        timeout: 1,
        retry_cnt: 2,
        ..ConnectAttr::default()
    };
    let (a, b) = pair(&attr);
    drop(b);
    let mut x = [0u8; 4];
    let m = reg(&a, &mut x, Access::default());
    post(&a, send_wr(6, SendOp::Send, &[sge(&x, &m)]));
    let e = wait(&a, 1)[0];
    assert_eq!((e.wr_id, e.status), (6, WcStatus::RetryExcErr));
}

#[test]
fn shared_receive_queue_serves_every_queue_pair() {
    let attr = ConnectAttr::default();
    let hub = EmuDevice::open(PREFIX).unwrap();
    let srq = hub.create_srq(64).unwrap();
    let h1 = side(Some(&srq), hub);
    // A second queue pair on the same device and the same queues.
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 0,
        max_inline: 64,
    };
    let qp2 = h1.dev.create_qp(&h1.cq, &h1.cq, Some(&srq), &init).unwrap();
    h1.dev.to_init(&qp2).unwrap();
    let x = side(None, EmuDevice::open(PREFIX).unwrap());
    let y = side(None, EmuDevice::open(PREFIX).unwrap());
    connect(&x, &h1, &attr);
    connect_qps((&y.dev, &y.qp), (&h1.dev, &qp2), &attr);
    let mut bufs = [[0u8; 8]; 4];
    let mrs: Vec<EmuMr> = bufs
        .iter_mut()
        .map(|b| reg(&h1, b, Access::LOCAL_WRITE))
        .collect();
    for (i, (b, m)) in bufs.iter_mut().zip(&mrs).enumerate() {
        let wr = RecvWr {
            wr_id: i as u64,
            sge: sge(b, m),
        };
        // SAFETY: the buffers outlive the test's completions.
        unsafe { h1.dev.post_srq_recv(&srq, &[wr]).unwrap() };
    }
    let mut p = [7u8; 8];
    let mut q = [9u8; 8];
    let pm = reg(&x, &mut p, Access::default());
    let qm = reg(&y, &mut q, Access::default());
    post(&x, send_wr(1, SendOp::Send, &[sge(&p, &pm)]));
    post(&y, send_wr(1, SendOp::Send, &[sge(&q, &qm)]));
    let got = wait(&h1, 2);
    let mut by_qp: Vec<(u32, u64)> = got.iter().map(|w| (w.qp_num, w.wr_id)).collect();
    by_qp.sort_unstable();
    let mut want = vec![(h1.qp.num(), 0), (qp2.num(), 1)];
    want.sort_unstable();
    assert_eq!(by_qp, want);
    assert_eq!(bufs[0], [7; 8]);
    assert_eq!(bufs[1], [9; 8]);
}

#[test]
fn send_queue_fills_without_signaled_completions() {
    let (a, b) = pair(&ConnectAttr::default());
    let mut rb = [[0u8; 1]; 16];
    let rms: Vec<EmuMr> = rb
        .iter_mut()
        .map(|x| reg(&b, x, Access::LOCAL_WRITE))
        .collect();
    for (i, (x, m)) in rb.iter_mut().zip(&rms).enumerate() {
        post_recv(&b, i as u64, x, m);
    }
    let one = [1u8];
    let sg = [Sge {
        addr: one.as_ptr() as u64,
        len: 1,
        lkey: 0,
    }];
    for i in 0..16 {
        let mut wr = send_wr(i, SendOp::Send, &sg);
        wr.inline = true;
        wr.signaled = false;
        post(&a, wr);
    }
    let mut wr = send_wr(99, SendOp::Send, &sg);
    wr.inline = true;
    // SAFETY: inline payload.
    let e = unsafe { a.dev.post_send(&a.qp, &[wr]) }
        .unwrap_err()
        .to_string();
    assert!(e.contains("send queue is full"), "{e}");
    wait(&b, 16);
}

#[test]
fn states_are_checked_and_injected_errors_complete() {
    let dev = EmuDevice::open(PREFIX).unwrap();
    let s = side(None, dev);
    let e = s
        .dev
        .to_rts(&s.qp, &ConnectAttr::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("Rtr -> Rts from state Init"), "{e}");
    let wr = send_wr(1, SendOp::Send, &[]);
    // SAFETY: no buffers.
    let e = unsafe { s.dev.post_send(&s.qp, &[wr]) }
        .unwrap_err()
        .to_string();
    assert!(e.contains("is in Init, not RTS"), "{e}");
    let e = s
        .dev
        .to_rtr(&s.qp, b"\x01\x00\x00\x00/nope", &ConnectAttr::default());
    assert!(e.unwrap_err().to_string().contains("/nope"));

    let (a, b) = pair(&ConnectAttr::default());
    a.dev.fail_next(&a.qp, WcStatus::RetryExcErr);
    post(&a, send_wr(4, SendOp::Send, &[]));
    assert_eq!(wait(&a, 1)[0].status, WcStatus::RetryExcErr);
    assert_eq!(a.dev.state(&a.qp), QpState::Err);
    assert_eq!(
        b.dev.state(&b.qp),
        QpState::Rts,
        "an injected error is local"
    );
}

#[test]
fn registration_rules_and_the_shm_object_goes_away() {
    let dev = EmuDevice::open(PREFIX).unwrap();
    let name = dev.shm_name().to_string();
    let mut b = [0u8; 8];
    // SAFETY: `b` outlives the attempt.
    let e = unsafe { dev.reg_mr(b.as_mut_ptr(), 8, Access::REMOTE_WRITE) };
    assert!(e.err().unwrap().to_string().contains("LOCAL_WRITE"));
    assert!(std::path::Path::new(&format!("/dev/shm{name}")).exists());
    drop(dev);
    assert!(!std::path::Path::new(&format!("/dev/shm{name}")).exists());
}

#[test]
fn a_device_wide_fault_fails_the_request_it_was_armed_for() {
    let (a, b) = pair(&ConnectAttr::default());
    let mut rb = [[0u8; 1]; 4];
    let rms: Vec<EmuMr> = rb
        .iter_mut()
        .map(|x| reg(&b, x, Access::LOCAL_WRITE))
        .collect();
    for (i, (x, m)) in rb.iter_mut().zip(&rms).enumerate() {
        post_recv(&b, i as u64, x, m);
    }
    a.dev.fail_after(2, WcStatus::RnrRetryExcErr);
    let one = [1u8];
    let sg = [Sge {
        addr: one.as_ptr() as u64,
        len: 1,
        lkey: 0,
    }];
    for i in 0..4 {
        let mut wr = send_wr(i, SendOp::Send, &sg);
        wr.inline = true;
        post(&a, wr);
    }
    let got: Vec<(u64, WcStatus)> = wait(&a, 4).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::RnrRetryExcErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(wait(&b, 2).len(), 2, "two sends arrived before the fault");
}

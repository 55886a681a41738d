//! Tests of the libibverbs device. `abi_matches_the_shim` and `open_reports_the_devices_found`
//! run on any host; the others need an RDMA device with an active port (a real HCA, or
//! rdma-core's soft devices rxe and siw) and, where `ibv_get_device_list` finds none, say so
//! on stderr and pass.
//!
//! The device tests connect two queue pairs of one device to each other (loopback), which
//! every HCA and soft device supports.

use std::mem::{offset_of, size_of};
use std::time::{Duration, Instant};

use super::*;
use crate::verbs::Sge;

#[test]
fn abi_matches_the_shim() {
    // SAFETY: the shim defines these constants; reading them has no side effect.
    unsafe {
        use ffi::abi::*;
        assert_eq!(size_of::<ffi::Sge>(), amnet_ibv_sizeof_sge);
        assert_eq!(size_of::<ffi::SendWr>(), amnet_ibv_sizeof_swr);
        assert_eq!(offset_of!(ffi::SendWr, rkey), amnet_ibv_offsetof_swr_rkey);
        assert_eq!(
            offset_of!(ffi::SendWr, num_sge),
            amnet_ibv_offsetof_swr_num_sge
        );
        assert_eq!(offset_of!(ffi::SendWr, sg), amnet_ibv_offsetof_swr_sg);
        assert_eq!(size_of::<ffi::RecvWr>(), amnet_ibv_sizeof_rwr);
        assert_eq!(size_of::<ffi::Wc>(), amnet_ibv_sizeof_wc);
        assert_eq!(
            offset_of!(ffi::Wc, imm_data),
            amnet_ibv_offsetof_wc_imm_data
        );
        assert_eq!(
            offset_of!(ffi::Wc, vendor_err),
            amnet_ibv_offsetof_wc_vendor_err
        );
        assert_eq!(size_of::<ffi::DeviceInfo>(), amnet_ibv_sizeof_device_info);
        assert_eq!(
            offset_of!(ffi::DeviceInfo, phys_port_cnt),
            amnet_ibv_offsetof_device_info_phys_port_cnt
        );
        assert_eq!(size_of::<ffi::PortInfo>(), amnet_ibv_sizeof_port_info);
        assert_eq!(
            offset_of!(ffi::PortInfo, lid),
            amnet_ibv_offsetof_port_info_lid
        );
        assert_eq!(size_of::<ffi::QpCaps>(), amnet_ibv_sizeof_qp_caps);
        assert_eq!(size_of::<ffi::Rtr>(), amnet_ibv_sizeof_rtr);
        assert_eq!(offset_of!(ffi::Rtr, dlid), amnet_ibv_offsetof_rtr_dlid);
        assert_eq!(
            offset_of!(ffi::Rtr, min_rnr_timer),
            amnet_ibv_offsetof_rtr_min_rnr_timer
        );
        assert_eq!(u32_count(ffi::MAX_SGE), amnet_ibv_max_sge);
        assert_eq!(u32_count(ffi::POST_MAX), amnet_ibv_post_max);
        assert_eq!(u32_count(ffi::POLL_MAX), amnet_ibv_poll_max);
        assert_eq!(
            [
                ffi::WR_RDMA_WRITE,
                ffi::WR_RDMA_WRITE_WITH_IMM,
                ffi::WR_SEND,
                ffi::WR_SEND_WITH_IMM,
                ffi::WR_RDMA_READ,
                ffi::WR_ATOMIC_CMP_AND_SWP,
                ffi::WR_ATOMIC_FETCH_AND_ADD,
            ],
            amnet_ibv_wr_values
        );
        assert_eq!(
            [ffi::SEND_FENCE, ffi::SEND_SIGNALED, ffi::SEND_INLINE],
            amnet_ibv_send_flag_values
        );
        // The trait's access flags and completion values are libibverbs' own.
        assert_eq!(
            [
                Access::LOCAL_WRITE.0,
                Access::REMOTE_WRITE.0,
                Access::REMOTE_READ.0,
                Access::REMOTE_ATOMIC.0,
            ],
            amnet_ibv_access_values
        );
        assert_eq!(ffi::WC_WITH_IMM, amnet_ibv_wc_with_imm);
        assert_eq!(
            [
                WcOpcode::Send,
                WcOpcode::RdmaWrite,
                WcOpcode::RdmaRead,
                WcOpcode::CompareSwap,
                WcOpcode::FetchAdd,
                WcOpcode::Recv,
                WcOpcode::RecvRdmaWithImm,
            ]
            .map(|op| op as u32),
            amnet_ibv_wc_opcode_values
        );
        for (i, v) in amnet_ibv_wc_opcode_values.iter().enumerate() {
            assert_eq!(WcOpcode::from_raw(*v).map(|op| op as u32), Some(*v), "{i}");
        }
        assert_eq!(
            [
                WcStatus::Success,
                WcStatus::LocLenErr,
                WcStatus::LocQpOpErr,
                WcStatus::LocProtErr,
                WcStatus::WrFlushErr,
                WcStatus::RemInvReqErr,
                WcStatus::RemAccessErr,
                WcStatus::RemOpErr,
                WcStatus::RetryExcErr,
                WcStatus::RnrRetryExcErr,
            ]
            .map(WcStatus::raw),
            amnet_ibv_wc_status_values
        );
        assert_eq!(
            [
                ffi::QPS_RESET,
                ffi::QPS_INIT,
                ffi::QPS_RTR,
                ffi::QPS_RTS,
                ffi::QPS_SQD,
                ffi::QPS_SQE,
                ffi::QPS_ERR,
            ],
            amnet_ibv_qp_state_values
        );
        assert_eq!(ffi::PORT_ACTIVE, amnet_ibv_port_active);
        assert_eq!(
            u32::from(ffi::LINK_LAYER_ETHERNET),
            amnet_ibv_link_layer_ethernet
        );
        assert_eq!(ffi::ATOMIC_NONE, amnet_ibv_atomic_none);
    }
}

#[test]
fn completions_convert_immediate_data_from_network_order() {
    let raw = ffi::Wc {
        wr_id: 9,
        status: 0,
        opcode: 128,
        byte_len: 5,
        imm_data: 0x1234_5678u32.to_be(),
        qp_num: 0x77,
        wc_flags: ffi::WC_WITH_IMM,
        ..ffi::Wc::default()
    };
    let wc = completion(&raw).unwrap();
    assert_eq!(wc.imm, Some(0x1234_5678));
    assert_eq!(wc.opcode, WcOpcode::Recv);
    assert_eq!((wc.wr_id, wc.byte_len, wc.qp_num), (9, 5, 0x77));
    let no_imm = completion(&ffi::Wc { wc_flags: 0, ..raw }).unwrap();
    assert_eq!(no_imm.imm, None);
    // An error completion's opcode is undefined: an unknown one reads as Send.
    let flushed = completion(&ffi::Wc {
        status: 5,
        opcode: 0xdead,
        wc_flags: 0,
        ..raw
    })
    .unwrap();
    assert_eq!(
        (flushed.status, flushed.opcode),
        (WcStatus::WrFlushErr, WcOpcode::Send)
    );
    assert!(completion(&ffi::Wc {
        opcode: 0xdead,
        ..raw
    })
    .is_err());
}

#[test]
fn send_requests_translate_every_operation() {
    let sg = [Sge {
        addr: 0x1000,
        len: 8,
        lkey: 3,
    }];
    let wr = |op| SendWr {
        wr_id: 5,
        op,
        sg: &sg,
        signaled: true,
        inline: false,
        fence: false,
    };
    let w = send_wr(&wr(SendOp::SendWithImm { imm: 0xa0b0_c0d0 }), 4).unwrap();
    assert_eq!(w.opcode, ffi::WR_SEND_WITH_IMM);
    assert_eq!(u32::from_be(w.imm_data), 0xa0b0_c0d0);
    assert_eq!(w.send_flags, ffi::SEND_SIGNALED);
    assert_eq!(
        (w.num_sge, w.sg[0].addr, w.sg[0].length, w.sg[0].lkey),
        (1, 0x1000, 8, 3)
    );
    let w = send_wr(
        &wr(SendOp::CompareSwap {
            remote_addr: 0x2000,
            rkey: 7,
            compare: 1,
            swap: 2,
        }),
        4,
    )
    .unwrap();
    assert_eq!(
        (w.opcode, w.remote_addr, w.rkey, w.compare_add, w.swap),
        (ffi::WR_ATOMIC_CMP_AND_SWP, 0x2000, 7, 1, 2)
    );
    let w = send_wr(
        &wr(SendOp::FetchAdd {
            remote_addr: 0x2008,
            rkey: 7,
            add: 3,
        }),
        4,
    )
    .unwrap();
    assert_eq!((w.opcode, w.compare_add), (ffi::WR_ATOMIC_FETCH_AND_ADD, 3));
    let w = send_wr(
        &SendWr {
            inline: true,
            fence: true,
            signaled: false,
            ..wr(SendOp::RdmaWriteWithImm {
                remote_addr: 0x3000,
                rkey: 9,
                imm: 1,
            })
        },
        4,
    )
    .unwrap();
    assert_eq!(w.opcode, ffi::WR_RDMA_WRITE_WITH_IMM);
    assert_eq!(w.send_flags, ffi::SEND_INLINE | ffi::SEND_FENCE);
    assert_eq!(u32::from_be(w.imm_data), 1);
    let five = [sg[0]; 5];
    let e = send_wr(
        &SendWr {
            sg: &five,
            ..wr(SendOp::Send)
        },
        4,
    )
    .unwrap_err();
    assert!(e.contains("5 scatter/gather elements"), "{e}");
}

#[test]
fn open_reports_the_devices_found() {
    let found = match devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("skipped: ibv_get_device_list failed: {e}");
            return;
        }
    };
    let e = RdmaDevice::open(Some("amnet_no_such_hca:1"))
        .unwrap_err()
        .to_string();
    if found.is_empty() {
        assert!(e.contains("ibv_get_device_list found none"), "{e}");
        assert!(e.contains("AMNET_IBV_DEVICE=emu"), "{e}");
        let e = RdmaDevice::open(None).unwrap_err().to_string();
        assert!(e.contains("ibv_get_device_list found none"), "{e}");
    } else {
        assert!(e.contains("amnet_no_such_hca: no such device"), "{e}");
        for name in &found {
            assert!(e.contains(name.as_str()), "{e} should list {name}");
        }
        let e = RdmaDevice::open(Some(&format!("{}:255", found[0])))
            .unwrap_err()
            .to_string();
        assert!(e.contains("port 255"), "{e}");
    }
    let e = RdmaDevice::open(Some("mlx5_0:zero"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a port number"), "{e}");
}

/// The first active device, or `None` after saying on stderr why the test cannot run here.
fn device() -> Option<RdmaDevice> {
    match devices() {
        Ok(d) if d.is_empty() => {
            eprintln!("skipped: no RDMA device (ibv_get_device_list found none)");
            return None;
        }
        Err(e) => {
            eprintln!("skipped: no RDMA device (ibv_get_device_list failed: {e})");
            return None;
        }
        Ok(_) => {}
    }
    match RdmaDevice::open(std::env::var("AMNET_IBV_PORTS").ok().as_deref()) {
        Ok(d) => Some(d),
        Err(e) if e.to_string().contains("no active port") => {
            eprintln!("skipped: no active RDMA port ({e})");
            None
        }
        Err(e) => panic!("opening the RDMA device: {e}"),
    }
}

/// Memory registered with every access, 8-byte aligned.
struct Buf {
    // Deregistered before the memory is freed: fields drop in declaration order.
    mr: RdmaMr,
    mem: Vec<u64>,
}

impl Buf {
    fn new(dev: &RdmaDevice, words: usize) -> Buf {
        let mut mem = vec![0u64; words];
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        // SAFETY: the vector's heap memory does not move and outlives the region (`mr` is
        // declared, so dropped, first); the tests wait for every request naming it.
        let mr = unsafe { dev.reg_mr(mem.as_mut_ptr().cast(), words * 8, access) }.unwrap();
        Buf { mr, mem }
    }

    fn addr(&self, byte: usize) -> u64 {
        self.mr.addr() + byte as u64
    }

    fn sge(&self, byte: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr(byte),
            len,
            lkey: self.mr.lkey(),
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the vector's memory is `mem.len() * 8` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().cast(), self.mem.len() * 8) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_mut_ptr().cast(), self.mem.len() * 8) }
    }
}

/// Two queue pairs of `dev` connected to each other, sharing one completion queue, the
/// second with a shared receive queue when `srq`.
struct Pair {
    cq: RdmaCq,
    srq: Option<RdmaSrq>,
    a: RdmaQp,
    b: RdmaQp,
}

fn pair(dev: &RdmaDevice, srq: bool) -> Pair {
    let cq = dev.create_cq(256).unwrap();
    let srq = srq.then(|| dev.create_srq(64).unwrap());
    let init = QpInit {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_inline: dev.caps().max_inline.min(64),
    };
    let a = dev.create_qp(&cq, &cq, None, &init).unwrap();
    let b = dev.create_qp(&cq, &cq, srq.as_ref(), &init).unwrap();
    assert_eq!(dev.state(&a), QpState::Reset);
    let attr = ConnectAttr::default();
    for q in [&a, &b] {
        dev.to_init(q).unwrap();
        assert_eq!(dev.state(q), QpState::Init);
    }
    let (aa, ba) = (dev.address(&a), dev.address(&b));
    dev.to_rtr(&a, &ba, &attr).unwrap();
    dev.to_rtr(&b, &aa, &attr).unwrap();
    assert_eq!(dev.state(&a), QpState::Rtr);
    dev.to_rts(&a, &attr).unwrap();
    dev.to_rts(&b, &attr).unwrap();
    assert_eq!(dev.state(&b), QpState::Rts);
    Pair { cq, srq, a, b }
}

/// Exactly `n` completions of `cq`, within five seconds.
fn wait(dev: &RdmaDevice, cq: &RdmaCq, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    let mut buf = [Wc::EMPTY; 8];
    while got.len() < n {
        let k = dev.poll_cq(cq, &mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        assert!(
            Instant::now() < until,
            "{} of {n} completions after 5 s: {got:?}",
            got.len()
        );
    }
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(
        dev.poll_cq(cq, &mut buf).unwrap(),
        0,
        "more than {n} completions"
    );
    got.sort_by_key(|w| w.wr_id);
    got
}

fn send(wr_id: u64, op: SendOp, sg: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op,
        sg,
        signaled: true,
        inline: false,
        fence: false,
    }
}

#[test]
fn opens_with_sane_caps() {
    let Some(dev) = device() else { return };
    let names = devices().unwrap();
    assert!(names.iter().any(|n| n == dev.name()), "{names:?}");
    let caps = dev.caps();
    assert!(caps.max_qp_wr >= 32 && caps.max_cqe >= 256, "{caps:?}");
    assert!(caps.max_sge >= 1 && caps.max_sge <= 4, "{caps:?}");
    assert!(caps.max_msg >= 4096, "{caps:?}");
    assert!(dev.port() >= 1);
    assert!(
        dev.is_roce() || dev.lid() != 0,
        "an InfiniBand port without a LID"
    );
    // The port spec naming the opened port opens the same one.
    let again = RdmaDevice::open(Some(&format!("{}:{}", dev.name(), dev.port()))).unwrap();
    assert_eq!((again.name(), again.port()), (dev.name(), dev.port()));
}

#[test]
fn sends_writes_reads_and_immediates_over_loopback() {
    let Some(dev) = device() else { return };
    let p = pair(&dev, false);
    let mut src = Buf::new(&dev, 64);
    let dst = Buf::new(&dev, 64);
    src.bytes_mut()[..11].copy_from_slice(b"hello verbs");
    // Receives on b for a send with immediate data and for a write with immediate data.
    let recvs = [
        RecvWr {
            wr_id: 100,
            sge: dst.sge(0, 64),
        },
        RecvWr {
            wr_id: 101,
            sge: dst.sge(64, 64),
        },
    ];
    // SAFETY: both buffers live until the completions are polled below.
    unsafe { dev.post_recv(&p.b, &recvs).unwrap() };
    let sg_send = [src.sge(0, 11)];
    let sg_write = [src.sge(0, 5)];
    let wrs = [
        send(1, SendOp::SendWithImm { imm: 0xfeed_f00d }, &sg_send),
        send(
            2,
            SendOp::RdmaWriteWithImm {
                remote_addr: dst.addr(256),
                rkey: dst.mr.rkey(),
                imm: 42,
            },
            &sg_write,
        ),
    ];
    // SAFETY: `src` lives until the completions are polled.
    unsafe { dev.post_send(&p.a, &wrs).unwrap() };
    let wcs = wait(&dev, &p.cq, 4);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].opcode), (1, WcOpcode::Send));
    assert_eq!((wcs[1].wr_id, wcs[1].opcode), (2, WcOpcode::RdmaWrite));
    assert_eq!(wcs[0].qp_num, p.a.num());
    let r = &wcs[2];
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm, r.qp_num),
        (100, WcOpcode::Recv, 11, Some(0xfeed_f00d), p.b.num())
    );
    let r = &wcs[3];
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm),
        (101, WcOpcode::RecvRdmaWithImm, 5, Some(42))
    );
    assert_eq!(&dst.bytes()[..11], b"hello verbs");
    assert_eq!(&dst.bytes()[256..261], b"hello");

    // An unsignaled write generates no completion; a signaled read behind it (fenced) sees
    // its bytes.
    let sg_w = [src.sge(0, 11)];
    let sg_r = [src.sge(128, 11)];
    let wrs = [
        SendWr {
            signaled: false,
            ..send(
                3,
                SendOp::RdmaWrite {
                    remote_addr: dst.addr(300),
                    rkey: dst.mr.rkey(),
                },
                &sg_w,
            )
        },
        SendWr {
            fence: true,
            ..send(
                4,
                SendOp::RdmaRead {
                    remote_addr: dst.addr(300),
                    rkey: dst.mr.rkey(),
                },
                &sg_r,
            )
        },
    ];
    // SAFETY: as above.
    unsafe { dev.post_send(&p.a, &wrs).unwrap() };
    let wcs = wait(&dev, &p.cq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
        (4, WcStatus::Success, WcOpcode::RdmaRead, 11)
    );
    assert_eq!(&src.bytes()[128..139], b"hello verbs");

    // An inline send: the payload is copied at post time.
    if dev.caps().max_inline >= 8 {
        let payload = *b"inline!!";
        let sg = [Sge {
            addr: payload.as_ptr() as u64,
            len: 8,
            lkey: 0,
        }];
        let recv = [RecvWr {
            wr_id: 102,
            sge: dst.sge(384, 64),
        }];
        // SAFETY: as above; the inline payload is only read during the call.
        unsafe {
            dev.post_recv(&p.b, &recv).unwrap();
            dev.post_send(
                &p.a,
                &[SendWr {
                    inline: true,
                    ..send(5, SendOp::Send, &sg)
                }],
            )
            .unwrap();
        }
        let wcs = wait(&dev, &p.cq, 2);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (5, WcStatus::Success));
        assert_eq!((wcs[1].wr_id, wcs[1].byte_len, wcs[1].imm), (102, 8, None));
        assert_eq!(&dst.bytes()[384..392], b"inline!!");
    }
}

#[test]
fn atomics_over_loopback() {
    let Some(dev) = device() else { return };
    if !dev.caps().atomics {
        eprintln!("skipped: {} runs no atomics", dev.name());
        return;
    }
    let p = pair(&dev, false);
    let res = Buf::new(&dev, 4);
    let mut target = Buf::new(&dev, 4);
    target.mem[1] = 40;
    let sg0 = [res.sge(0, 8)];
    let sg1 = [res.sge(8, 8)];
    let sg2 = [res.sge(16, 8)];
    let wrs = [
        send(
            1,
            SendOp::FetchAdd {
                remote_addr: target.addr(8),
                rkey: target.mr.rkey(),
                add: 2,
            },
            &sg0,
        ),
        send(
            2,
            SendOp::CompareSwap {
                remote_addr: target.addr(8),
                rkey: target.mr.rkey(),
                compare: 42,
                swap: 7,
            },
            &sg1,
        ),
        send(
            3,
            SendOp::CompareSwap {
                remote_addr: target.addr(8),
                rkey: target.mr.rkey(),
                compare: 42,
                swap: 9,
            },
            &sg2,
        ),
    ];
    // SAFETY: both buffers live until the completions are polled.
    unsafe { dev.post_send(&p.a, &wrs).unwrap() };
    let wcs = wait(&dev, &p.cq, 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(wcs[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(wcs[1].opcode, WcOpcode::CompareSwap);
    assert_eq!(&res.mem[..3], &[40, 42, 7]);
    assert_eq!(target.mem[1], 7);
}

#[test]
fn shared_receive_queue_and_flush_on_error() {
    let Some(dev) = device() else { return };
    let p = pair(&dev, true);
    let src = Buf::new(&dev, 8);
    let dst = Buf::new(&dev, 8);
    let srq = p.srq.as_ref().unwrap();
    let recvs = [
        RecvWr {
            wr_id: 200,
            sge: dst.sge(0, 32),
        },
        RecvWr {
            wr_id: 201,
            sge: dst.sge(32, 32),
        },
    ];
    // SAFETY: `dst` lives until the completions are polled.
    unsafe { dev.post_srq_recv(srq, &recvs).unwrap() };
    // Posting receives to a queue pair that has a shared receive queue is refused.
    // SAFETY: nothing is posted.
    let e = unsafe { dev.post_recv(&p.b, &recvs[..1]) }.unwrap_err();
    assert!(e.to_string().contains("shared receive queue"), "{e}");
    let sg = [src.sge(0, 16)];
    // SAFETY: `src` lives until the completion is polled.
    unsafe { dev.post_send(&p.a, &[send(1, SendOp::Send, &sg)]).unwrap() };
    let wcs = wait(&dev, &p.cq, 2);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
    assert_eq!(
        (wcs[1].wr_id, wcs[1].opcode, wcs[1].byte_len, wcs[1].qp_num),
        (200, WcOpcode::Recv, 16, p.b.num())
    );
    // A receive posted to a queue pair that enters ERR flushes.
    let recv = [RecvWr {
        wr_id: 300,
        sge: dst.sge(0, 16),
    }];
    // SAFETY: `dst` lives until the completion is polled.
    unsafe { dev.post_recv(&p.a, &recv).unwrap() };
    dev.to_err(&p.a).unwrap();
    assert_eq!(dev.state(&p.a), QpState::Err);
    let wcs = wait(&dev, &p.cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (300, WcStatus::WrFlushErr));
}

#[test]
fn bad_remote_key_completes_with_an_access_error() {
    let Some(dev) = device() else { return };
    let p = pair(&dev, false);
    let src = Buf::new(&dev, 8);
    let dst = Buf::new(&dev, 8);
    let sg = [src.sge(0, 8)];
    let wr = send(
        7,
        SendOp::RdmaWrite {
            remote_addr: dst.addr(0),
            rkey: dst.mr.rkey() ^ 0x5a5a_0000,
        },
        &sg,
    );
    // SAFETY: both buffers live until the completion is polled.
    unsafe { dev.post_send(&p.a, &[wr]).unwrap() };
    let wcs = wait(&dev, &p.cq, 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (7, WcStatus::RemAccessErr),
        "{wcs:?}"
    );
    assert_eq!(dev.state(&p.a), QpState::Err);
}

#[test]
fn handles_outlive_their_device_in_any_drop_order() {
    let Some(dev) = device() else { return };
    let Pair { cq, srq, a, b } = pair(&dev, true);
    let buf = Buf::new(&dev, 8);
    drop(dev);
    drop(cq);
    drop(srq);
    drop(a);
    drop(buf);
    drop(b);
}

#[test]
fn address_and_attribute_errors_name_the_queue_pair() {
    let Some(dev) = device() else { return };
    let cq = dev.create_cq(16).unwrap();
    let init = QpInit {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_inline: 0,
    };
    let qp = dev.create_qp(&cq, &cq, None, &init).unwrap();
    dev.to_init(&qp).unwrap();
    let e = dev
        .to_rtr(&qp, b"not an address", &ConnectAttr::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("{:#x}", qp.num())), "{e}");
    assert!(e.contains("not a libibverbs queue pair's address"), "{e}");
    let e = dev
        .create_cq(dev.caps().max_cqe.saturating_add(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most"), "{e}");
}

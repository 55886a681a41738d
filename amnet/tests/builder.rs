//! `amnet::Builder`: values set in code win over the environment, reach the layers above the
//! core, and bad values are `Error::Config` naming the variable.
//!
//! One test in this binary: it changes the process environment.

use std::time::Duration;

use amnet::{Builder, ConduitKind, Error, RankOutcome};

fn config_error(r: amnet::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(Error::Config(m)) => m,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn builder_settings_win_over_the_environment() {
    std::env::set_var("AMNET_SPIN", "5");
    std::env::set_var("AMNET_COLL_CHECK", "0");

    // The environment alone.
    let out = amnet::run_threads(2, |ep| ep.config().spin).unwrap();
    assert!(
        out.iter().all(|o| matches!(o, RankOutcome::Returned(5))),
        "{out:?}"
    );

    // Set in code: wins, and layers above the core read it through the endpoint's source.
    let out = Builder::new()
        .spin(7)
        .coll_check(true)
        .hang_timeout(Duration::from_millis(1500))
        .run_threads(2, |ep| {
            let src = ep.config_source();
            (
                ep.config().spin,
                src.flag(&amnet::config::vars::COLL_CHECK).unwrap(),
                src.seconds(&amnet::config::vars::HANG_TIMEOUT).unwrap(),
            )
        })
        .unwrap();
    for o in &out {
        match o {
            RankOutcome::Returned(v) => {
                assert_eq!(*v, (7, Some(true), Some(Duration::from_millis(1500))))
            }
            other => panic!("{other:?}"),
        }
    }

    // An empty value set in code means the default, whatever the environment says.
    let out = Builder::new()
        .var("AMNET_SPIN", "")
        .run_threads(1, |ep| ep.config().spin)
        .unwrap();
    assert!(
        matches!(out[0], RankOutcome::Returned(2000 | 16)),
        "{out:?}"
    );

    // Bad values name the variable, the value and the expected form.
    let m = config_error(
        Builder::new()
            .var("AMNET_SPIN", "lots")
            .run_threads(1, |_| ()),
    );
    assert!(
        m.contains("AMNET_SPIN=\"lots\"") && m.contains("whole number"),
        "{m}"
    );
    let m = config_error(Builder::new().boot_timeout(Duration::ZERO).init());
    assert!(
        m.contains("AMNET_BOOT_TIMEOUT") && m.contains("positive"),
        "{m}"
    );
    let unknown = format!("AMNET_{}", "NO_SUCH_VARIABLE");
    let m = config_error(Builder::new().var(&unknown, "1").init());
    assert!(m.contains(&unknown), "{m}");

    // The environment's bad values too, through the same rule.
    std::env::set_var("AMNET_SPIN", "-3");
    let m = config_error(amnet::run_threads(1, |_| ()));
    assert!(m.contains("AMNET_SPIN=\"-3\""), "{m}");
    std::env::remove_var("AMNET_SPIN");

    // udp settings made in code reach the udp conduit: authentication, whose tag takes 16
    // bytes of each datagram, with an MTU too small for it.
    let b = Builder::new().udp_auth(true);
    assert_eq!(
        b.source()
            .unwrap()
            .flag(&amnet::config::vars::UDP_AUTH)
            .unwrap(),
        Some(true)
    );
    let m = config_error(
        b.conduit(ConduitKind::Udp)
            .var("AMNET_UDP_MTU", "520")
            .init(),
    );
    assert!(
        m.contains("AMNET_UDP_MTU=520 with AMNET_UDP_AUTH=1") && m.contains("528"),
        "{m}"
    );

    // A conduit this build lacks.
    if !amnet::CONDUITS.contains(&ConduitKind::Mpi) {
        let m = config_error(Builder::new().conduit(ConduitKind::Mpi).init());
        assert!(m.contains("mpi"), "{m}");
    }
    std::env::remove_var("AMNET_COLL_CHECK");
}

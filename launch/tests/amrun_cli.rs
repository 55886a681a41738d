//! `amrun`'s command line: every bad argument is a usage error (exit 2, a message naming it,
//! no panic), before any rank starts.

use std::process::Command;

fn amrun(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_amrun"))
        .args(args)
        .env_remove("AMNET_CONDUIT")
        .env_remove("AMNET_UDP_HOSTS")
        .output()
        .expect("run amrun");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), err)
}

fn usage_error(args: &[&str], names: &str) {
    let (code, err) = amrun(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(err.contains(names), "{args:?} should name {names:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn bad_arguments_are_usage_errors() {
    for v in ["1e300", "inf", "NaN", "0", "-1", "x"] {
        usage_error(&["-n", "2", "--timeout", v, "/bin/true"], "--timeout");
        usage_error(&["-n", "2", "--grace", v, "/bin/true"], "--grace");
    }
    for h in ["", ",,", " , "] {
        usage_error(
            &["--conduit", "udp", "-n", "2", "--hosts", h, "/bin/true"],
            "--hosts",
        );
    }
    usage_error(&["-n", "2", "--hosts", "h1,h2", "/bin/true"], "udp");
    usage_error(&["-n", "0", "/bin/true"], "-n");
    usage_error(&["-n", "2", "--conduit", "tcp", "/bin/true"], "--conduit");
    usage_error(&["-n", "2", "--frobnicate", "/bin/true"], "--frobnicate");
    usage_error(&["-n", "2"], "no program");
}

#[test]
fn a_good_command_line_runs_the_job() {
    let (code, err) = amrun(&["-n", "2", "--timeout", "60", "/bin/true"]);
    assert_eq!(code, 0, "{err}");
}

//! The job's secret reaches remote ranks over the remote-start command's standard input and
//! is never on a command line: a udp job spread over two "hosts" started through stand-ins
//! for ssh that log their command lines, once through one named like ssh (its arguments are
//! joined and run by a shell, as ssh does) and once through one that runs its arguments as
//! they are (as `ip netns exec NS` does).
//!
//! One test in this binary: it sets a variable of the process environment.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use amnet_core::config::Source;
use amnet_core::ConduitKind;
use amnet_launch::{supervise_with_log, LaunchOptions};
use amnet_udp::spawn::UdpJob;

/// A secret in the launcher's own environment, which must not travel anywhere.
const DECOY: &str = "dec0dec0dec0dec0dec0dec0dec0dec0";

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn run_job(dir: &Path, starter: &Path) -> (Vec<String>, String) {
    let mut src = Source::env();
    src.set("AMNET_UDP_HOSTS", "host-a,host-b").unwrap();
    src.set("AMNET_SSH", starter.to_string_lossy()).unwrap();
    src.set("AMNET_UDP_BOOT_ADDR", "127.0.0.1").unwrap();
    let mut job = UdpJob::new(2, &src).unwrap();
    let rank = script(
        dir,
        "rank.sh",
        "printf '%s\\n' \"$AMNET_UDP_SECRET\" > \"$(dirname \"$0\")/secret.$AMNET_RANK\"\n",
    );
    let opts = LaunchOptions {
        conduit: ConduitKind::Udp,
        timeout: Some(Duration::from_secs(60)),
        ..LaunchOptions::new(2, rank.to_string_lossy())
    };
    let mut log = Vec::new();
    let code = supervise_with_log(&mut job, &opts, &mut |m: &str| log.push(m.to_string()));
    assert_eq!(code.unwrap(), 0, "{log:?}");
    let secrets = (0..2)
        .map(|r| {
            let p = dir.join(format!("secret.{r}"));
            let s = std::fs::read_to_string(&p).unwrap();
            std::fs::remove_file(p).unwrap();
            s.trim().to_string()
        })
        .collect();
    let lines = std::fs::read_to_string(dir.join("starter.log")).unwrap();
    std::fs::remove_file(dir.join("starter.log")).unwrap();
    (secrets, lines)
}

#[test]
fn remote_ranks_get_the_secret_on_standard_input_only() {
    std::env::set_var("AMNET_UDP_SECRET", DECOY);
    let dir = std::env::temp_dir().join(format!("amnet-remote-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Log the command line, drop the host, run the rest: through a shell like ssh, or as
    // arguments like `ip netns exec NS`.
    let log = "printf '%s\\n' \"$*\" >> \"$(dirname \"$0\")/starter.log\"\nshift\n";
    let ssh = script(&dir, "fake-ssh", &format!("{log}exec sh -c \"$*\"\n"));
    let exec = script(&dir, "fake-netns-exec", &format!("{log}exec \"$@\"\n"));
    let mut seen = Vec::new();
    for starter in [ssh, exec] {
        let (secrets, lines) = run_job(&dir, &starter);
        assert_eq!(lines.lines().count(), 2, "{lines}");
        for l in lines.lines() {
            assert!(l.contains("AMNET_UDP_BOOT="), "{l}");
            assert!(l.contains("read -r AMNET_UDP_SECRET"), "{l}");
        }
        let s = &secrets[0];
        assert_eq!(secrets[1], *s, "{starter:?}");
        assert!(
            s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()),
            "{s:?}"
        );
        assert_ne!(s, DECOY);
        assert!(!lines.contains(s.as_str()), "{lines}");
        assert!(!lines.contains(DECOY), "{lines}");
        seen.push(s.clone());
    }
    // A fresh secret per job.
    assert_ne!(seen[0], seen[1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

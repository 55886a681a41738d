//! The suite's own settings are checked before it starts: a bad value is exit 2 with a
//! message naming the variable, never a default used in silence.

use std::process::Command;

#[test]
fn bad_suite_settings_stop_the_suite_at_start() {
    for (var, value) in [
        ("AMNET_STORM", "abc"),
        ("AMNET_STORM", "0"),
        ("AMNET_TEST_SEED", "-1"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_amnet-testsuite"))
            .arg("am_short_args")
            .env(var, value)
            .env_remove("AMNET_RANK")
            .env_remove("AMNET_SIZE")
            .output()
            .expect("run the suite");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(
            err.contains(&format!("{var}=\"{value}\"")),
            "{var}={value}: {err}"
        );
    }
}

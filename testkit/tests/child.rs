//! The test child binary refuses what it does not know (and, being an
//! integration test of this package, makes `cargo test --workspace` build
//! the binary for the end-to-end tests that start it).

#[test]
fn unknown_commands_get_the_usage_and_a_failure() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ozone-test-child"))
        .arg("nonsense")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("usage: ozone-test-child wal-writer"), "{err}");
}

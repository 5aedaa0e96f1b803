//! The real binary, run as a user would: a command of it, what it said,
//! and `hookgate check` of a config.

use std::path::Path;
use std::process::{Command, Output};

/// `hookgate`, the binary this test run built.
pub fn hookgate_command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hookgate"))
}

/// What a command printed: its stdout, then its stderr.
pub fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `hookgate check --config DIR/gateway.toml` of `text`: its exit code and
/// what it said.
pub fn check_config(dir: &Path, text: &str) -> (i32, String) {
    let file = dir.join("gateway.toml");
    std::fs::write(&file, text).unwrap();
    let output = hookgate_command()
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    (output.status.code().unwrap_or(-1), said(&output))
}

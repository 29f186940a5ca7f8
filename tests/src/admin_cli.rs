//! `rivulet-admin` run as an operator runs it: the built binary, with the stack's
//! environment and a test's own variables, its output read back.

use serde_json::Value;
use std::process::{Command, ExitStatus, Stdio};

/// What one run of `rivulet-admin` did.
#[derive(Debug)]
pub struct AdminRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl AdminRun {
    /// Stdout as JSON (what every command but `export` prints), failing the test when
    /// the command failed or printed something else.
    pub fn json(&self) -> Value {
        assert!(
            self.status.success(),
            "rivulet-admin failed ({}): {}",
            self.status,
            self.stderr
        );
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("rivulet-admin's output is not JSON ({e}): {}", self.stdout))
    }
}

/// A `rivulet-admin` command with the stack's environment plus `extra`, not started yet.
pub fn admin_command(args: &[&str], extra: &[(&str, &str)]) -> Command {
    crate::load_stack_env();
    let mut cmd = Command::new(crate::binary("rivulet-admin"));
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `rivulet-admin args…` to its end.
pub fn admin_run(args: &[&str], extra: &[(&str, &str)]) -> AdminRun {
    let out = admin_command(args, extra)
        .output()
        .unwrap_or_else(|e| panic!("running rivulet-admin {args:?}: {e}"));
    AdminRun {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `rivulet-admin users show --site N --user-id U`: the person as JSON, or `None` when
/// Rivulet knows nothing of them yet (the command's "no user" error).
pub fn users_show(site_id: u32, user_id: &str) -> Option<Value> {
    let run = admin_run(
        &[
            "users",
            "show",
            "--site",
            &site_id.to_string(),
            "--user-id",
            user_id,
        ],
        &[],
    );
    if !run.status.success() && run.stderr.contains("has no user") {
        return None;
    }
    Some(run.json())
}

/// `rivulet-admin export --site N [--user-id U]` as NDJSON: one JSON object per event.
pub fn export_ndjson(site_id: u32, user_id: Option<&str>) -> Vec<Value> {
    let site = site_id.to_string();
    let mut args = vec!["export", "--site", &site];
    if let Some(u) = user_id {
        args.extend(["--user-id", u]);
    }
    let run = admin_run(&args, &[]);
    assert!(
        run.status.success(),
        "rivulet-admin export failed: {}",
        run.stderr
    );
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

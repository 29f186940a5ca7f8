//! Enrichment data for the reload, install and replay tests: rules files that differ in a
//! known way, a folder of one's own, `rivulet-admin` runs, a one-file HTTP server.

use crate::{binary, env, load_stack_env};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Vivaldi on Windows: `Vivaldi` with uap-core's rules, `Chrome` without Vivaldi's rule.
pub const VIVALDI: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Vivaldi/6.5.3206.48";
/// Chrome on Windows: `Chrome` with both.
pub const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";

/// The rules the stack installed (`UA_REGEXES` of `.stack/env`), with `REVISION` beside.
pub fn shipped_rules() -> PathBuf {
    let path = PathBuf::from(env("UA_REGEXES"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/stack up",
        path.display()
    );
    path
}

/// The revision of the shipped rules.
pub fn shipped_revision() -> String {
    std::fs::read_to_string(shipped_rules().with_file_name("REVISION"))
        .expect("REVISION beside the shipped rules")
        .trim()
        .to_string()
}

/// The shipped rules without the user-agent rules whose regex contains `pattern`: an
/// "older" rules file that passes the known-case checks and names some browsers less.
pub fn rules_without(pattern: &str) -> String {
    let text = std::fs::read_to_string(shipped_rules()).unwrap();
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let parsers = doc["user_agent_parsers"].as_sequence_mut().unwrap();
    let before = parsers.len();
    parsers.retain(|r| !r["regex"].as_str().unwrap_or_default().contains(pattern));
    assert!(parsers.len() < before, "no rule mentions {pattern}");
    serde_yaml_ng::to_string(&doc).unwrap()
}

/// The shipped rules with each of their three lists repeated `times` times: they parse
/// every user agent as the shipped ones do (the first match wins), and take `times` as
/// long to compile.
pub fn rules_repeated(times: usize) -> String {
    let text = std::fs::read_to_string(shipped_rules()).unwrap();
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    for list in ["user_agent_parsers", "os_parsers", "device_parsers"] {
        let rules = doc[list].as_sequence_mut().unwrap();
        let once = rules.clone();
        for _ in 1..times {
            rules.extend(once.iter().cloned());
        }
    }
    serde_yaml_ng::to_string(&doc).unwrap()
}

/// A folder of its own under the stack's folder, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = PathBuf::from(env("RIVULET_STACK_DIR"))
            .join("tmp")
            .join(format!("{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    pub fn str(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }
    /// Writes `bytes` beside `name` and renames it over: how a file is replaced safely.
    pub fn replace(&self, name: &str, bytes: impl AsRef<[u8]>) {
        let temp = self.0.join(format!(".{name}.test-new"));
        std::fs::write(&temp, bytes).unwrap();
        std::fs::rename(&temp, self.0.join(name)).unwrap();
    }
    /// The names of the files in it, sorted.
    pub fn list(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// SHA-256 of a file, hex.
pub fn sha256(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// What one `rivulet-admin` run printed.
pub struct AdminRun {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl AdminRun {
    /// The JSON it printed; fails the test if it failed.
    pub fn json(&self) -> Value {
        assert!(self.ok, "rivulet-admin failed: {}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
    /// Its error message; fails the test if it succeeded.
    pub fn error(&self) -> String {
        assert!(
            !self.ok,
            "rivulet-admin should have failed: {}",
            self.stdout
        );
        assert!(self.stdout.is_empty(), "nothing on stdout when failing");
        self.stderr.clone()
    }
}

/// Runs `rivulet-admin` with the stack's environment plus `extra`.
pub fn run_admin(args: &[&str], extra: &[(&str, &str)]) -> AdminRun {
    load_stack_env();
    let mut cmd = Command::new(binary("rivulet-admin"));
    cmd.args(args);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run rivulet-admin");
    AdminRun {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `run_admin` off the test's runtime, so that what the runtime serves (an HTTP server of
/// the test) keeps answering meanwhile.
pub async fn run_admin_async(args: &[&str], extra: &[(&str, &str)]) -> AdminRun {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let extra: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        run_admin(&args, &extra)
    })
    .await
    .unwrap()
}

/// An HTTP server on 127.0.0.1 that answers `GET /<name>` with the file's bytes and
/// anything else with 404; it runs until the test's runtime ends. Returns its base URL.
pub async fn serve_files(files: Vec<(String, Vec<u8>)>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let files = std::sync::Arc::new(files);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let files = files.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let path = line
                    .split(' ')
                    .nth(1)
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_string();
                let response = match files.iter().find(|(name, _)| *name == path) {
                    Some((_, body)) => {
                        let mut r = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        r.extend_from_slice(body);
                        r
                    }
                    None => {
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = socket.write_all(&response).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    url
}

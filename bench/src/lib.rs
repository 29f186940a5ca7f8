//! What the benchmark tools in `src/bin` share: their command line, the clock, and the
//! local stack's settings (`scripts/bench` runs them; BENCHMARKS.md says what each
//! measures).

use std::path::PathBuf;

/// The command line of a tool (its name first), failing with `usage: {usage}` unless the
/// number of arguments after the name is in `count`.
pub fn tool_args(usage: &str, count: impl std::ops::RangeBounds<usize>) -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    assert!(count.contains(&(args.len() - 1)), "usage: {usage}");
    args
}

/// Milliseconds since the UNIX epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Loads the local stack's `env` (`$RIVULET_STACK_DIR`, default `.stack/`) into this
/// process's environment. A variable already set wins: a caller may point a tool at
/// another database (`import_bench` runs `e2e_latency` on a database of its own).
pub fn load_stack_env() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let dir = std::env::var("RIVULET_STACK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join(".stack"));
    let path = dir.join("env");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}): the local stack is not running: start it with scripts/stack up",
            path.display()
        )
    });
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        if let Some((k, v)) = line.split_once('=') {
            if std::env::var_os(k.trim()).is_none() {
                std::env::set_var(k.trim(), v.trim());
            }
        }
    }
}

/// The stack's ClickHouse, with the schema migrated.
pub async fn db() -> rivulet_common::ch::Db {
    load_stack_env();
    let db = rivulet_common::ch::ChConfig::from_env()
        .expect("ClickHouse settings")
        .connect()
        .await
        .expect("ClickHouse is not reachable: start the local stack with scripts/stack up");
    rivulet_common::schema::migrations::migrate(&db)
        .await
        .expect("migrations");
    db
}

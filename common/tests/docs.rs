//! The documentation against the code, so that neither can change without the other:
//! - every environment variable the code reads has a row in `docs/configuration.md`, and
//!   every row names a variable the code reads;
//! - `unsafe` is allowed only where `docs/design.md` ("Unsafe code") lists it.
//!
//! Reads the repository's files only: no service is needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The crates whose Rust sources are scanned (services, their tests, benches and tools).
const RUST_DIRS: &[&str] = &[
    "admin",
    "bench",
    "common",
    "compat",
    "enricher",
    "enrichment",
    "ingest",
    "tests",
    "fuzz",
];

/// Calls that read one environment variable, its name as their first argument.
const READERS: &[&str] = &[
    "config::string",
    "config::optional",
    "config::parse",
    "config::millis",
    "config::flag",
    "env::var",
    "env::var_os",
    // ChConfig's reader of `auto`/on/off settings (common/src/ch.rs).
    "tri",
];

/// Where a reader may take its name from a variable rather than a literal: the helpers
/// themselves, which are called with literals (and so scanned) elsewhere.
const NAME_FROM_A_VARIABLE_ALLOWED: &[&str] = &[
    // The `config::*` helpers.
    "common/src/config.rs",
    // `tri(name, …)`: called with literal names just below it.
    "common/src/ch.rs",
    // `env(name)`: the tests' reader of `.stack/env` values, all shared variables.
    "tests/src/lib.rs",
    // `load_stack_env`: the benchmark tools' reader of `.stack/env`, whose names are the
    // stack's shared variables (it keeps a value the caller already set).
    "bench/src/lib.rs",
];

/// Variables read by a library on the code's behalf, and the code that makes it read them.
const READ_BY_A_LIBRARY: &[(&str, &str, &str)] = &[
    (
        "RUST_LOG",
        "common/src/telemetry.rs",
        "EnvFilter::try_from_default_env",
    ),
    // tokio's multi-thread runtime, which `#[tokio::main]` builds, reads it.
    (
        "TOKIO_WORKER_THREADS",
        "ingest/src/main.rs",
        "#[tokio::main]\n",
    ),
];

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if !matches!(
                name.to_str(),
                Some("target" | "node_modules" | "artifacts" | "corpus")
            ) {
                files_under(&path, out);
            }
        } else {
            out.push(path);
        }
    }
}

fn rust_sources(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in RUST_DIRS {
        files_under(&root.join(dir), &mut files);
    }
    files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            let rel = p
                .strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{rel}: {e}"));
            (rel, text)
        })
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_var_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// `(names read, where each is read)` and the calls whose name is not a literal.
fn variables_read_by_rust(root: &Path) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let mut read: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut dynamic = Vec::new();
    for (file, text) in rust_sources(root) {
        if file == "common/tests/docs.rs" {
            continue;
        }
        for reader in READERS {
            let call = format!("{reader}(");
            for (at, _) in text.match_indices(&call) {
                if text[..at].chars().next_back().is_some_and(is_ident) {
                    continue; // `matri(` is not `tri(`
                }
                let arg = text[at + call.len()..].trim_start();
                let place = format!("{file}:{}", line_of(&text, at));
                match arg.strip_prefix('"').and_then(|a| a.split_once('"')) {
                    Some((name, _)) if is_var_name(name) => {
                        read.entry(name.to_string()).or_default().push(place);
                    }
                    Some((other, _)) => {
                        panic!("{place}: {reader}({other:?}) is not a variable name")
                    }
                    None if NAME_FROM_A_VARIABLE_ALLOWED.contains(&file.as_str()) => {}
                    None => dynamic.push(place),
                }
            }
        }
    }
    for (name, file, marker) in READ_BY_A_LIBRARY {
        let text =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        if text.contains(marker) {
            read.entry(name.to_string())
                .or_default()
                .push(format!("{file} ({marker:?})"));
        }
    }
    (read, dynamic)
}

/// Variables the scripts read with a default (`${NAME:-…}`, `${NAME:=…}`): their settings.
fn variables_read_by_scripts(root: &Path) -> BTreeMap<String, Vec<String>> {
    let mut files = Vec::new();
    files_under(&root.join("scripts"), &mut files);
    files.push(root.join(".ci/run"));
    let mut read: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in files {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let file = path
            .strip_prefix(root)
            .expect("under the root")
            .display()
            .to_string();
        for (at, _) in text.match_indices("${") {
            let rest = &text[at + 2..];
            let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
            let (name, after) = rest.split_at(end);
            if is_var_name(name) && (after.starts_with(":-") || after.starts_with(":=")) {
                read.entry(name.to_string())
                    .or_default()
                    .push(format!("{file}:{}", line_of(&text, at)));
            }
        }
    }
    read
}

/// The variables `docs/configuration.md` documents: the backquoted names in the first
/// cell of its table rows. Each must have one row only.
fn documented_variables(root: &Path) -> BTreeSet<String> {
    let path = root.join("docs/configuration.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let first = row.split('|').next().unwrap_or_default();
        for name in first.split('`').skip(1).step_by(2) {
            if is_var_name(name) {
                assert!(
                    names.insert(name.to_string()),
                    "docs/configuration.md documents {name} twice"
                );
            }
        }
    }
    names
}

#[test]
fn every_variable_read_is_documented_and_every_one_documented_is_read() {
    let root = repo_root();
    let (mut read, dynamic) = variables_read_by_rust(&root);
    for (name, places) in variables_read_by_scripts(&root) {
        read.entry(name).or_default().extend(places);
    }
    assert!(
        dynamic.is_empty(),
        "these calls read a variable whose name is not a literal, so this test cannot \
         check it is documented; read it with a literal name (or, for a new helper, add \
         the helper to READERS and its file to NAME_FROM_A_VARIABLE_ALLOWED): {dynamic:?}"
    );
    let documented = documented_variables(&root);

    let undocumented: Vec<String> = read
        .iter()
        .filter(|(name, _)| !documented.contains(*name))
        .map(|(name, places)| format!("{name} (read at {})", places.join(", ")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "read by the code but without a row in docs/configuration.md: {undocumented:#?}"
    );

    let unread: Vec<&String> = documented
        .iter()
        .filter(|n| !read.contains_key(*n))
        .collect();
    assert!(
        unread.is_empty(),
        "documented in docs/configuration.md but read nowhere (remove the row, or teach \
         this test how the code reads it): {unread:?}"
    );
}

/// Files allowed to hold `unsafe` code: each is listed in docs/design.md, "Unsafe code".
const UNSAFE_ALLOWED_IN: &[&str] = &["enrichment/src/geo.rs", "ingest/src/producer.rs"];

#[test]
fn unsafe_code_is_allowed_only_where_the_design_lists_it() {
    let root = repo_root();
    // Spelled in two pieces so that this file does not match itself.
    let allow = concat!("allow(unsafe", "_code)");
    let found: BTreeSet<String> = rust_sources(&root)
        .into_iter()
        .filter(|(_, text)| text.contains(allow))
        .map(|(file, _)| file)
        .collect();
    let expected: BTreeSet<String> = UNSAFE_ALLOWED_IN.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        found, expected,
        "unsafe code is allowed in other files than docs/design.md lists; list each site \
         with its reason there (\"Unsafe code\") and in UNSAFE_ALLOWED_IN"
    );

    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let section = design
        .split("\n## Unsafe code\n")
        .nth(1)
        .expect("docs/design.md has an \"Unsafe code\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    for file in UNSAFE_ALLOWED_IN {
        assert!(
            section.contains(&format!("`{file}`")),
            "docs/design.md, \"Unsafe code\", does not list {file}"
        );
    }
}

//! `rivulet-admin install ua-rules|geo`: a file is checked with the enricher's own code
//! and known cases before it replaces the installed one, by rename; a bad file is refused
//! with a clear message and the installed one stays, byte for byte. From paths and from
//! a URL (an HTTP server of the test on 127.0.0.1).

use rivulet_tests::data::*;
use rivulet_tests::repo_root;
use std::path::PathBuf;

fn geo(name: &str) -> PathBuf {
    repo_root().join("testdata/geo").join(name)
}

/// `rivulet-admin install KIND FROM --to TO [FLAGS...]`, with no extra environment.
fn install(kind: &str, from: &str, to: &str, flags: &[&str]) -> AdminRun {
    let mut args = vec!["install", kind, from, "--to", to];
    args.extend_from_slice(flags);
    run_admin(&args, &[])
}

/// Rules cut in the middle of a regex, as an interrupted download leaves them.
fn truncated(rules: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(rules).unwrap();
    let at = text[text.len() / 2..].find("regex: '").unwrap() + text.len() / 2;
    rules[..at + 12].to_vec()
}

/// A folder holding "old" rules (the shipped ones without Vivaldi's) and their REVISION.
fn rules_folder() -> TempDir {
    let dir = TempDir::new("install");
    dir.replace("regexes.yaml", rules_without("Vivaldi"));
    dir.replace("REVISION", "test-old\n");
    dir
}

#[test]
fn rules_are_checked_then_installed_with_their_revision() {
    let dir = rules_folder();
    let target = dir.str("regexes.yaml");
    let shipped = shipped_rules();

    let out = install("ua-rules", shipped.to_str().unwrap(), &target, &[]).json();
    assert_eq!(out["installed"], true, "{out}");
    assert_eq!(out["checked"], "8 known user agents parsed as expected");
    assert_eq!(out["revision"], shipped_revision().as_str(), "{out}");
    assert_eq!(out["sha256"], sha256(&shipped).as_str());
    assert_eq!(sha256(&dir.path("regexes.yaml")), sha256(&shipped));
    assert_eq!(
        std::fs::read_to_string(dir.path("REVISION"))
            .unwrap()
            .trim(),
        shipped_revision()
    );
    assert_eq!(
        dir.list(),
        ["REVISION", "regexes.yaml"],
        "no file left behind"
    );

    // The same content again: nothing to do.
    let again = install("ua-rules", shipped.to_str().unwrap(), &target, &[]).json();
    assert_eq!(again["installed"], false);
    assert!(again["message"]
        .as_str()
        .unwrap()
        .contains("already has this content"));

    // A source without REVISION beside it: the old REVISION goes (it would describe other
    // rules), unless one is given.
    let source = TempDir::new("source");
    source.replace("rules.yaml", rules_without("Vivaldi"));
    let out = install("ua-rules", &source.str("rules.yaml"), &target, &[]).json();
    assert!(
        out["revision"].as_str().unwrap().starts_with("unknown"),
        "{out}"
    );
    assert_eq!(dir.list(), ["regexes.yaml"]);
    install(
        "ua-rules",
        shipped.to_str().unwrap(),
        &target,
        &["--revision", "v1.2.3"],
    )
    .json();
    assert_eq!(
        std::fs::read_to_string(dir.path("REVISION")).unwrap(),
        "v1.2.3\n"
    );

    // Without --to: UA_REGEXES.
    let dir2 = rules_folder();
    let out = run_admin(
        &["install", "ua-rules", shipped.to_str().unwrap()],
        &[("UA_REGEXES", &dir2.str("regexes.yaml"))],
    )
    .json();
    assert_eq!(out["target"], dir2.str("regexes.yaml").as_str());
    assert_eq!(sha256(&dir2.path("regexes.yaml")), sha256(&shipped));
}

#[test]
fn bad_rules_are_refused_and_the_installed_ones_stay() {
    let dir = rules_folder();
    let target = dir.str("regexes.yaml");
    let installed = sha256(&dir.path("regexes.yaml"));
    let good = std::fs::read(shipped_rules()).unwrap();
    let bad = TempDir::new("bad");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated.yaml",
            truncated(&good),
            "are not a valid uap-core regexes.yaml",
        ),
        (
            "empty-lists.yaml",
            b"user_agent_parsers: []\nos_parsers: []\ndevice_parsers: []\n".to_vec(),
            "gives wrong answers for known user agents: Chrome on Windows: expected Chrome 120 / Windows / Desktop, got (none) / (none) / Desktop",
        ),
        (
            "no-firefox.yaml",
            rules_without("Firefox").into_bytes(),
            "gives wrong answers for known user agents: Firefox on Ubuntu: expected Firefox 121 / Ubuntu / Desktop",
        ),
        (
            "bad-regex.yaml",
            b"user_agent_parsers:\n  - regex: '(Chrome/(\\d+'\nos_parsers: []\ndevice_parsers: []\n".to_vec(),
            "are not a valid uap-core regexes.yaml",
        ),
        ("binary.yaml", vec![0xff, 0xfe, 0, 1, 2, 3], "it is not UTF-8 text"),
        ("empty.yaml", Vec::new(), "it is empty"),
        (
            "city.mmdb",
            std::fs::read(geo("GeoLite2-City-Test.mmdb")).unwrap(),
            "it is not UTF-8 text",
        ),
    ];
    for (name, bytes, reason) in cases {
        bad.replace(name, &bytes);
        let err = install("ua-rules", &bad.str(name), &target, &[]).error();
        assert!(
            err.starts_with(&format!(
                "error: refused {} (user-agent rules): ",
                bad.str(name)
            )),
            "{name}: {err}"
        );
        assert!(err.contains(reason), "{name}: {err}");
        assert!(
            err.trim_end().ends_with(&format!("{target} is unchanged")),
            "{name}: {err}"
        );
        assert_eq!(sha256(&dir.path("regexes.yaml")), installed, "{name}");
        assert_eq!(
            std::fs::read_to_string(dir.path("REVISION")).unwrap(),
            "test-old\n"
        );
        assert_eq!(
            dir.list(),
            ["REVISION", "regexes.yaml"],
            "{name}: no file left behind"
        );
    }

    let err = install("ua-rules", "/nonexistent/regexes.yaml", &target, &[]).error();
    assert!(
        err.contains("cannot read /nonexistent/regexes.yaml"),
        "{err}"
    );
    let err = install("ua-rules", &bad.str(""), &target, &[]).error();
    assert!(err.contains("is a folder"), "{err}");
    let err = install(
        "ua-rules",
        shipped_rules().to_str().unwrap(),
        "/nonexistent/dir/regexes.yaml",
        &[],
    )
    .error();
    assert!(err.contains("/nonexistent/dir does not exist"), "{err}");

    // --check-only on a good file writes nothing.
    let out = install(
        "ua-rules",
        shipped_rules().to_str().unwrap(),
        &target,
        &["--check-only"],
    )
    .json();
    assert_eq!(out["installed"], false);
    assert_eq!(sha256(&dir.path("regexes.yaml")), installed);
    assert_eq!(dir.list(), ["REVISION", "regexes.yaml"]);
}

#[test]
fn geo_databases_are_checked_then_installed() {
    let dir = TempDir::new("install-geo");
    dir.replace(
        "city.mmdb",
        std::fs::read(geo("GeoLite2-City-Test.mmdb")).unwrap(),
    );
    let target = dir.str("city.mmdb");
    let installed = sha256(&dir.path("city.mmdb"));

    for (name, reason) in [
        (
            "GeoIP2-City-Test-Broken-Double-Format.mmdb",
            "is corrupt or not a city/country database",
        ),
        ("LICENSE-MIT", "cannot read the geo database"),
    ] {
        let err = install("geo", geo(name).to_str().unwrap(), &target, &[]).error();
        assert!(err.starts_with("error: refused "), "{name}: {err}");
        assert!(err.contains(reason), "{name}: {err}");
        assert!(
            !err.contains(".new-"),
            "{name}: the temporary name leaks: {err}"
        );
        assert!(
            err.trim_end().ends_with(&format!("{target} is unchanged")),
            "{name}: {err}"
        );
        assert_eq!(sha256(&dir.path("city.mmdb")), installed);
        assert_eq!(dir.list(), ["city.mmdb"]);
    }

    // Another city database, then a country database: both answer the known addresses.
    let out = run_admin(
        &[
            "install",
            "geo",
            geo("GeoIP2-City-Test.mmdb").to_str().unwrap(),
        ],
        &[("GEOIP_DB", &target)],
    )
    .json();
    assert_eq!(out["installed"], true, "{out}");
    assert_eq!(out["type"], "GeoIP2-City");
    assert_eq!(
        out["checked"],
        serde_json::json!(["81.2.69.142 → GB", "2001:218::1 → JP"])
    );
    assert_eq!(
        sha256(&dir.path("city.mmdb")),
        sha256(&geo("GeoIP2-City-Test.mmdb"))
    );
    let out = install(
        "geo",
        geo("GeoLite2-Country-Test.mmdb").to_str().unwrap(),
        &target,
        &[],
    )
    .json();
    assert_eq!(out["type"], "GeoLite2-Country");
    assert_eq!(dir.list(), ["city.mmdb"]);

    // GEOIP_DB with two files: which one must be said.
    let err = run_admin(
        &[
            "install",
            "geo",
            geo("GeoIP2-City-Test.mmdb").to_str().unwrap(),
        ],
        &[("GEOIP_DB", &format!("{target},{}", dir.str("v6.mmdb")))],
    )
    .error();
    assert!(err.contains("say which one to replace with --to"), "{err}");
    let err = run_admin(
        &[
            "install",
            "geo",
            geo("GeoIP2-City-Test.mmdb").to_str().unwrap(),
        ],
        &[("GEOIP_DB", "")],
    )
    .error();
    assert!(err.contains("GEOIP_DB is not set"), "{err}");
}

#[tokio::test]
async fn rules_and_databases_are_downloaded_from_a_url() {
    let rules = std::fs::read(shipped_rules()).unwrap();
    let city = std::fs::read(geo("GeoIP2-City-Test.mmdb")).unwrap();
    let broken = std::fs::read(geo("GeoIP2-City-Test-Broken-Double-Format.mmdb")).unwrap();
    let url = serve_files(vec![
        ("regexes.yaml".into(), rules.clone()),
        ("truncated.yaml".into(), truncated(&rules)),
        ("city.mmdb".into(), city.clone()),
        ("broken.mmdb".into(), broken),
    ])
    .await;
    let dir = rules_folder();
    dir.replace(
        "city.mmdb",
        std::fs::read(geo("GeoLite2-City-Test.mmdb")).unwrap(),
    );
    let target = dir.str("regexes.yaml");
    let installed = sha256(&dir.path("regexes.yaml"));

    let err = run_admin_async(
        &[
            "install",
            "ua-rules",
            &format!("{url}/truncated.yaml"),
            "--to",
            &target,
        ],
        &[],
    )
    .await
    .error();
    assert!(
        err.contains("are not a valid uap-core regexes.yaml"),
        "{err}"
    );
    let err = run_admin_async(
        &[
            "install",
            "ua-rules",
            &format!("{url}/missing.yaml"),
            "--to",
            &target,
        ],
        &[],
    )
    .await
    .error();
    assert!(err.contains("the server answered 404 Not Found"), "{err}");
    let closed = format!(
        "http://127.0.0.1:{}/regexes.yaml",
        rivulet_tests::free_port()
    );
    let err = run_admin_async(&["install", "ua-rules", &closed, "--to", &target], &[])
        .await
        .error();
    assert!(
        err.contains("is unreachable") && err.contains("Connection refused"),
        "{err}"
    );
    assert_eq!(sha256(&dir.path("regexes.yaml")), installed);
    assert_eq!(dir.list(), ["REVISION", "city.mmdb", "regexes.yaml"]);

    let out = run_admin_async(
        &[
            "install",
            "ua-rules",
            &format!("{url}/regexes.yaml"),
            "--to",
            &target,
            "--revision",
            "abc123",
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(out["installed"], true, "{out}");
    assert_eq!(out["revision"], "abc123");
    assert_eq!(std::fs::read(dir.path("regexes.yaml")).unwrap(), rules);

    let geo_target = dir.str("city.mmdb");
    let err = run_admin_async(
        &[
            "install",
            "geo",
            &format!("{url}/broken.mmdb"),
            "--to",
            &geo_target,
        ],
        &[],
    )
    .await
    .error();
    assert!(err.contains("is corrupt"), "{err}");
    let out = run_admin_async(
        &[
            "install",
            "geo",
            &format!("{url}/city.mmdb"),
            "--to",
            &geo_target,
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(out["type"], "GeoIP2-City");
    assert_eq!(std::fs::read(dir.path("city.mmdb")).unwrap(), city);
    assert_eq!(dir.list(), ["REVISION", "city.mmdb", "regexes.yaml"]);
}

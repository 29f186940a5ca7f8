//! Accuracy of the device fields against uap-core's reference cases, with the rules Rivulet
//! ships.
//!
//! - `UAP_CORE_TESTS`: a folder with uap-core's `test_ua.yaml`, `test_os.yaml` and
//!   `test_device.yaml` (default: the repository's `testdata/uap-core`).
//! - `UA_REGEXES`: the rules (default: `testdata/uap-core-rules/regexes.yaml`, the pinned
//!   revision `scripts/stack` installs, which `the_test_rules_are_the_pinned_revision`
//!   keeps so).
//!
//! Every case goes through [`DeviceParser::parse`], the call that fills the `events` row,
//! and is compared with what the row would hold for uap-core's answer:
//! - browser family + major: `browser` is the family (`""` for uap's `Other`) and
//!   `browser_version` the major version only (`""` when there is none); minor and patch
//!   are not stored, so not compared. Cases of `test_ua.yaml`.
//! - OS family + major: `operating_system` is the family and `operating_system_version`
//!   holds `major.minor`; its major part is compared. "OS family + major.minor" compares the
//!   whole stored version (patch is not stored). Cases of `test_os.yaml`.
//! - device family: not stored (`device_type` is Rivulet's Desktop/Mobile/Tablet/Bot), but it
//!   is what `device_type` is derived from, so it is measured through
//!   [`DeviceParser::device_family`]. Cases of `test_device.yaml`.
//!
//! Browser family + major, OS family + major and device family must each reach 99.5 %. The
//! figures are printed (run with `--nocapture` to see them) and written to
//! `$RIVULET_STACK_DIR/artifacts/uap-core-accuracy.txt`, and every disagreement to
//! `uap-core-disagreements.tsv` beside it (without `RIVULET_STACK_DIR`, both go to cargo's
//! target tmp dir), one per line: set (`browser`, `os`, `os-minor` when only the minor
//! differs, `device`), user agent, expected, expected version, stored, stored version.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rivulet_enrichment::device::DeviceParser;
use serde::Deserialize;

const BROWSER_MIN: f64 = 99.5;
const OS_MIN: f64 = 99.5;
const DEVICE_MIN: f64 = 99.5;

#[derive(Deserialize)]
struct Cases<T> {
    test_cases: Vec<T>,
}

/// A case of `test_ua.yaml` or `test_os.yaml`.
#[derive(Deserialize)]
struct VersionCase {
    user_agent_string: String,
    family: String,
    major: Option<String>,
    minor: Option<String>,
}

/// A case of `test_device.yaml`.
#[derive(Deserialize)]
struct DeviceCase {
    user_agent_string: String,
    family: String,
}

fn load<T: for<'de> Deserialize<'de>>(dir: &Path, file: &str) -> Vec<T> {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let cases: Cases<T> = serde_yaml_ng::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a uap-core test file: {e}", path.display()));
    assert!(
        !cases.test_cases.is_empty(),
        "{} has no cases",
        path.display()
    );
    cases.test_cases
}

/// What the row stores for a family: uap's `Other` is the empty string.
fn stored_family(family: &str) -> &str {
    if family == "Other" {
        ""
    } else {
        family
    }
}

/// `operating_system_version` for a major and minor: `major.minor`, `major`, or `""`.
fn stored_os_version(major: Option<&str>, minor: Option<&str>) -> String {
    match (major, minor) {
        (Some(major), Some(minor)) if !minor.is_empty() => format!("{major}.{minor}"),
        (Some(major), _) => major.to_string(),
        _ => String::new(),
    }
}

/// The major part of a stored OS version equals `major` (`None`: the version is empty).
fn os_major_agrees(stored: &str, major: Option<&str>) -> bool {
    match major {
        None => stored.is_empty(),
        Some(major) => {
            stored == major
                || stored
                    .strip_prefix(major)
                    .is_some_and(|rest| rest.starts_with('.'))
        }
    }
}

struct Tally {
    name: &'static str,
    agree: usize,
    total: usize,
}

impl Tally {
    fn new(name: &'static str) -> Tally {
        Tally {
            name,
            agree: 0,
            total: 0,
        }
    }
    fn count(&mut self, agrees: bool) {
        self.total += 1;
        self.agree += usize::from(agrees);
    }
    fn percent(&self) -> f64 {
        100.0 * self.agree as f64 / self.total as f64
    }
    fn line(&self) -> String {
        format!(
            "{:<30} {:>7.2} %  ({} of {}, {} differ)",
            self.name,
            self.percent(),
            self.agree,
            self.total,
            self.total - self.agree
        )
    }
}

/// One tab-separated field: user agents may not hold tabs or newlines, but be safe.
fn field(s: &str) -> String {
    s.replace('\t', "\\t").replace('\n', "\\n")
}

/// Where the figures and the disagreements go.
fn artifacts_dir() -> PathBuf {
    match std::env::var_os("RIVULET_STACK_DIR") {
        Some(dir) => PathBuf::from(dir).join("artifacts"),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    }
}

#[test]
fn uap_core_reference_cases_meet_the_accuracy_floor() {
    let dir = std::env::var_os("UAP_CORE_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/uap-core"));
    let rules = std::env::var_os("UA_REGEXES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/uap-core-rules/regexes.yaml")
        });
    let parser = DeviceParser::from_yaml_file(&rules, 0)
        .unwrap_or_else(|e| panic!("{e} (testdata/uap-core-rules, or UA_REGEXES)"));
    let revision = rules
        .parent()
        .map(|d| d.join("REVISION"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map_or_else(|| "unknown".to_string(), |r| r.trim().to_string());

    let mut diffs =
        String::from("set\tuser_agent\texpected\texpected_version\tstored\tstored_version\n");
    let mut browser = Tally::new("browser family + major");
    let mut browser_family = Tally::new("browser family");
    let mut os = Tally::new("OS family + major");
    let mut os_full = Tally::new("OS family + major.minor");
    let mut device = Tally::new("device family (not stored)");

    for case in load::<VersionCase>(&dir, "test_ua.yaml") {
        let got = parser.parse(&case.user_agent_string, None);
        let family = stored_family(&case.family);
        let major = case.major.as_deref().unwrap_or_default();
        let agrees = got.browser == family && got.browser_version == major;
        browser.count(agrees);
        browser_family.count(got.browser == family);
        if !agrees {
            let _ = writeln!(
                diffs,
                "browser\t{}\t{family}\t{major}\t{}\t{}",
                field(&case.user_agent_string),
                got.browser,
                got.browser_version
            );
        }
    }

    for case in load::<VersionCase>(&dir, "test_os.yaml") {
        let got = parser.parse(&case.user_agent_string, None);
        let family = stored_family(&case.family);
        let (major, minor) = if family.is_empty() {
            (None, None) // the row keeps no version without an OS
        } else {
            (case.major.as_deref(), case.minor.as_deref())
        };
        let version = stored_os_version(major, minor);
        let agrees =
            got.operating_system == family && os_major_agrees(&got.operating_system_version, major);
        let agrees_fully =
            got.operating_system == family && got.operating_system_version == version;
        os.count(agrees);
        os_full.count(agrees_fully);
        if !agrees_fully {
            let set = if agrees { "os-minor" } else { "os" };
            let _ = writeln!(
                diffs,
                "{set}\t{}\t{family}\t{version}\t{}\t{}",
                field(&case.user_agent_string),
                got.operating_system,
                got.operating_system_version
            );
        }
    }

    for case in load::<DeviceCase>(&dir, "test_device.yaml") {
        let got = parser.device_family(&case.user_agent_string);
        let family = stored_family(&case.family);
        device.count(got == family);
        if got != family {
            let _ = writeln!(
                diffs,
                "device\t{}\t{family}\t\t{got}\t",
                field(&case.user_agent_string)
            );
        }
    }

    let artifacts = artifacts_dir();
    std::fs::create_dir_all(&artifacts)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", artifacts.display()));
    let report = artifacts.join("uap-core-disagreements.tsv");
    std::fs::write(&report, &diffs)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", report.display()));

    // First line: the three floored figures in one line (scripts/test prints it).
    let mut summary = format!(
        "browser family+major {:.2} %, OS family+major {:.2} %, device family {:.2} % (uap-core rules revision {revision})\n",
        browser.percent(),
        os.percent(),
        device.percent()
    );
    let _ = writeln!(
        summary,
        "uap-core reference cases ({}) with the rules {}:",
        dir.display(),
        rules.display()
    );
    for t in [&browser, &browser_family, &os, &os_full, &device] {
        let _ = writeln!(summary, "  {}", t.line());
    }
    let _ = writeln!(summary, "  disagreements: {}", report.display());
    let figures = artifacts.join("uap-core-accuracy.txt");
    std::fs::write(&figures, &summary)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", figures.display()));
    print!("{summary}");

    let mut failures = Vec::new();
    for (t, min) in [
        (&browser, BROWSER_MIN),
        (&os, OS_MIN),
        (&device, DEVICE_MIN),
    ] {
        if t.percent() < min {
            failures.push(format!("{} is {:.2} %, below {min} %", t.name, t.percent()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} (rules {}, disagreements in {})",
        failures.join("; "),
        rules.display(),
        report.display()
    );
}

/// The rules the enricher's tests read by default (`testdata/uap-core-rules`, written by
/// `scripts/uap-core/install`) are the revision `scripts/versions.env` pins, which
/// `scripts/stack` and the image install.
#[test]
fn the_test_rules_are_the_pinned_revision() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let versions = std::fs::read_to_string(root.join("scripts/versions.env")).unwrap();
    let pinned = versions
        .lines()
        .find_map(|l| l.strip_prefix("UAP_CORE_REVISION="))
        .expect("UAP_CORE_REVISION in scripts/versions.env")
        .trim();
    let ours = std::fs::read_to_string(root.join("testdata/uap-core-rules/REVISION")).unwrap();
    assert_eq!(
        ours.trim(),
        pinned,
        "testdata/uap-core-rules is not the pinned revision: run scripts/uap-core/install testdata/uap-core-rules"
    );
    let rules = std::fs::read_to_string(root.join("testdata/uap-core-rules/regexes.yaml")).unwrap();
    assert!(rules
        .lines()
        .take(3)
        .any(|l| l == format!("# revision {pinned}")));
}

//! Known user agents and addresses that any usable rules file or geo database gets right.
//!
//! A file can load and still be useless (an empty rule list, a database of another
//! kind, a truncated download that happens to parse). Before `rivulet-admin install`
//! puts a file in place, and before a running enricher swaps a reloaded file in, the file
//! must answer these as uap-core's rules (0.18.0 of 2024 and the current ones) and city or
//! country databases do. A failure names each case that went wrong.

use crate::device::DeviceParser;
use crate::error::EnrichmentError;
use crate::geo::GeoDb;
use std::net::IpAddr;

/// A user agent and what the `events` row must say about it.
pub struct UaCase {
    pub name: &'static str,
    pub user_agent: &'static str,
    pub browser: &'static str,
    /// Major version.
    pub browser_version: &'static str,
    pub operating_system: &'static str,
    /// `Desktop`, `Mobile`, `Tablet` or `Bot`.
    pub device_type: &'static str,
}

/// Common browsers and crawlers. Bots are checked by device type only (their browser
/// family differs between uap-core releases).
pub const UA_CASES: &[UaCase] = &[
    UaCase {
        name: "Chrome on Windows",
        user_agent: "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.109 Safari/537.36",
        browser: "Chrome",
        browser_version: "120",
        operating_system: "Windows",
        device_type: "Desktop",
    },
    UaCase {
        name: "Firefox on Ubuntu",
        user_agent: "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
        browser: "Firefox",
        browser_version: "121",
        operating_system: "Ubuntu",
        device_type: "Desktop",
    },
    UaCase {
        name: "Safari on macOS",
        user_agent: "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
        browser: "Safari",
        browser_version: "17",
        operating_system: "Mac OS X",
        device_type: "Desktop",
    },
    UaCase {
        name: "Safari on iPhone",
        user_agent: "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1.2 Mobile/15E148 Safari/604.1",
        browser: "Mobile Safari",
        browser_version: "17",
        operating_system: "iOS",
        device_type: "Mobile",
    },
    UaCase {
        name: "Safari on iPad",
        user_agent: "Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1",
        browser: "Mobile Safari",
        browser_version: "16",
        operating_system: "iOS",
        device_type: "Tablet",
    },
    UaCase {
        name: "Chrome on an Android phone",
        user_agent: "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.144 Mobile Safari/537.36",
        browser: "Chrome Mobile",
        browser_version: "120",
        operating_system: "Android",
        device_type: "Mobile",
    },
    UaCase {
        name: "Googlebot",
        user_agent: "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        browser: "",
        browser_version: "",
        operating_system: "",
        device_type: "Bot",
    },
    UaCase {
        name: "bingbot",
        user_agent: "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
        browser: "",
        browser_version: "",
        operating_system: "",
        device_type: "Bot",
    },
];

/// An address and the country every city or country database places it in.
pub struct GeoCase {
    pub ip: &'static str,
    pub country: &'static str,
}

/// 81.2.69.142 is London in MaxMind's test databases and in DB-IP City Lite;
/// 2001:218::/32 is NTT's, in Japan. The IPv6 case is checked only when an IPv6 file is
/// in the set.
pub const GEO_CASES: &[GeoCase] = &[
    GeoCase {
        ip: "81.2.69.142",
        country: "GB",
    },
    GeoCase {
        ip: "2001:218::1",
        country: "JP",
    },
];

/// Parses every [`UA_CASES`] user agent; `what` names the rules in the error.
pub fn check_device(parser: &DeviceParser, what: &str) -> Result<(), EnrichmentError> {
    let mut failures = Vec::new();
    for case in UA_CASES {
        let d = parser.parse(case.user_agent, None);
        let bot = case.device_type == "Bot";
        let ok = if bot {
            d.is_bot && d.device_type == "Bot"
        } else {
            d.browser == case.browser
                && d.browser_version == case.browser_version
                && d.operating_system == case.operating_system
                && d.device_type == case.device_type
                && !d.is_bot
        };
        if !ok {
            let show = |b: &str, v: &str, os: &str, t: &str| {
                let browser = if v.is_empty() {
                    or_none(b).to_string()
                } else {
                    format!("{b} {v}")
                };
                format!("{browser} / {} / {t}", or_none(os))
            };
            failures.push(format!(
                "{}: expected {}, got {}{}",
                case.name,
                if bot {
                    "a bot".to_string()
                } else {
                    show(
                        case.browser,
                        case.browser_version,
                        case.operating_system,
                        case.device_type,
                    )
                },
                show(
                    &d.browser,
                    &d.browser_version,
                    &d.operating_system,
                    &d.device_type
                ),
                if d.is_bot { " (bot)" } else { "" }
            ));
        }
    }
    done(failures, what, "user agents")
}

/// Looks up every [`GEO_CASES`] address (IPv6 ones only when `db` answers IPv6); `what`
/// names the database in the error. A disabled database has nothing to check.
pub fn check_geo(db: &GeoDb, what: &str) -> Result<(), EnrichmentError> {
    let mut failures = Vec::new();
    if !db.is_disabled() {
        for case in GEO_CASES {
            let ip: IpAddr = case.ip.parse().expect("the cases' addresses are valid");
            if ip.is_ipv6() && !db.answers_ipv6() {
                continue;
            }
            match db.try_lookup(ip) {
                Ok(geo) if geo.country == case.country => {}
                Ok(geo) => {
                    let ipv6_only = ip.is_ipv4()
                        && geo.country.is_empty()
                        && db.files().iter().all(|f| f.ip_version == 6);
                    failures.push(format!(
                        "{}: expected country {}, got {}{}",
                        case.ip,
                        case.country,
                        or_none(&geo.country),
                        if ipv6_only {
                            " (an IPv6 file without IPv4 data is used as the second file of a pair: GEOIP_DB=v4.mmdb,v6.mmdb)"
                        } else {
                            ""
                        }
                    ))
                }
                Err(e) => failures.push(format!("{}: {e}", case.ip)),
            }
        }
    }
    done(failures, what, "addresses")
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "(none)"
    } else {
        s
    }
}

fn done(failures: Vec<String>, what: &str, kind: &'static str) -> Result<(), EnrichmentError> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(EnrichmentError::WrongAnswers {
            what: what.to_string(),
            kind,
            failures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    const DEFAULT_REGEXES: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/uap-core-rules/regexes.yaml"
    );

    fn rules() -> String {
        let path = std::env::var("UA_REGEXES").unwrap_or_else(|_| DEFAULT_REGEXES.to_string());
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (testdata/uap-core-rules, or UA_REGEXES)"))
    }

    fn testdata(name: &str) -> PathBuf {
        let dir = std::env::var("RIVULET_GEO_TESTDATA")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/geo").into());
        Path::new(&dir).join(name)
    }

    /// The cases a refused file got wrong.
    fn failures(err: EnrichmentError) -> Vec<String> {
        match err {
            EnrichmentError::WrongAnswers { failures, .. } => failures,
            other => panic!("not a check's failure: {other}"),
        }
    }

    #[test]
    fn the_shipped_rules_pass() {
        let parser = DeviceParser::from_yaml_str(&rules(), 0).unwrap();
        check_device(&parser, "regexes.yaml").unwrap();
    }

    #[test]
    fn rules_that_load_but_know_nothing_fail_with_every_case_named() {
        let empty = "user_agent_parsers: []\nos_parsers: []\ndevice_parsers: []\n";
        let parser = DeviceParser::from_yaml_str(empty, 0).unwrap();
        let err = check_device(&parser, "empty.yaml").unwrap_err();
        let message = err.to_string();
        assert_eq!(failures(err).len(), UA_CASES.len(), "{message}");
        assert!(message.starts_with("empty.yaml gives wrong answers for known user agents: Chrome on Windows: expected Chrome 120 / Windows / Desktop, got (none) / (none) / Desktop"), "{message}");
        assert!(message.contains("Googlebot: expected a bot"), "{message}");
    }

    #[test]
    fn rules_that_lost_one_family_fail_on_it_only() {
        // Rules without Firefox: the Firefox case fails, the others pass.
        let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rules()).unwrap();
        let parsers = doc["user_agent_parsers"].as_sequence_mut().unwrap();
        parsers.retain(|r| !r["regex"].as_str().unwrap_or_default().contains("Firefox"));
        let yaml = serde_yaml_ng::to_string(&doc).unwrap();
        let parser = DeviceParser::from_yaml_str(&yaml, 0).unwrap();
        let failures = failures(check_device(&parser, "no-firefox.yaml").unwrap_err());
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].starts_with("Firefox on Ubuntu: expected Firefox 121"),
            "{failures:?}"
        );
    }

    #[test]
    fn maxmind_test_databases_pass() {
        for name in [
            "GeoLite2-City-Test.mmdb",
            "GeoIP2-City-Test.mmdb",
            "GeoLite2-Country-Test.mmdb",
        ] {
            let db = GeoDb::open(&[testdata(name)]).unwrap();
            assert!(db.answers_ipv6(), "{name}");
            check_geo(&db, name).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn a_disabled_database_has_nothing_to_check() {
        check_geo(&GeoDb::disabled(), "none").unwrap();
    }
}

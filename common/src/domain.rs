//! What may be one of a site's domains.
//!
//! A site's domains are the browser `Origin`s ingest takes its events from without a key
//! (docs/design.md, "The browser path"), and with `allow_subdomains` every host under them
//! too. So a domain must name hosts that the site's owner alone controls. Refused:
//!
//! - **IP addresses**, v4 (`127.0.0.1`, and any name whose last label is a number, which
//!   browsers read as an address: `127.1`, `0x7f.0.0.1`) and v6 (`::1`, `[::1]`). An
//!   address is not a name anyone registers: a loopback or private one is every visitor's
//!   own machine or network, and a public one serves whatever its host serves.
//! - **`localhost` and names under it** (`app.localhost`): browsers resolve them to the
//!   visitor's own machine (RFC 6761), so any page a visitor runs locally could send events.
//! - **Single labels** (`intranet`, `example`): names resolved within the visitor's own
//!   network or search domain, not registered by anyone; and a top-level domain would
//!   accept every site under it.
//! - **Public suffixes** (`com`, `co.uk`, `github.io`): names under which different owners
//!   register theirs, as Mozilla's Public Suffix List (compiled into the `psl` crate, ICANN
//!   and private sections alike) lists them. Browsers keep cookies from being set for them
//!   for the same reason.
//!
//! Names under TLDs the list does not know (`shop.example`, `app.test`, `printer.local`)
//! are accepted: they have a registrable part, which is all the list can say of them.

use psl::{List, Psl};
use std::net::{Ipv4Addr, Ipv6Addr};

/// `input` as a site's domain (trimmed, lower case, without a trailing dot), or why not,
/// as a sentence that says what to give instead.
pub fn site_domain(input: &str) -> Result<String, String> {
    let d = input.trim().trim_end_matches('.').to_ascii_lowercase();
    if is_ipv6(&d) {
        return Err(format!(
            "{input:?} is an IPv6 address, not a domain name: every page served from it could send the site's events; give the domain the site's pages are served from, such as example.com"
        ));
    }
    if !is_host_name(&d) {
        return Err(format!(
            "{input:?} is not a domain name; give a host name such as example.com, without scheme, port or path"
        ));
    }
    let last = d.rsplit('.').next().unwrap_or_default();
    if ends_in_number(last) {
        let what = if d.parse::<Ipv4Addr>().is_ok() {
            "an IPv4 address"
        } else {
            "read by browsers as an IPv4 address (its last label is a number)"
        };
        return Err(format!(
            "{input:?} is {what}, not a domain name: every page served from it could send the site's events; give the domain the site's pages are served from, such as example.com"
        ));
    }
    if d == "localhost" || d.ends_with(".localhost") {
        return Err(format!(
            "{input:?} is the visitor's own computer to a browser, so any page a visitor runs there could send the site's events; give the domain the site's pages are served from, such as example.com (to test on this machine, map a name such as shop.example to 127.0.0.1 in /etc/hosts)"
        ));
    }
    // A suffix the list names (`com` too) is called one; any other single label is not.
    let listed = List
        .suffix(d.as_bytes())
        .is_some_and(|s| s.is_known() && s.as_bytes() == d.as_bytes());
    if !listed && !d.contains('.') {
        return Err(format!(
            "{input:?} is a single label, which names no one's site (a host on the visitor's own network, or a whole top-level domain); give the full domain name, such as {d}.example.com"
        ));
    }
    if listed || List.domain(d.as_bytes()).is_none() {
        return Err(format!(
            "{input:?} is a public suffix: different owners register their domains under it (Public Suffix List), and any of their pages could send the site's events; give the site's own domain, such as example.{d}"
        ));
    }
    Ok(d)
}

/// Labels of letters, digits and inner hyphens, at most 63 bytes each and 253 in all.
fn is_host_name(d: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    !d.is_empty() && d.len() <= 253 && d.split('.').all(label_ok)
}

/// An IPv6 address, bare (`::1`), in brackets as in a URL (`[::1]`, with or without a
/// port after them) or with a zone (`fe80::1%eth0`).
fn is_ipv6(d: &str) -> bool {
    let inner = match d.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => d,
    };
    let without_zone = inner.split('%').next().unwrap_or_default();
    without_zone.parse::<Ipv6Addr>().is_ok()
}

/// The URL standard's "ends in a number": a last label of decimal digits, or `0x` and hex
/// digits, makes a browser parse the whole host as an IPv4 address.
fn ends_in_number(last: &str) -> bool {
    let hex = last.strip_prefix("0x");
    (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
        || hex.is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::site_domain;

    #[test]
    fn registrable_names_and_their_subdomains_are_accepted() {
        for (given, kept) in [
            ("example.com", "example.com"),
            (" Example.COM. ", "example.com"),
            ("shop.example.com", "shop.example.com"),
            // .example is reserved for documentation and is no public suffix: what the
            // tests and the examples use.
            ("shop.example", "shop.example"),
            ("a.co.uk", "a.co.uk"),
            ("user.github.io", "user.github.io"),
            ("www.ck", "www.ck"),
            ("xn--80ak6aa92e.com", "xn--80ak6aa92e.com"),
            ("app.test", "app.test"),
            ("1e100.net", "1e100.net"),
            ("123.example.com", "123.example.com"),
        ] {
            assert_eq!(site_domain(given).as_deref(), Ok(kept), "{given}");
        }
    }

    #[track_caller]
    fn refused(given: &str, why: &str) -> String {
        let err = site_domain(given).expect_err(given);
        assert!(err.contains(why), "{given}: {err}");
        assert!(err.contains("such as"), "says what to give instead: {err}");
        err
    }

    #[test]
    fn public_suffixes_are_refused_with_an_example_under_them() {
        for suffix in [
            "com",
            "co.uk",
            "github.io",
            "blogspot.com",
            "foo.ck",
            "xn--p1ai",
        ] {
            let err = refused(suffix, "is a public suffix");
            assert!(err.contains(&format!("such as example.{suffix}")), "{err}");
        }
        refused("COM.", "is a public suffix");
    }

    #[test]
    fn single_labels_and_localhost_are_refused() {
        refused("intranet", "is a single label");
        refused("example", "is a single label");
        for local in ["localhost", "LOCALHOST.", "app.localhost", "a.b.localhost"] {
            refused(local, "the visitor's own computer");
        }
    }

    #[test]
    fn ip_addresses_are_refused_in_every_spelling() {
        for v4 in ["127.0.0.1", "10.0.0.1", "8.8.8.8", "255.255.255.255"] {
            refused(v4, "is an IPv4 address");
        }
        // What a browser's URL parser turns into an address: a last label that is a number.
        for v4 in ["127.1", "2130706433", "0x7f.0.0.1", "example.123", "a.0x1f"] {
            refused(v4, "read by browsers as an IPv4 address");
        }
        for v6 in [
            "::1",
            "[::1]",
            "[::1]:3000",
            "2001:db8::1",
            "fe80::1%eth0",
            "::ffff:127.0.0.1",
        ] {
            refused(v6, "is an IPv6 address");
        }
    }

    #[test]
    fn what_is_no_host_name_is_refused_as_before() {
        for bad in [
            "",
            ".",
            "https://x.com",
            "x.com/path",
            "x.com:80",
            "-x.com",
            "a..b",
            "sp ace.com",
            "2001:db8::zz",
        ] {
            refused(bad, "is not a domain name");
        }
    }
}

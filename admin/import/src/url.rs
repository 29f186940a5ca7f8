//! The parts of a page's URL the track API carries, taken apart as a browser's
//! `location` would give them, without decoding or re-encoding anything.

/// `hostname`, `pathname` and `querystring` of an absolute URL.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Parts<'a> {
    /// Without user info or port, lowercase as the URL has it (not changed here).
    pub host: &'a str,
    /// `/` when the URL has no path.
    pub path: &'a str,
    /// With its `?`; empty when there is none (or only a `?`).
    pub query: &'a str,
}

/// Splits an absolute `scheme://authority/path?query#fragment` URL; `None` when the text
/// has no `scheme://` or no host.
pub(crate) fn split(url: &str) -> Option<Parts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return None;
    }
    let rest = rest.split('#').next().unwrap_or_default();
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        // [2001:db8::1]:8080 → 2001:db8::1
        v6.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return None;
    }
    let (path, query) = match after.find('?') {
        Some(i) => after.split_at(i),
        None => (after, ""),
    };
    Some(Parts {
        host,
        path: if path.is_empty() { "/" } else { path },
        query: if query == "?" { "" } else { query },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(host: &'a str, path: &'a str, query: &'a str) -> Option<Parts<'a>> {
        Some(Parts { host, path, query })
    }

    #[test]
    fn splits() {
        assert_eq!(
            split("https://www.example.com/a/b?x=1&y=2#top"),
            parts("www.example.com", "/a/b", "?x=1&y=2")
        );
        assert_eq!(split("https://example.com"), parts("example.com", "/", ""));
        assert_eq!(
            split("http://user:pw@example.com:8080?q"),
            parts("example.com", "/", "?q")
        );
        assert_eq!(
            split("http://[2001:db8::1]:8080/p?"),
            parts("2001:db8::1", "/p", "")
        );
        assert_eq!(
            split("https://example.com/#/settings?x"),
            parts("example.com", "/", "")
        );
        assert_eq!(split("/relative/path"), None);
        assert_eq!(split("https:///path"), None);
        assert_eq!(split("://example.com"), None);
        assert_eq!(split("ht tp://example.com"), None);
    }
}

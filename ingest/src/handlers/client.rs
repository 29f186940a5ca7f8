//! Who sent a request: its address (resolved once, through `TRUSTED_PROXIES`), its user
//! agent, its `Origin` and its Bearer key, borrowed from the request's headers.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use rivulet_common::client_ip::{client_ip, TrustedProxies};
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

/// Who sent a request, from its socket and headers, borrowed from the request.
pub(crate) struct Client<'a> {
    /// The client's address: the peer, or what a trusted proxy says it forwarded. Resolved
    /// once, when the request arrives: the rejection limit, the browser limit and the
    /// messages all use this one.
    pub(super) ip: IpAddr,
    user_agent: Option<&'a str>,
    pub(super) origin: Option<&'a HeaderValue>,
    pub(super) bearer: Option<&'a str>,
}

impl<'a> Client<'a> {
    pub(crate) fn new(peer: SocketAddr, headers: &'a HeaderMap, trusted: &TrustedProxies) -> Self {
        Client {
            ip: client_ip(peer.ip(), forwarded_for(headers).as_deref(), trusted),
            user_agent: headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            origin: headers.get(header::ORIGIN),
            bearer: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim),
        }
    }

    /// The `User-Agent` header, cut to the event field's limit (512 characters); empty
    /// when it is a Rivulet server SDK's own, which names the SDK, not the visitor.
    pub(super) fn user_agent(&self) -> Cow<'a, str> {
        let ua = self
            .user_agent
            .filter(|ua| !is_server_sdk(ua))
            .unwrap_or_default();
        match ua.char_indices().nth(512) {
            None => Cow::Borrowed(ua),
            Some((end, _)) => Cow::Borrowed(&ua[..end]),
        }
    }

    /// The host of the `Origin` header (`https://Shop.Example:8443` → `shop.example`).
    pub(super) fn origin_host(&self) -> Option<String> {
        origin_host(self.origin?.to_str().ok()?)
    }
}

/// The host of an `Origin` value, lowercase, without scheme or port; `None` for `null`
/// and anything that is not `scheme://host[:port]`.
pub(super) fn origin_host(origin: &str) -> Option<String> {
    let (_, rest) = origin.split_once("://")?;
    let host = match rest.strip_prefix('[') {
        // An IPv6 literal: `[::1]:8080`.
        Some(v6) => v6.split_once(']')?.0,
        None => rest.split(':').next()?,
    };
    (!host.is_empty() && !host.contains('/')).then(|| host.to_ascii_lowercase())
}

/// Rivulet's server SDKs send `User-Agent: rivulet-<language>/<version>` (the Node.js SDK:
/// `rivulet-node/0.2.0`). An event they send without a `user_agent` of its own is stored
/// with none: empty device fields, not "Other", and not a bot.
const SERVER_SDK_AGENT_PREFIX: &str = "rivulet-";

fn is_server_sdk(user_agent: &str) -> bool {
    user_agent
        .get(..SERVER_SDK_AGENT_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(SERVER_SDK_AGENT_PREFIX))
}

/// `X-Forwarded-For` as one list: a header sent on several lines is their values joined
/// in order (RFC 9110 §5.3), since a proxy may add its hop as a line of its own, and the
/// rightmost hops are the ones to believe. A line that is not text makes it absent.
fn forwarded_for(headers: &HeaderMap) -> Option<Cow<'_, str>> {
    let mut lines = headers
        .get_all(HeaderName::from_static("x-forwarded-for"))
        .iter();
    let first = lines.next()?.to_str().ok()?;
    let mut joined: Option<String> = None;
    for line in lines {
        let all = joined.get_or_insert_with(|| first.to_string());
        all.push_str(", ");
        all.push_str(line.to_str().ok()?);
    }
    Some(joined.map_or(Cow::Borrowed(first), Cow::Owned))
}

#[cfg(test)]
mod tests {
    use super::{forwarded_for, origin_host, Client};
    use axum::http::{HeaderMap, HeaderValue};
    use rivulet_common::client_ip::TrustedProxies;

    #[test]
    fn a_server_sdks_own_user_agent_is_not_the_visitors() {
        let peer = "127.0.0.1:1".parse().unwrap();
        let mut h = HeaderMap::new();
        for (header, stored) in [
            ("rivulet-node/0.2.0", ""),
            ("Rivulet-Python/1.0", ""),
            (
                "Mozilla/5.0 (X11; Linux x86_64) rivulet-node/1",
                "Mozilla/5.0 (X11; Linux x86_64) rivulet-node/1",
            ),
            ("curl/8.5.0", "curl/8.5.0"),
        ] {
            h.insert("user-agent", HeaderValue::from_static(header));
            assert_eq!(
                Client::new(peer, &h, &TrustedProxies::default()).user_agent(),
                stored,
                "{header}"
            );
        }
    }

    #[test]
    fn origin_hosts() {
        for (origin, host) in [
            ("https://Shop.Example", Some("shop.example")),
            ("http://shop.example:8080", Some("shop.example")),
            ("https://[::1]:3000", Some("::1")),
            ("null", None),
            ("shop.example", None),
            ("https://", None),
        ] {
            assert_eq!(origin_host(origin).as_deref(), host, "{origin}");
        }
    }

    #[test]
    fn forwarded_for_lines_are_one_list_in_order() {
        let mut h = HeaderMap::new();
        assert_eq!(forwarded_for(&h), None);
        h.append("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        assert_eq!(forwarded_for(&h).as_deref(), Some("6.6.6.6"));
        h.append(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.7, 10.0.0.2"),
        );
        assert_eq!(
            forwarded_for(&h).as_deref(),
            Some("6.6.6.6, 203.0.113.7, 10.0.0.2")
        );
        h.append("x-forwarded-for", HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(forwarded_for(&h), None);
    }
}

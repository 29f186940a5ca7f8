//! Which IP an event is attributed to: `ip_address` when the caller gives one (it holds
//! a key), else the TCP peer, except that a peer in `TRUSTED_PROXIES` is replaced by the
//! rightmost address in `X-Forwarded-For` that is not itself a trusted proxy.

use std::net::IpAddr;

#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// `"10.0.0.0/8, 127.0.0.1, ::1"`; empty means no proxy is trusted.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut nets = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (addr, bits) = match part.split_once('/') {
                Some((a, b)) => (a, Some(b)),
                None => (part, None),
            };
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| format!("{part:?} is not an IP or CIDR"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                None => max,
                Some(b) => b
                    .parse::<u8>()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| format!("{part:?} has a bad prefix length"))?,
            };
            nets.push((ip, bits));
        }
        Ok(TrustedProxies(nets))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0
            .iter()
            .any(|(net, bits)| match (canonical(*net), ip) {
                (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), *bits),
                (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), *bits),
                _ => false,
            })
    }
}

/// IPv4-mapped IPv6 peers (`::ffff:1.2.3.4`) compare as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let full = (bits / 8) as usize;
    if a[..full] != b[..full] {
        return false;
    }
    let rest = bits % 8;
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[full] & mask == b[full] & mask
    }
}

/// The address a client is counted as, for limits per client: IPv4 as is, IPv6 by its
/// /64, which one host usually holds whole.
pub fn counted_as(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// The client IP for an event without `ip_address`.
pub fn client_ip(peer: IpAddr, forwarded_for: Option<&str>, trusted: &TrustedProxies) -> IpAddr {
    let peer = canonical(peer);
    if !trusted.contains(peer) {
        return peer;
    }
    let Some(header) = forwarded_for else {
        return peer;
    };
    for hop in header.rsplit(',').map(str::trim) {
        match hop.parse::<IpAddr>() {
            Ok(ip) if trusted.contains(ip) => continue,
            Ok(ip) => return canonical(ip),
            // A hop we cannot read: stop trusting the header beyond it.
            Err(_) => return peer,
        }
    }
    peer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peer_ignores_header() {
        let t = TrustedProxies::parse("10.0.0.0/8").unwrap();
        assert_eq!(
            client_ip(ip("203.0.113.9"), Some("1.2.3.4"), &t),
            ip("203.0.113.9")
        );
        let none = TrustedProxies::parse("").unwrap();
        assert_eq!(
            client_ip(ip("10.0.0.1"), Some("1.2.3.4"), &none),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn trusted_peer_uses_rightmost_untrusted_hop() {
        let t = TrustedProxies::parse("10.0.0.0/8, 192.168.1.1").unwrap();
        assert_eq!(
            client_ip(ip("10.1.2.3"), Some("6.6.6.6, 1.2.3.4, 192.168.1.1"), &t),
            ip("1.2.3.4")
        );
        assert_eq!(
            client_ip(ip("10.1.2.3"), Some("10.9.9.9"), &t),
            ip("10.1.2.3")
        );
        assert_eq!(client_ip(ip("10.1.2.3"), None, &t), ip("10.1.2.3"));
        assert_eq!(
            client_ip(ip("10.1.2.3"), Some("junk, 1.2.3.4"), &t),
            ip("1.2.3.4")
        );
        assert_eq!(
            client_ip(ip("10.1.2.3"), Some("1.2.3.4, junk"), &t),
            ip("10.1.2.3")
        );
    }

    #[test]
    fn cidr_and_v6() {
        let t = TrustedProxies::parse("fd00::/8, 127.0.0.1").unwrap();
        assert!(t.contains(ip("fd12::1")));
        assert!(!t.contains(ip("fe80::1")));
        assert!(t.contains(ip("::ffff:127.0.0.1")));
        assert!(TrustedProxies::parse("1.2.3.4/33").is_err());
        assert!(TrustedProxies::parse("nope").is_err());
    }
}

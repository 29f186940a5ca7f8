//! Marketing channel of a visit, from the referrer, the page's hostname and its query
//! string.
//!
//! Rules, first match wins (a simplified GA4 default channel grouping):
//! 1. `utm_medium` when it is recognised:
//!    - paid (`cpc`, `ppc`, `cpm`, any `cp…`, anything containing `paid`, `retargeting`,
//!      `display`, `banner`, `ads`) → **Paid Social** when the context is social
//!      (`utm_source` or the referrer is a social network, the medium mentions `social`,
//!      or there is an `fbclid`), else **Paid Search** (the bucket for paid non-social
//!      traffic, display included: there is no "Display" channel);
//!    - `email`, `e-mail`, `newsletter` → **Email**;
//!    - containing `social`, or `sm` → **Organic Social**;
//!    - `organic` → **Organic Social** when the source is social, else **Organic Search**;
//!    - `referral` → **Referral**.
//! 2. Click ids: `gclid`, `gbraid`, `wbraid`, `msclkid`, `yclid`, `dclid` → **Paid
//!    Search**; `ttclid`, `li_fat_id`, `twclid`, `sccid`, `epik` → **Paid Social**;
//!    `fbclid` alone → **Organic Social** (Facebook adds it to every outbound link,
//!    organic shares included; it only means paid together with a paid `utm_medium`).
//! 3. `utm_source` alone naming an email tool, a search engine or a social network.
//! 4. The referrer: none → **Direct** (**Referral** if the URL had other `utm_` tags);
//!    the site itself or a subdomain of it → **Internal**; a webmail → **Email**; a
//!    search engine → **Organic Search**; a social network → **Organic Social**;
//!    anything else → **Referral**.
//!
//! Campaign tags win over a self-referral (an internal link tagged with UTM counts as the
//! campaign). Hosts are compared without a leading `www.`, so `www.example.com` and
//! `example.com` are the same site. Android app referrers (`android-app://com.google.android.gm`)
//! are recognised for the main apps.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    Direct,
    OrganicSearch,
    PaidSearch,
    OrganicSocial,
    PaidSocial,
    Email,
    Referral,
    Internal,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Direct => "Direct",
            Channel::OrganicSearch => "Organic Search",
            Channel::PaidSearch => "Paid Search",
            Channel::OrganicSocial => "Organic Social",
            Channel::PaidSocial => "Paid Social",
            Channel::Email => "Email",
            Channel::Referral => "Referral",
            Channel::Internal => "Internal",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The channel of a page view; see the module documentation for the rules.
pub fn classify(
    referrer: Option<&str>,
    hostname: Option<&str>,
    querystring: Option<&str>,
) -> Channel {
    let tags = Tags::parse(querystring.unwrap_or_default());
    let referrer = referrer.and_then(host_of_url);
    let referrer_kind = referrer.as_deref().map_or(Kind::Other, host_kind);
    let source_kind = tags.source.as_deref().map_or(Kind::Other, source_kind);

    if let Some(medium) = tags.medium.as_deref() {
        let social = source_kind == Kind::Social
            || referrer_kind == Kind::Social
            || medium.contains("social")
            || tags.fbclid;
        if is_paid_medium(medium) {
            return if social {
                Channel::PaidSocial
            } else {
                Channel::PaidSearch
            };
        }
        match medium {
            "email" | "e-mail" | "e_mail" | "e mail" | "newsletter" => return Channel::Email,
            "sm" => return Channel::OrganicSocial,
            m if m.contains("social") => return Channel::OrganicSocial,
            "organic" if source_kind == Kind::Social => return Channel::OrganicSocial,
            "organic" => return Channel::OrganicSearch,
            "referral" => return Channel::Referral,
            _ => {}
        }
    }
    if tags.paid_search_click {
        return Channel::PaidSearch;
    }
    if tags.paid_social_click {
        return Channel::PaidSocial;
    }
    if tags.fbclid {
        return Channel::OrganicSocial;
    }
    match source_kind {
        Kind::Email => return Channel::Email,
        Kind::Search => return Channel::OrganicSearch,
        Kind::Social => return Channel::OrganicSocial,
        Kind::Other => {}
    }
    let Some(referrer) = referrer else {
        return if tags.any_utm {
            Channel::Referral
        } else {
            Channel::Direct
        };
    };
    if hostname
        .and_then(host_of)
        .is_some_and(|own| within(&referrer, &own))
    {
        return Channel::Internal;
    }
    match referrer_kind {
        Kind::Email => Channel::Email,
        Kind::Search => Channel::OrganicSearch,
        Kind::Social => Channel::OrganicSocial,
        Kind::Other => Channel::Referral,
    }
}

fn is_paid_medium(medium: &str) -> bool {
    medium.starts_with("cp")
        || medium.contains("paid")
        || matches!(
            medium,
            "ppc" | "retargeting" | "remarketing" | "display" | "banner" | "ads" | "ad"
        )
}

/// The campaign tags of a query string. Values are percent-decoded, trimmed, lower case.
#[derive(Default)]
struct Tags {
    source: Option<String>,
    medium: Option<String>,
    any_utm: bool,
    paid_search_click: bool,
    paid_social_click: bool,
    fbclid: bool,
}

impl Tags {
    fn parse(querystring: &str) -> Tags {
        let mut tags = Tags::default();
        let qs = querystring.trim_start_matches('?');
        for pair in qs.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = key.to_ascii_lowercase();
            let value = || Some(decode(value)).filter(|v| !v.is_empty());
            match key.as_str() {
                "utm_source" => tags.source = value(),
                "utm_medium" => tags.medium = value(),
                "gclid" | "gbraid" | "wbraid" | "msclkid" | "yclid" | "dclid" => {
                    tags.paid_search_click = true
                }
                "ttclid" | "li_fat_id" | "twclid" | "sccid" | "epik" => {
                    tags.paid_social_click = true
                }
                "fbclid" => tags.fbclid = true,
                _ => {}
            }
            tags.any_utm |= key.starts_with("utm_");
        }
        tags
    }
}

/// `application/x-www-form-urlencoded` value → trimmed lower-case text.
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).trim().to_lowercase()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// The host of a URL (or of a bare host name with a dot), normalised by [`host_of`].
/// `None` when there is no usable host (`about:blank`, empty, garbage).
fn host_of_url(url: &str) -> Option<String> {
    let url = url.trim();
    let rest = match url.find("://") {
        Some(i) => {
            let scheme = &url[..i];
            if scheme.is_empty()
                || !scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
            {
                return None;
            }
            &url[i + 3..]
        }
        None => match url.strip_prefix("//") {
            Some(rest) => rest,
            // A bare host name: without a dot it is more likely `about:blank` or junk.
            None if url
                .split(['/', ':'])
                .next()
                .is_some_and(|h| h.contains('.')) =>
            {
                url
            }
            None => return None,
        },
    };
    host_of(rest.split(['/', '?', '#']).next().unwrap_or_default())
}

/// `[user@]host[:port]` → the host in lower case, without port, trailing dot or leading
/// `www.`.
fn host_of(authority: &str) -> Option<String> {
    let host_port = authority.trim().rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let host = host
        .strip_prefix("www.")
        .map(str::to_string)
        .unwrap_or(host);
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b));
    valid.then_some(host)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Search,
    Social,
    Email,
    Other,
}

/// `host` is `domain` or one of its subdomains.
fn within(host: &str, domain: &str) -> bool {
    host.strip_suffix(domain)
        .is_some_and(|rest| rest.is_empty() || rest.ends_with('.'))
}

/// `host` is `brand.<TLD>` for any country TLD: `google.com`, `google.co.uk`, `google.de`.
fn brand_domain(host: &str, brand: &str) -> bool {
    host.strip_prefix(brand)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|tld| {
            let labels: Vec<&str> = tld.split('.').collect();
            labels.len() <= 2 && labels.iter().all(|l| (2..=3).contains(&l.len()))
        })
}

const EMAIL_HOSTS: &[&str] = &[
    "outlook.live.com",
    "outlook.office.com",
    "outlook.office365.com",
    "app.fastmail.com",
    "e.mail.ru",
    "com.google.android.gm",
    "com.microsoft.office.outlook",
    "com.yahoo.mobile.client.android.mail",
];

const SEARCH_HOSTS: &[&str] = &[
    "bing.com",
    "duckduckgo.com",
    "search.yahoo.com",
    "search.yahoo.co.jp",
    "baidu.com",
    "ya.ru",
    "ecosia.org",
    "qwant.com",
    "startpage.com",
    "search.brave.com",
    "naver.com",
    "search.seznam.cz",
    "seznam.cz",
    "sogou.com",
    "so.com",
    "ask.com",
    "search.aol.com",
    "kagi.com",
    "search.daum.net",
    "coccoc.com",
    "mojeek.com",
    "go.mail.ru",
    "com.google.android.googlequicksearchbox",
];

const SOCIAL_HOSTS: &[&str] = &[
    "facebook.com",
    "fb.com",
    "fb.me",
    "messenger.com",
    "instagram.com",
    "t.co",
    "twitter.com",
    "x.com",
    "linkedin.com",
    "lnkd.in",
    "reddit.com",
    "redd.it",
    "pinterest.com",
    "pin.it",
    "youtube.com",
    "youtu.be",
    "tiktok.com",
    "tumblr.com",
    "vk.com",
    "ok.ru",
    "snapchat.com",
    "quora.com",
    "threads.net",
    "threads.com",
    "bsky.app",
    "mastodon.social",
    "news.ycombinator.com",
    "weibo.com",
    "t.me",
    "telegram.org",
    "whatsapp.com",
    "wa.me",
    "discord.com",
    "discordapp.com",
    "twitch.tv",
    "line.me",
    "xing.com",
    "com.facebook.katana",
    "com.facebook.orca",
    "com.instagram.android",
    "com.twitter.android",
    "com.linkedin.android",
    "com.reddit.frontpage",
    "com.pinterest",
    "com.zhiliaoapp.musically",
];

fn host_kind(host: &str) -> Kind {
    let first_label = host.split('.').next().unwrap_or_default();
    let webmail =
        matches!(first_label, "mail" | "webmail" | "email") && host.matches('.').count() >= 2;
    if webmail || EMAIL_HOSTS.iter().any(|d| within(host, d)) {
        Kind::Email
    } else if brand_domain(host, "google")
        || brand_domain(host, "yandex")
        || SEARCH_HOSTS.iter().any(|d| within(host, d))
    {
        Kind::Search
    } else if brand_domain(host, "pinterest") || SOCIAL_HOSTS.iter().any(|d| within(host, d)) {
        Kind::Social
    } else {
        Kind::Other
    }
}

/// Kind of a `utm_source` value: a host (`news.ycombinator.com`) or a name (`facebook`).
fn source_kind(source: &str) -> Kind {
    if source.contains('.') {
        return host_of_url(source).map_or(Kind::Other, |h| host_kind(&h));
    }
    match source {
        "email" | "e-mail" | "newsletter" | "mailchimp" | "klaviyo" | "sendgrid" | "brevo"
        | "sendinblue" | "substack" | "mailerlite" | "convertkit" | "gmail" | "outlook" => {
            Kind::Email
        }
        "google" | "bing" | "yahoo" | "duckduckgo" | "baidu" | "yandex" | "ecosia" | "qwant"
        | "naver" | "brave" | "startpage" | "seznam" | "sogou" | "ask" | "kagi" => Kind::Search,
        "facebook" | "fb" | "instagram" | "ig" | "meta" | "twitter" | "x" | "linkedin"
        | "reddit" | "tiktok" | "pinterest" | "youtube" | "snapchat" | "threads" | "bluesky"
        | "mastodon" | "tumblr" | "vk" | "quora" | "whatsapp" | "telegram" | "discord"
        | "hackernews" | "twitch" => Kind::Social,
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Channel::*;

    /// referrer, hostname, querystring → channel
    type Case = (
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Channel,
    );

    #[test]
    fn rules_table() {
        let site = Some("example.com");
        #[rustfmt::skip]
        let cases: &[Case] = &[
            (None, site, None, Direct),
            (Some(""), site, Some(""), Direct),
            (Some("about:blank"), site, None, Direct),
            (None, site, Some("?page=2&sort=asc"), Direct),
            (Some("https://www.google.com/"), site, None, OrganicSearch),
            (Some("https://www.google.co.uk/search?q=x"), site, None, OrganicSearch),
            (Some("https://duckduckgo.com/"), site, None, OrganicSearch),
            (Some("https://uk.search.yahoo.com/search?p=x"), site, None, OrganicSearch),
            (Some("https://yandex.ru/"), site, None, OrganicSearch),
            (Some("android-app://com.google.android.googlequicksearchbox/"), site, None, OrganicSearch),
            (Some("https://l.facebook.com/l.php?u=x"), site, None, OrganicSocial),
            (Some("https://t.co/abc"), site, None, OrganicSocial),
            (Some("https://news.ycombinator.com/item?id=1"), site, None, OrganicSocial),
            (Some("https://www.linkedin.com/feed/"), site, None, OrganicSocial),
            (Some("https://mail.google.com/mail/u/0/"), site, None, Email),
            (Some("https://outlook.live.com/"), site, None, Email),
            (Some("android-app://com.google.android.gm/"), site, None, Email),
            (Some("https://blog.other.org/post"), site, None, Referral),
            (Some("https://docs.google.com/document/d/1"), site, None, Referral),
            (Some("https://example.com/pricing"), site, None, Internal),
            (Some("https://www.example.com:443/"), Some("example.com"), None, Internal),
            (Some("https://shop.example.com/cart"), site, None, Internal),
            (Some("https://notexample.com/"), site, None, Referral),
            (Some("http://localhost:3000/a"), Some("localhost"), None, Internal),
            (Some("https://www.google.com/"), site, Some("utm_source=google&utm_medium=cpc"), PaidSearch),
            (None, site, Some("gclid=abc123"), PaidSearch),
            (None, site, Some("msclkid=abc123"), PaidSearch),
            (None, site, Some("utm_source=facebook&utm_medium=cpc"), PaidSocial),
            (Some("https://l.instagram.com/"), site, Some("utm_medium=paid"), PaidSocial),
            (None, site, Some("utm_source=linkedin&utm_medium=paid_social"), PaidSocial),
            (None, site, Some("fbclid=IwAR0"), OrganicSocial),
            (None, site, Some("fbclid=IwAR0&utm_medium=cpc"), PaidSocial),
            (None, site, Some("ttclid=x"), PaidSocial),
            (None, site, Some("utm_source=newsletter&utm_medium=email"), Email),
            (None, site, Some("utm_source=Mailchimp"), Email),
            (None, site, Some("utm_medium=E-Mail"), Email),
            (None, site, Some("utm_source=twitter&utm_medium=social"), OrganicSocial),
            (None, site, Some("utm_source=bing&utm_medium=organic"), OrganicSearch),
            (None, site, Some("utm_source=news.ycombinator.com"), OrganicSocial),
            (None, site, Some("utm_campaign=spring&utm_source=partner"), Referral),
            (Some("https://example.com/"), site, Some("utm_medium=cpc&utm_source=google"), PaidSearch),
            (Some("https://example.com/"), site, Some("utm_campaign=banner-home"), Internal),
            (None, site, Some("utm_medium=paid%20search&utm_source=google"), PaidSearch),
            (None, site, Some("utm_medium=social+media"), OrganicSocial),
        ];
        for (referrer, hostname, qs, expected) in cases {
            assert_eq!(
                classify(*referrer, *hostname, *qs),
                *expected,
                "referrer {referrer:?}, hostname {hostname:?}, querystring {qs:?}"
            );
        }
    }

    #[test]
    fn names_are_the_stored_values() {
        let names: Vec<&str> = [
            Direct,
            OrganicSearch,
            PaidSearch,
            OrganicSocial,
            PaidSocial,
            Email,
            Referral,
            Internal,
        ]
        .iter()
        .map(|c| c.as_str())
        .collect();
        assert_eq!(
            names,
            [
                "Direct",
                "Organic Search",
                "Paid Search",
                "Organic Social",
                "Paid Social",
                "Email",
                "Referral",
                "Internal"
            ]
        );
        assert_eq!(PaidSocial.to_string(), "Paid Social");
    }

    #[test]
    fn host_extraction() {
        assert_eq!(
            host_of_url("HTTPS://User@WWW.Example.COM.:8080/x?y#z").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            host_of_url("//cdn.example.com/a").as_deref(),
            Some("cdn.example.com")
        );
        assert_eq!(host_of_url("example.com").as_deref(), Some("example.com"));
        assert_eq!(
            host_of_url("http://[2001:db8::1]:80/").as_deref(),
            Some("2001:db8::1")
        );
        assert_eq!(host_of_url("not a url"), None);
        assert_eq!(host_of_url("https:///path"), None);
        assert_eq!(decode("a%2Fb+c%zz%4"), "a/b c%zz%4");
    }
}

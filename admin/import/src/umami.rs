//! `umami`: a CSV of Umami's `website_event` rows, each with its session's columns.
//!
//! This is the file Umami Cloud's data export writes and the format its data import
//! documents (umami.is/docs/cloud/import-data); Umami's ClickHouse `website_event`
//! table has the same columns, with `region` where older exports say `subdivision1`,
//! and more of them (utm_*, click ids, `tag`, `distinct_id`, web vitals). Columns are
//! found by name, in any order; unknown ones are ignored.
//!
//! Required: `event_id`, `session_id`, `created_at`, `event_type`, `url_path`.
//!
//! Umami's `session_id` is its visitor (a hash of site, IP, user agent and a monthly
//! salt) and its `visit_id` is what Rivulet calls a session (it changes after 30 minutes
//! of inactivity): `session_id` → `anonymous_id`, `visit_id` → `preset.session_id`
//! (`session_id` when the file has no `visit_id`).

use crate::csv::Record;
use crate::props::non_empty;
use crate::{Format, HeaderError, ImportedEvent, Preset, RowError, SkipKind};

pub(crate) struct Columns {
    count: usize,
    event_id: usize,
    session_id: usize,
    created_at: usize,
    event_type: usize,
    url_path: usize,
    visit_id: Option<usize>,
    hostname: Option<usize>,
    url_query: Option<usize>,
    referrer_domain: Option<usize>,
    referrer_path: Option<usize>,
    referrer_query: Option<usize>,
    page_title: Option<usize>,
    event_name: Option<usize>,
    tag: Option<usize>,
    distinct_id: Option<usize>,
    browser: Option<usize>,
    os: Option<usize>,
    device: Option<usize>,
    screen: Option<usize>,
    language: Option<usize>,
    country: Option<usize>,
    region: Option<usize>,
    city: Option<usize>,
    lcp: Option<usize>,
    inp: Option<usize>,
    cls: Option<usize>,
    fcp: Option<usize>,
    ttfb: Option<usize>,
}

impl Columns {
    pub(crate) fn new(header: &[String]) -> Result<Self, HeaderError> {
        let find = |name: &str| header.iter().position(|h| h == name);
        if find("event_type").is_none()
            && (find("data_key").is_some() || find("event_key").is_some())
        {
            return Err(HeaderError::WrongFile(
                "this is Umami's event-data CSV (it has data_key and no event_type): import the website-event CSV, whose rows are the events".into(),
            ));
        }
        let need = |name: &'static str| {
            find(name).ok_or(HeaderError::MissingColumn {
                format: Format::Umami,
                column: name,
                hint: ": the file must be Umami's website-event CSV, with its header line",
            })
        };
        Ok(Columns {
            count: header.len(),
            event_id: need("event_id")?,
            session_id: need("session_id")?,
            created_at: need("created_at")?,
            event_type: need("event_type")?,
            url_path: need("url_path")?,
            visit_id: find("visit_id"),
            hostname: find("hostname"),
            url_query: find("url_query"),
            referrer_domain: find("referrer_domain"),
            referrer_path: find("referrer_path"),
            referrer_query: find("referrer_query"),
            page_title: find("page_title"),
            event_name: find("event_name"),
            tag: find("tag"),
            distinct_id: find("distinct_id"),
            browser: find("browser"),
            os: find("os"),
            device: find("device"),
            screen: find("screen"),
            language: find("language"),
            country: find("country"),
            region: find("region").or(find("subdivision1")),
            city: find("city"),
            lcp: find("lcp"),
            inp: find("inp"),
            cls: find("cls"),
            fcp: find("fcp"),
            ttfb: find("ttfb"),
        })
    }

    pub(crate) fn event(&self, record: &Record, line: u64) -> Result<ImportedEvent, RowError> {
        let err = |kind, message: String| RowError::new(line, kind, message);
        if record.len() != self.count {
            return Err(err(
                SkipKind::Malformed,
                format!(
                    "the row has {} fields where the header has {} (a missing comma, or an unquoted comma or line break?)",
                    record.len(),
                    self.count
                ),
            ));
        }
        let fields = record.fields().map_err(|m| err(SkipKind::Malformed, m))?;
        let get = |i: usize| fields[i].trim();
        let opt = |i: Option<usize>| i.map(get).filter(|s| !s.is_empty());
        let required = |i: usize, name: &str| {
            let v = get(i);
            if v.is_empty() {
                Err(err(SkipKind::MissingField, format!("{name} is empty")))
            } else {
                Ok(v)
            }
        };

        let event_type = required(self.event_type, "event_type")?;
        let (kind, name) = match event_type {
            "1" => ("pageview", None),
            "2" => (
                "custom_event",
                Some(opt(self.event_name).ok_or_else(|| {
                    err(
                        SkipKind::MissingField,
                        "event_name is empty on a custom event (event_type 2)".into(),
                    )
                })?),
            ),
            "5" => ("performance", None),
            "3" | "4" => {
                return Err(err(
                    SkipKind::UnsupportedEvent,
                    format!(
                        "event_type {event_type} is an Umami {} event, not a website's",
                        if event_type == "3" { "link" } else { "pixel" }
                    ),
                ))
            }
            other => {
                let known = "1 (pageview), 2 (custom event) or 5 (performance)";
                let message = format!("event_type {other:?} is not {known}");
                return Err(err(SkipKind::InvalidValue, message));
            }
        };
        let source_id = required(self.event_id, "event_id")?.to_owned();
        let created_at = get(self.created_at);
        if created_at.is_empty() {
            return Err(err(SkipKind::BadTimestamp, "created_at is empty".into()));
        }
        let timestamp_ms = crate::time::parse(created_at)
            .map_err(|why| err(SkipKind::BadTimestamp, format!("created_at {why}")))?;
        let session = required(self.session_id, "session_id")?;

        let (screen_width, screen_height) = match opt(self.screen) {
            None => (None, None),
            Some(s) => screen(s).ok_or_else(|| {
                err(
                    SkipKind::InvalidValue,
                    format!("screen {s:?} is not WIDTHxHEIGHT (e.g. 1920x1080, each 0–65535)"),
                )
            })?,
        };
        let vital = |i: Option<usize>, name: &str| -> Result<Option<f64>, RowError> {
            match opt(i) {
                None => Ok(None),
                Some(v) => v.parse::<f64>().map(Some).map_err(|_| {
                    err(
                        SkipKind::InvalidValue,
                        format!("{name} is {v:?}, not a number"),
                    )
                }),
            }
        };
        let (lcp, inp, cls, fcp, ttfb) = if kind == "performance" {
            (
                vital(self.lcp, "lcp")?,
                vital(self.inp, "inp")?,
                vital(self.cls, "cls")?,
                vital(self.fcp, "fcp")?,
                vital(self.ttfb, "ttfb")?,
            )
        } else {
            (None, None, None, None, None)
        };
        let (operating_system, operating_system_version) = match opt(self.os) {
            Some(os) => os_name(os),
            None => (None, None),
        };
        let browser = opt(self.browser);
        let bot = browser == Some("searchbot");
        let country = opt(self.country).map(str::to_owned);
        let region = opt(self.region).map(|r| match &country {
            Some(c) if !r.contains('-') => format!("{c}-{r}"),
            _ => r.to_owned(),
        });

        Ok(ImportedEvent {
            source_id,
            timestamp_ms,
            event_type: kind.into(),
            event_name: name.map(str::to_owned),
            properties: None,
            hostname: opt(self.hostname).map(str::to_owned),
            pathname: non_empty(get(self.url_path)),
            querystring: opt(self.url_query).map(|q| {
                if q.starts_with('?') {
                    q.to_owned()
                } else {
                    format!("?{q}")
                }
            }),
            page_title: opt(self.page_title).map(str::to_owned),
            referrer: referrer(
                opt(self.referrer_domain),
                opt(self.referrer_path),
                opt(self.referrer_query),
            ),
            user_id: opt(self.distinct_id).map(str::to_owned),
            anonymous_id: Some(session.to_owned()),
            ip: None,
            user_agent: None,
            language: opt(self.language).map(str::to_owned),
            screen_width,
            screen_height,
            event_id: None,
            tag: opt(self.tag).map(str::to_owned),
            app_version: None,
            device_model: None,
            feature_flags: None,
            lcp,
            cls,
            inp,
            fcp,
            ttfb,
            preset: Preset {
                session_id: Some(opt(self.visit_id).unwrap_or(session).to_owned()),
                country,
                region,
                city: opt(self.city).map(str::to_owned),
                browser: if bot { None } else { browser.map(browser_name) },
                operating_system,
                operating_system_version,
                device_type: if bot {
                    Some("Bot".into())
                } else {
                    opt(self.device).and_then(device_type).map(str::to_owned)
                },
                is_bot: bot.then_some(1),
                ..Preset::default()
            },
        })
    }
}

/// `1920x1080` → (1920, 1080).
fn screen(s: &str) -> Option<(Option<u16>, Option<u16>)> {
    let (w, h) = s.split_once(['x', 'X'])?;
    Some((Some(w.trim().parse().ok()?), Some(h.trim().parse().ok()?)))
}

/// Umami keeps the referrer's domain, path and query apart, and no scheme: the URL is
/// put back together with `https://`. No domain, no referrer.
fn referrer(domain: Option<&str>, path: Option<&str>, query: Option<&str>) -> Option<String> {
    let domain = domain?;
    let mut url = format!("https://{domain}");
    match path {
        Some(p) if p.starts_with('/') => url.push_str(p),
        Some(p) => {
            url.push('/');
            url.push_str(p);
        }
        None => url.push('/'),
    }
    if let Some(q) = query {
        if !q.starts_with('?') {
            url.push('?');
        }
        url.push_str(q);
    }
    Some(url)
}

/// Umami's browser names are detect-browser's codes; these become uap-core's names (the
/// enricher's), others stay as they are.
fn browser_name(code: &str) -> String {
    match code {
        "chrome" => "Chrome",
        "crios" => "Chrome Mobile iOS",
        "chromium-webview" => "Chrome Mobile WebView",
        "firefox" => "Firefox",
        "fxios" => "Firefox iOS",
        "safari" => "Safari",
        "ios" => "Mobile Safari",
        "ios-webview" => "Mobile Safari UI/WKWebView",
        "edge" | "edge-chromium" => "Edge",
        "edge-ios" => "Edge Mobile",
        "opera" => "Opera",
        "opera-mini" => "Opera Mini",
        "samsung" => "Samsung Internet",
        "yandexbrowser" => "Yandex Browser",
        "ie" => "IE",
        "android" => "Android",
        "silk" => "Amazon Silk",
        "miui" => "MiuiBrowser",
        "facebook" => "Facebook",
        "instagram" => "Instagram",
        "kakaotalk" => "KakaoTalk",
        other => other,
    }
    .to_owned()
}

/// Umami's system names (detect-browser's) to uap-core's name and version.
fn os_name(os: &str) -> (Option<String>, Option<String>) {
    const WINDOWS_VERSIONS: &[&str] = &[
        "11", "10", "8.1", "8", "7", "Vista", "XP", "2000", "ME", "98", "95", "3.11",
    ];
    let name = match os {
        "Mac OS" => "Mac OS X",
        "Android OS" => "Android",
        "Windows Mobile" => "Windows Phone",
        "Open BSD" => "OpenBSD",
        "Sun OS" => "Solaris",
        other => match other.strip_prefix("Windows ") {
            Some(v) if WINDOWS_VERSIONS.contains(&v) => {
                return (Some("Windows".into()), Some(v.into()))
            }
            Some(_) => "Windows",
            None => other,
        },
    };
    (Some(name.into()), None)
}

/// Umami's device (ua-parser-js's type, `laptop` for a desktop of ≤ 1920 px) to
/// Rivulet's; an unknown one is left to the enricher.
fn device_type(device: &str) -> Option<&'static str> {
    match device {
        "desktop" | "laptop" | "console" | "smarttv" => Some("Desktop"),
        "mobile" | "wearable" => Some("Mobile"),
        "tablet" => Some("Tablet"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screens() {
        assert_eq!(screen("1920x1080"), Some((Some(1920), Some(1080))));
        assert_eq!(screen("390X844"), Some((Some(390), Some(844))));
        assert_eq!(screen("1920"), None);
        assert_eq!(screen("99999x1"), None);
        assert_eq!(screen("axb"), None);
    }

    #[test]
    fn referrers() {
        assert_eq!(
            referrer(Some("www.google.com"), Some("/search"), Some("q=x")),
            Some("https://www.google.com/search?q=x".into())
        );
        assert_eq!(
            referrer(Some("news.ycombinator.com"), None, None),
            Some("https://news.ycombinator.com/".into())
        );
        assert_eq!(
            referrer(Some("a.example"), Some("p"), Some("?x")),
            Some("https://a.example/p?x".into())
        );
        assert_eq!(referrer(None, Some("/p"), None), None);
    }

    #[test]
    fn names() {
        assert_eq!(browser_name("crios"), "Chrome Mobile iOS");
        assert_eq!(browser_name("edge-chromium"), "Edge");
        assert_eq!(browser_name("brave"), "brave");
        assert_eq!(
            os_name("Windows 10"),
            (Some("Windows".into()), Some("10".into()))
        );
        assert_eq!(
            os_name("Windows Server 2003"),
            (Some("Windows".into()), None)
        );
        assert_eq!(os_name("Mac OS"), (Some("Mac OS X".into()), None));
        assert_eq!(os_name("Android OS"), (Some("Android".into()), None));
        assert_eq!(os_name("iOS"), (Some("iOS".into()), None));
        assert_eq!(device_type("laptop"), Some("Desktop"));
        assert_eq!(device_type("tablet"), Some("Tablet"));
        assert_eq!(device_type("mobile"), Some("Mobile"));
        assert_eq!(device_type("toaster"), None);
    }
}

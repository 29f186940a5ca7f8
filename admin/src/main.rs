//! `rivulet-admin`: schema migrations, sites and API keys. JSON on stdout; errors as
//! sentences on stderr with a non-zero exit code. `rivulet-admin serve` runs the web
//! dashboard and its JSON API (`dashboard`).

mod cache;
mod config;
mod dashboard;
mod error;
mod ops;
mod output;

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
    about = "Manage Rivulet: schema, sites and API keys"
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
    /// Delete a site: its events stay, tracking for it stops (404).
    Delete {
        site_id: u32,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Generate an API key for a site. The key is printed once and stored only as a hash.
    Create {
        #[arg(long = "site")]
        site_id: u32,
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
        Ok(v) => println!("{}", serde_json::to_string_pretty(&v).expect("JSON output")),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
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

async fn run(command: Command) -> Result<Value, AdminError> {
    if let Command::Serve = command {
        // Checked before connecting, so a missing token is the first thing one hears.
        let config = dashboard::DashboardConfig::from_env()?;
        rivulet_common::telemetry::init_logging();
        dashboard::serve(config, ops().await?).await?;
        return Ok(Value::Null);
    }
    let ops = ops().await?;
    let reg = &ops.reg;
    match command {
        Command::Serve => unreachable!("handled above"),
        Command::Migrate => {
            let applied = rivulet_common::schema::migrations::migrate(reg.db()).await?;
            let all = rivulet_common::schema::migrations::applied_versions(reg.db()).await?;
            Ok(
                serde_json::json!({"applied_now": applied, "schema_versions": all, "database": reg.db().database}),
            )
        }
        Command::Sites { command } => match command {
            SitesCommand::Create { domain, name } => Ok(output::site(
                &ops.create_site(&domain, name.as_deref()).await?,
            )),
            SitesCommand::List => Ok(Value::Array(
                reg.list_sites().await?.iter().map(output::site).collect(),
            )),
            SitesCommand::Delete { site_id } => Ok(output::site(&ops.delete_site(site_id).await?)),
        },
        Command::Keys { command } => match command {
            KeysCommand::Create { site_id } => {
                let (key, rec) = ops.create_key(site_id).await?;
                Ok(output::new_key(&rec, &key))
            }
            KeysCommand::List { site_id } => {
                let keys = ops.list_keys(site_id).await?;
                let used = ops.last_used(&keys).await;
                Ok(Value::Array(
                    keys.iter()
                        .map(|k| {
                            output::key_used(
                                k,
                                used.as_ref().and_then(|u| u.get(&k.key_id).copied()),
                            )
                        })
                        .collect(),
                ))
            }
            KeysCommand::Revoke { key } => {
                let rec = ops.find_key(&key).await?;
                Ok(output::key(&ops.revoke_key(&rec).await?))
            }
        },
    }
}

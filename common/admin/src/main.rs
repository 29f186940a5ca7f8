//! `rivulet-admin`: schema migrations, sites and API keys. JSON on stdout; errors as
//! sentences on stderr with a non-zero exit code.

mod cache;
mod error;
mod output;

use clap::{Parser, Subcommand};
use error::AdminError;
use rivulet_common::ch::ChConfig;
use rivulet_common::keys::{is_key_id, ApiKey};
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

async fn registry() -> Result<Registry, AdminError> {
    let cfg = ChConfig::from_env()?;
    let db = cfg
        .connect()
        .await
        .map_err(|e| AdminError::Unavailable(format!("ClickHouse at {}: {e}", cfg.url)))?;
    Ok(Registry::new(db))
}

async fn run(command: Command) -> Result<Value, AdminError> {
    let reg = registry().await?;
    match command {
        Command::Migrate => {
            let applied = rivulet_common::migrations::migrate(reg.db()).await?;
            let all = rivulet_common::migrations::applied_versions(reg.db()).await?;
            Ok(
                serde_json::json!({"applied_now": applied, "schema_versions": all, "database": reg.db().database}),
            )
        }
        Command::Sites { command } => match command {
            SitesCommand::Create { domain, name } => {
                let mut redis = cache::connect().await?;
                Ok(output::site(
                    &reg.create_site(&mut redis, &domain, name.as_deref())
                        .await?,
                ))
            }
            SitesCommand::List => Ok(Value::Array(
                reg.list_sites().await?.iter().map(output::site).collect(),
            )),
            SitesCommand::Delete { site_id } => {
                // Check Redis first so that a deletion is never recorded without the
                // running ingests being told.
                let mut redis = cache::connect().await?;
                let site = reg.delete_site(site_id).await?;
                cache::invalidate_site(&mut redis, site_id).await?;
                Ok(output::site(&site))
            }
        },
        Command::Keys { command } => match command {
            KeysCommand::Create { site_id } => {
                let (key, rec) = reg.create_key(site_id).await?;
                let mut v = output::key(&rec);
                v["api_key"] = Value::String(key.reveal().to_string());
                v["warning"] = Value::String(
                    "This key is shown once. Keep it in an environment variable on your server, never in client-side code.".into(),
                );
                Ok(v)
            }
            KeysCommand::List { site_id } => {
                if reg.get_site(site_id).await?.is_none() {
                    return Err(AdminError::NotFound(format!(
                        "site {site_id} does not exist"
                    )));
                }
                Ok(Value::Array(
                    reg.list_keys(site_id)
                        .await?
                        .iter()
                        .map(output::key)
                        .collect(),
                ))
            }
            KeysCommand::Revoke { key } => {
                let rec = if key.starts_with("rb_") {
                    let api_key = ApiKey::parse(&key).ok_or_else(|| {
                        AdminError::Usage("that is not a well-formed API key (rb_ followed by 32 lowercase hex digits)".into())
                    })?;
                    reg.find_key_by_hash(&api_key.hash()).await?
                } else if is_key_id(&key) {
                    reg.find_key_by_id(&key).await?
                } else {
                    return Err(AdminError::Usage(
                        "give a key id (key_ + 16 hex digits, see `keys list`) or the API key itself (rb_…)".into(),
                    ));
                };
                let rec = rec.ok_or_else(|| AdminError::NotFound("no such API key".into()))?;
                let mut redis = cache::connect().await?;
                let revoked = reg.revoke_key(&rec).await?;
                cache::invalidate_key(
                    &mut redis,
                    &rivulet_common::keys::KeyHash(rec.key_hash.clone()),
                )
                .await?;
                Ok(output::key(&revoked))
            }
        },
    }
}

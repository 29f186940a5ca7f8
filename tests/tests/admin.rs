//! rivulet-admin against the real ClickHouse and Redis: sites, keys, revocation,
//! migrations (twice, and from two processes at once), and clear errors.

use redis::AsyncCommands;
use rivulet_common::keys::ApiKey;
use rivulet_tests::*;
use serde_json::Value;
use std::process::{Command, Output};

fn admin(args: &[&str]) -> Output {
    load_stack_env();
    Command::new(binary("rivulet-admin"))
        .args(args)
        .output()
        .unwrap()
}

fn admin_json(args: &[&str]) -> Value {
    let out = admin(args);
    assert!(
        out.status.success(),
        "rivulet-admin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn admin_err(args: &[&str]) -> String {
    let out = admin(args);
    assert!(!out.status.success(), "rivulet-admin {args:?} should fail");
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[tokio::test]
async fn site_and_key_lifecycle() {
    db().await;
    let domain = format!("admin-{}.example.org", uuid::Uuid::new_v4().simple());
    let site = admin_json(&["sites", "create", "--domain", &domain, "--name", "Shop"]);
    let site_id = site["site_id"].as_u64().unwrap() as u32;
    assert_eq!(
        (site["domain"].as_str(), site["name"].as_str()),
        (Some(domain.as_str()), Some("Shop"))
    );
    assert!(admin_json(&["sites", "list"])
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["site_id"] == site_id));

    let created = admin_json(&["keys", "create", "--site", &site_id.to_string()]);
    let secret = created["api_key"].as_str().unwrap().to_string();
    let key = ApiKey::parse(&secret).expect("rb_ + 32 lowercase hex");
    assert_eq!(created["site_id"], site_id);
    let key_id = created["key_id"].as_str().unwrap().to_string();

    // Stored only as its hash, and found by it.
    let reg = registry().await;
    let rec = reg
        .find_key_by_hash(&key.hash())
        .await
        .unwrap()
        .expect("lookup by hash");
    assert_eq!(
        (rec.key_id.as_str(), rec.site_id, rec.revoked),
        (key_id.as_str(), site_id, 0)
    );
    let dump: Vec<String> = db()
        .await
        .client
        .query("SELECT concat(key_hash, key_id, key_prefix) FROM api_keys")
        .fetch_all()
        .await
        .unwrap();
    assert!(
        dump.iter().all(|row| !row.contains(&secret[3..])),
        "the secret is not stored"
    );

    let list = admin(&["keys", "list", "--site", &site_id.to_string()]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(!text.contains(&secret[3..]), "list never shows the secret");
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list[0]["key_id"], key_id.as_str());
    assert_eq!(list[0]["key_prefix"], &secret[..11]);
    assert_eq!(list[0]["revoked"], false);

    // Revocation clears the Redis entry and publishes the invalidation.
    let client = redis::Client::open(env("REDIS_URL")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let entry = rivulet_common::cache::key_entry(&key.hash());
    let _: () = conn.set(&entry, "k:1:x").await.unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe(rivulet_common::cache::INVALIDATION_CHANNEL)
        .await
        .unwrap();
    let revoked = admin_json(&["keys", "revoke", &key_id]);
    assert_eq!(revoked["revoked"], true);
    let exists: bool = conn.exists(&entry).await.unwrap();
    assert!(!exists, "the Redis cache entry is gone");
    let msg = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        futures::StreamExt::next(&mut pubsub.on_message()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        format!("key:{}", key.hash().0)
    );
    assert_eq!(
        reg.find_key_by_hash(&key.hash())
            .await
            .unwrap()
            .unwrap()
            .revoked,
        1
    );
    // Revoking by the key itself works too, and is idempotent.
    assert_eq!(admin_json(&["keys", "revoke", &secret])["revoked"], true);

    let deleted = admin_json(&["sites", "delete", &site_id.to_string()]);
    assert_eq!(deleted["deleted"], true);
    assert!(reg.get_site(site_id).await.unwrap().is_none());
}

#[tokio::test]
async fn bad_input_gives_clear_errors_and_changes_nothing() {
    db().await;
    assert!(admin_err(&["keys", "create", "--site", "3999999999"])
        .contains("site 3999999999 does not exist"));
    assert!(admin_err(&["keys", "list", "--site", "3999999999"]).contains("does not exist"));
    assert!(admin_err(&["keys", "revoke", "garbage"]).contains("key id"));
    assert!(admin_err(&["keys", "revoke", "rb_XYZ"]).contains("not a well-formed API key"));
    assert!(
        admin_err(&["keys", "revoke", &format!("rb_{}", "e".repeat(32))])
            .contains("no such API key")
    );
    assert!(admin_err(&["keys", "revoke", "key_0000000000000000"]).contains("no such API key"));
    assert!(
        admin_err(&["sites", "create", "--domain", "https://example.com/x"])
            .contains("not a domain name")
    );
    assert!(admin_err(&["sites", "delete", "3999999999"]).contains("does not exist"));
    let out = Command::new(binary("rivulet-admin"))
        .args(["sites", "list"])
        .env("CLICKHOUSE_URL", "http://127.0.0.1:1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ClickHouse") && err.contains("unreachable"),
        "{err}"
    );
    let out = Command::new(binary("rivulet-admin"))
        .args(["keys", "revoke", "key_0000000000000001"])
        .env("REDIS_URL", "redis://127.0.0.1:1/")
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[tokio::test]
async fn migrations_are_idempotent_and_safe_concurrently() {
    let db = db().await;
    let schema = || async {
        let mut out = Vec::new();
        for t in ["events", "sites", "api_keys", "schema_migrations"] {
            let ddl: String = db
                .root
                .query(&format!("SHOW CREATE TABLE {}.{t}", db.database))
                .fetch_one()
                .await
                .unwrap();
            out.push(ddl);
        }
        out
    };
    let before = schema().await;
    let again = admin_json(&["migrate"]);
    assert_eq!(again["applied_now"], serde_json::json!([]));
    // Two processes at once, on a fresh database name.
    let fresh = format!("rivulet_mig_{}", uuid::Uuid::new_v4().simple());
    let spawn = || {
        Command::new(binary("rivulet-admin"))
            .arg("migrate")
            .env("CLICKHOUSE_DB", &fresh)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let versions: Vec<u32> = db
        .root
        .query(&format!(
            "SELECT DISTINCT version FROM {fresh}.schema_migrations ORDER BY version"
        ))
        .fetch_all()
        .await
        .unwrap();
    let expected: Vec<u32> = rivulet_common::schema::migrations::MIGRATIONS
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(versions, expected);
    let fresh_events: String = db
        .root
        .query(&format!("SHOW CREATE TABLE {fresh}.events"))
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(fresh_events.replace(&fresh, &db.database), before[0]);
    db.root
        .query(&format!("DROP DATABASE {fresh}"))
        .execute()
        .await
        .unwrap();
    assert_eq!(schema().await, before);
}

/// Migration 12 carries the rollup's day rows of `stats_days` over to `stats_total_days`
/// (ordered by kind first) and drops the old table; run again after the copy and before
/// the drop, it copies nothing twice. A database is brought to the state before it by hand:
/// the old table with rows in it, and no record of migration 12.
#[tokio::test]
async fn the_rollups_day_rows_are_carried_over_to_the_table_ordered_by_kind() {
    let db = db().await;
    let fresh = format!("rivulet_mig12_{}", uuid::Uuid::new_v4().simple());
    let run = |sql: String| {
        let root = db.root.clone();
        async move { root.query(&sql).execute().await.unwrap() }
    };
    let count = |sql: String| {
        let root = db.root.clone();
        async move { root.query(&sql).fetch_one::<u64>().await.unwrap() }
    };
    let migrate = || {
        let out = Command::new(binary("rivulet-admin"))
            .arg("migrate")
            .env("CLICKHOUSE_DB", &fresh)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["applied_now"].clone()
    };
    // Before migration 12: its table absent, the old one with three rows (a marker, a
    // piece and an id), and migrations 1 to 11 recorded.
    let before_12 = |rows: bool| {
        let fresh = fresh.clone();
        let run = &run;
        async move {
            run(format!(
                "CREATE TABLE {fresh}.stats_days AS {fresh}.stats_total_days \
                 ENGINE = ReplacingMergeTree ORDER BY (site_id, time_zone, local_day, generation, kind, utc_day, id_hash)"
            ))
            .await;
            if rows {
                run(format!(
                    "INSERT INTO {fresh}.stats_days (site_id, time_zone, local_day, generation, kind, utc_day, pageviews, id_hash) \
                     VALUES (7, 'UTC', '2026-01-02', 5, 0, '2026-01-02', 0, 0), \
                     (7, 'UTC', '2026-01-02', 5, 1, '2026-01-02', 42, 0), \
                     (7, 'UTC', '2026-01-02', 5, 2, '2026-01-02', 0, 99)"
                ))
                .await;
            }
            run(format!("DROP TABLE {fresh}.schema_migrations")).await;
            run(format!(
                "CREATE TABLE {fresh}.schema_migrations (version UInt32, name String, applied_at DateTime) \
                 ENGINE = ReplacingMergeTree ORDER BY version"
            ))
            .await;
            run(format!(
                "INSERT INTO {fresh}.schema_migrations (version, name, applied_at) \
                 SELECT number + 1, 'before 12', now() FROM system.numbers LIMIT 11"
            ))
            .await;
        }
    };
    let all: Vec<u32> = rivulet_common::schema::migrations::MIGRATIONS
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(migrate(), serde_json::json!(all));
    // Migration 12 and those after it: recorded as not applied.
    let from_12: Vec<u32> = all.iter().copied().filter(|v| *v >= 12).collect();
    before_12(true).await;
    run(format!("DROP TABLE {fresh}.stats_total_days")).await;
    assert_eq!(migrate(), serde_json::json!(from_12));
    let totals = format!(
        "SELECT count() FROM {fresh}.stats_total_days WHERE site_id = 7 AND pageviews IN (0, 42)"
    );
    assert_eq!(count(totals.clone()).await, 3);
    let old = format!(
        "SELECT count() FROM system.tables WHERE database = '{fresh}' AND name = 'stats_days'"
    );
    assert_eq!(count(old.clone()).await, 0, "the old table is dropped");
    let key: String = db
        .root
        .query(&format!(
            "SELECT sorting_key FROM system.tables WHERE database = '{fresh}' AND name = 'stats_total_days'"
        ))
        .fetch_one()
        .await
        .unwrap_or_default();
    // (18.16 has no `sorting_key`: the statement that made the table says the same.)
    let ddl: String = db
        .root
        .query(&format!("SHOW CREATE TABLE {fresh}.stats_total_days"))
        .fetch_one()
        .await
        .unwrap();
    assert!(
        key.starts_with("site_id, time_zone, kind, local_day")
            || ddl.contains("ORDER BY (site_id, time_zone, kind, local_day"),
        "{key} {ddl}"
    );
    // Stopped after its copy, before its drop: run again, it copies nothing twice.
    before_12(true).await;
    assert_eq!(migrate(), serde_json::json!(from_12));
    assert_eq!(count(totals).await, 3);
    assert_eq!(count(old).await, 0);
    run(format!("DROP DATABASE {fresh}")).await;
}

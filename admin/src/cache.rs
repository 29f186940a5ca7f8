//! Telling running ingests about revocations: delete the Redis cache entry and publish
//! on the invalidation channel every ingest subscribes to.

use crate::error::AdminError;
use redis::AsyncCommands;
use rivulet_common::{cache, keys::KeyHash};

pub async fn connect(url: &str) -> Result<redis::aio::MultiplexedConnection, AdminError> {
    let unavailable = |e: redis::RedisError| {
        AdminError::Unavailable(format!("Redis at {url} ({e}); nothing was changed"))
    };
    let client = redis::Client::open(url).map_err(unavailable)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(unavailable)?;
    let _: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(conn)
}

/// Deletes what ingest counted of a user's profile for its caps (`cache::profile_traits`)
/// once their erasure is recorded: the sets hold hashes of their trait names and
/// anonymous ids. Best effort: an unreachable Redis leaves the counts, which name no one
/// (hashes under a hash of the user id), and is said in the log.
pub async fn forget_profile(url: &str, site_id: u32, user_id: &str) {
    let result = async {
        let mut conn = connect(url).await?;
        let keys = cache::profile_entries(site_id, user_id);
        conn.del::<_, ()>(&keys[..])
            .await
            .map_err(|e| AdminError::Unavailable(format!("Redis at {url} ({e})")))
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(error = %e, site_id, "the erased user's profile counts were not deleted from Redis");
    }
}

/// Deletes and announces twice, a second apart: an ingest whose registry read began
/// before the revocation was written could otherwise put the stale answer back into
/// Redis just after the first delete.
pub async fn invalidate_key(
    conn: &mut redis::aio::MultiplexedConnection,
    hash: &KeyHash,
) -> Result<(), AdminError> {
    invalidate_key_once(conn, hash).await?;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    invalidate_key_once(conn, hash).await
}

async fn invalidate_key_once(
    conn: &mut redis::aio::MultiplexedConnection,
    hash: &KeyHash,
) -> Result<(), AdminError> {
    let _: () = conn
        .del(cache::key_entry(hash))
        .await
        .map_err(rivulet_common::CommonError::from)?;
    let _: () = conn
        .publish(cache::INVALIDATION_CHANNEL, cache::key_invalidation(hash))
        .await
        .map_err(rivulet_common::CommonError::from)?;
    Ok(())
}

pub async fn invalidate_site(
    conn: &mut redis::aio::MultiplexedConnection,
    site_id: u32,
) -> Result<(), AdminError> {
    let _: () = conn
        .del(cache::site_entry(site_id))
        .await
        .map_err(rivulet_common::CommonError::from)?;
    let _: () = conn
        .publish(
            cache::INVALIDATION_CHANNEL,
            cache::site_invalidation(site_id),
        )
        .await
        .map_err(rivulet_common::CommonError::from)?;
    Ok(())
}

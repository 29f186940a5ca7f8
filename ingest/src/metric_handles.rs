//! Metric handles registered once and then reused. A labelled `metrics::counter!` builds
//! its key and labels and looks them up in the recorder on every call; on the request
//! path that was about a fifth of ingest's allocations (perf, BENCHMARKS.md). A handle
//! is an `Arc` into the recorder's storage, so a cached one updates the same series.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;

/// Handles by label values, made on first use by `make`. Label values must come from a
/// bounded set (routes, status codes, cache layers): every distinct key stays.
pub struct Handles<K, H> {
    make: fn(&K) -> H,
    made: RwLock<HashMap<K, H>>,
}

impl<K: Hash + Eq + Clone, H: Clone> Handles<K, H> {
    pub fn new(make: fn(&K) -> H) -> Self {
        Handles {
            make,
            made: RwLock::new(HashMap::new()),
        }
    }

    pub fn get(&self, key: &K) -> H {
        if let Some(h) = self.made.read().expect("metric handles").get(key) {
            return h.clone();
        }
        self.made
            .write()
            .expect("metric handles")
            .entry(key.clone())
            .or_insert_with(|| (self.make)(key))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static MADE: AtomicUsize = AtomicUsize::new(0);

    #[test]
    fn a_handle_is_made_once_per_key() {
        let handles: Handles<(&str, u16), String> = Handles::new(|(route, status)| {
            MADE.fetch_add(1, Ordering::Relaxed);
            format!("{route} {status}")
        });
        assert_eq!(handles.get(&("/api/track", 200)), "/api/track 200");
        assert_eq!(handles.get(&("/api/track", 200)), "/api/track 200");
        assert_eq!(handles.get(&("/api/track", 429)), "/api/track 429");
        assert_eq!(MADE.load(Ordering::Relaxed), 2);
    }
}

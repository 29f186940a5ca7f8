//! JSON logs on stdout for every service. `RUST_LOG` filters (default
//! `info,rdkafka=warn,hyper=warn`);
//! `LOG_FORMAT=text` gives human-readable lines for local work. And the Prometheus
//! recorder behind every service's `/metrics`.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::time::Duration;
use tracing_subscriber::EnvFilter;

/// How often histogram samples are folded into their buckets.
const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder, installed on first use with these histogram
/// buckets (a later caller's buckets are ignored: one recorder serves the process).
pub fn prometheus(buckets: &[f64]) -> PrometheusHandle {
    prometheus_with_buckets_for(buckets, &[])
}

/// [`prometheus`], with buckets of their own for the histograms named in `per_metric`
/// (ingest's clock skew, in seconds to a year, beside its request latencies).
pub fn prometheus_with_buckets_for(
    buckets: &[f64],
    per_metric: &[(&str, &[f64])],
) -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| install(buckets, per_metric, METRICS_UPKEEP_EVERY))
        .clone()
}

/// Installs the process's Prometheus recorder, with these histogram buckets, and a
/// thread that folds recorded histogram samples into their buckets every 5 s.
///
/// Without that upkeep, each sample stays in memory until `/metrics` is scraped, and an
/// unscraped ingest grows with every request (docs/decisions/002-ingest-request-path.md).
/// A thread rather than a task, so that it does not depend on the caller's runtime.
pub fn install_prometheus(buckets: &[f64]) -> PrometheusHandle {
    install_prometheus_with_upkeep(buckets, METRICS_UPKEEP_EVERY)
}

/// `install_prometheus` with another upkeep period (its test uses a short one).
pub fn install_prometheus_with_upkeep(buckets: &[f64], every: Duration) -> PrometheusHandle {
    install(buckets, &[], every)
}

fn install(buckets: &[f64], per_metric: &[(&str, &[f64])], every: Duration) -> PrometheusHandle {
    let mut builder = PrometheusBuilder::new()
        .set_buckets(buckets)
        .expect("histogram buckets");
    for (name, buckets) in per_metric {
        builder = builder
            .set_buckets_for_metric(Matcher::Full((*name).to_string()), buckets)
            .expect("histogram buckets");
    }
    let handle = builder
        .install_recorder()
        .expect("a Prometheus recorder is installed once per process");
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            upkeep.run_upkeep();
        })
        .expect("spawn the metrics upkeep thread");
    handle
}

pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,rdkafka=warn,hyper=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if std::env::var("LOG_FORMAT").as_deref() == Ok("text") {
        builder.init();
    } else {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
    }
}

//! Prometheus metrics of the controller: reconciles, errors by kind and
//! reconcile duration.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of an error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Error kind (`invalid_spec`, `api`, ...).
    pub kind: String,
}

/// The controller's metrics.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles run.
    pub reconciles: Counter,
    /// Failed reconciles by kind.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
        }
    }
}

impl Metrics {
    /// Registers every metric under the `ozone_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("ozone_operator");
        r.register("reconciles", "Reconciles run", self.reconciles.clone());
        r.register(
            "reconcile_errors",
            "Failed reconciles by kind",
            self.errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            self.duration.clone(),
        );
    }

    /// Counts one failed reconcile of `kind`.
    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&ErrorLabels { kind: kind.into() })
            .inc();
    }
}

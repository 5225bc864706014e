//! The store's gauges in the Prometheus text format (`GET /metrics`):
//! whether it accepts writes, the damaged filters, and per filter its
//! items, fill ratio, predicted false-positive rate, layers and lookup
//! counters. Here rather than in [`crate::metrics`], which the write-ahead
//! log counts into: the metrics module imports neither the store nor the
//! log, so no two modules import each other.

use std::fmt::Write;

use crate::metrics::label;

use super::{Info, Store};

impl Store {
    /// Renders the store's gauges: whether it accepts writes, the damaged
    /// filters, and per filter
    /// its items, fill ratio, predicted false-positive rate, layers and lookup
    /// counters.
    pub fn render_metrics(&self, out: &mut String) {
        let store = self;
        let all = store.filters();
        let gauges: [(&str, &str); 6] = [
            ("bloomgate_filter_items", "Items in the filter."),
            ("bloomgate_filter_fill_ratio", "Fraction of bits set."),
            (
                "bloomgate_filter_predicted_fp",
                "Predicted false-positive rate per lookup.",
            ),
            ("bloomgate_filter_layers", "Layers (sub-filters)."),
            (
                "bloomgate_filter_checks_total",
                "Lookups against the filter.",
            ),
            ("bloomgate_filter_hits_total", "Lookups that were hits."),
        ];
        let _ = writeln!(
            out,
            "# HELP bloomgate_writable Whether the server accepts writes (0 while the write-ahead log refuses them, e.g. on a full disk).\n# TYPE bloomgate_writable gauge\nbloomgate_writable {}",
            store.write_failure().is_none() as u8
        );
        let damaged = store.damaged();
        let _ = writeln!(
            out,
            "# HELP bloomgate_damaged_filters Filters whose files failed to load: not served until repaired (see /healthz).\n# TYPE bloomgate_damaged_filters gauge\nbloomgate_damaged_filters {}",
            damaged.len()
        );
        let _ = writeln!(
            out,
            "# HELP bloomgate_filter_damaged A damaged filter (1), by name.\n# TYPE bloomgate_filter_damaged gauge"
        );
        for d in &damaged {
            let _ = writeln!(
                out,
                "bloomgate_filter_damaged{{filter=\"{}\"}} 1",
                label(&d.name)
            );
        }
        let _ = writeln!(
            out,
            "# HELP bloomgate_store_unavailable_total Requests answered unavailable (HTTP 503, RESP -TRYAGAIN) because the remote store (Redis) could not answer.\n# TYPE bloomgate_store_unavailable_total counter\nbloomgate_store_unavailable_total {}",
            store.unavailable_answers()
        );
        // A filter whose information cannot be read now (a remote store) is
        // left out of this scrape.
        let infos: Vec<(Info, (u64, u64))> = all
            .iter()
            .filter_map(|n| Some((n.info(true).ok()?, n.counters())))
            .collect();
        for (i, (name, help)) in gauges.iter().enumerate() {
            let ty = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {ty}");
            for (info, (checks, hits)) in &infos {
                let v = match i {
                    0 => info.items as f64,
                    1 => info.fill_ratio,
                    2 => info.predicted_fp,
                    3 => info.layers as f64,
                    4 => *checks as f64,
                    _ => *hits as f64,
                };
                let _ = writeln!(out, "{name}{{filter=\"{}\"}} {v}", label(&info.name));
            }
        }
    }
}

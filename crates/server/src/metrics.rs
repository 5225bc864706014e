//! Counters and latency histograms, rendered in the Prometheus text format.
//!
//! Everything is a relaxed atomic in a fixed array indexed by [`Op`], so
//! recording costs a few uncontended increments and no locks or allocation.
//! Per-filter gauges (items, fill ratio, checks, hits) are collected from the
//! store when `/metrics` is scraped.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::budget::InputBudget;

/// Front end a request came through.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/JSON.
    Http = 0,
    /// Redis protocol.
    Resp = 1,
}

/// Operation kinds that are counted separately.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Lookups (single or batch).
    Check = 0,
    /// Additions.
    Add = 1,
    /// Filter metadata (info, list, BF.INFO, BF.CARD, keys).
    Info = 2,
    /// Administrative writes (create, reload, delete, whitelist, snapshot, load chunk).
    Admin = 3,
    /// Everything else (health, metrics, connection commands).
    Other = 4,
}

const OPS: [&str; 5] = ["check", "add", "info", "admin", "other"];
const PROTOS: [&str; 2] = ["http", "resp"];
/// Histogram bucket upper bounds in microseconds.
const BUCKETS_US: [u64; 13] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 500_000, 2_000_000,
];

#[derive(Default)]
struct Series {
    requests: AtomicU64,
    errors: AtomicU64,
    sum_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS_US.len()],
}

/// All service-wide metrics.
#[derive(Default)]
pub struct Metrics {
    series: [[Series; 5]; 2],
    /// Items looked up.
    pub items_checked: AtomicU64,
    /// Lookups that were hits.
    pub hits: AtomicU64,
    /// Lookups that matched but were whitelisted.
    pub whitelisted: AtomicU64,
    /// Items added that were new.
    pub items_added: AtomicU64,
    /// Open connections.
    pub connections: [AtomicU64; 2],
    /// Connections refused (limit) or dropped (protocol abuse, timeouts).
    pub connections_rejected: [AtomicU64; 2],
    /// Log records discarded at startup (torn or corrupt tail).
    pub wal_records_lost: AtomicU64,
    /// Times the log started refusing writes (a failed write or sync, or no
    /// segment could be started: a full disk).
    pub wal_failures: AtomicU64,
    /// Journals compacted by snapshots.
    pub journal_compactions: AtomicU64,
    /// Log records replayed at startup.
    pub wal_records_replayed: AtomicU64,
    /// Snapshots written.
    pub snapshots: AtomicU64,
    /// Group commits (fsyncs) of the log.
    pub wal_syncs: AtomicU64,
    /// Log records written.
    pub wal_records: AtomicU64,
    /// Live-add journals found with a damaged tail (cut off when read).
    pub journal_damaged: AtomicU64,
    /// Bytes of damaged journal tails discarded.
    pub journal_lost_bytes: AtomicU64,
    /// Records copied from the log into live-add journals by snapshots.
    pub journal_records: AtomicU64,
    /// Live adds (journal and log) re-inserted into reloaded filter files.
    pub journal_replayed: AtomicU64,
    /// Redis-protocol lookups (`BF.EXISTS`, `CF.EXISTS`, …) of a filter
    /// that does not exist: a typo in a name makes every key "absent".
    pub unknown_filter_lookups: AtomicU64,
}

impl Metrics {
    /// Records one request.
    pub fn record(&self, proto: Proto, op: Op, elapsed: Duration, error: bool) {
        self.record_many(proto, op, 1, elapsed, error as u64);
    }

    /// Records `n` requests of one kind that took `total` together (a run of
    /// pipelined commands timed as a whole, each counted at the mean).
    pub fn record_many(&self, proto: Proto, op: Op, n: u64, total: Duration, errors: u64) {
        if n == 0 {
            return;
        }
        let s = &self.series[proto as usize][op as usize];
        s.requests.fetch_add(n, Relaxed);
        if errors > 0 {
            s.errors.fetch_add(errors, Relaxed);
        }
        let us = total.as_micros() as u64;
        s.sum_us.fetch_add(us, Relaxed);
        let mean = us / n;
        if let Some(i) = BUCKETS_US.iter().position(|&b| mean <= b) {
            s.buckets[i].fetch_add(n, Relaxed);
        }
    }

    /// Renders the service-wide part of `/metrics`.
    pub fn render(&self, out: &mut String) {
        out.push_str("# HELP bloomgate_requests_total Requests by protocol and operation.\n# TYPE bloomgate_requests_total counter\n");
        self.each(
            out,
            |s| s.requests.load(Relaxed),
            "bloomgate_requests_total",
        );
        out.push_str("# HELP bloomgate_request_errors_total Requests answered with an error.\n# TYPE bloomgate_request_errors_total counter\n");
        self.each(
            out,
            |s| s.errors.load(Relaxed),
            "bloomgate_request_errors_total",
        );
        out.push_str("# HELP bloomgate_request_duration_seconds Request latency.\n# TYPE bloomgate_request_duration_seconds histogram\n");
        for (p, pname) in PROTOS.iter().enumerate() {
            for (o, oname) in OPS.iter().enumerate() {
                let s = &self.series[p][o];
                let mut cum = 0;
                for (i, b) in BUCKETS_US.iter().enumerate() {
                    cum += s.buckets[i].load(Relaxed);
                    let _ = writeln!(
                        out,
                        "bloomgate_request_duration_seconds_bucket{{proto=\"{pname}\",op=\"{oname}\",le=\"{}\"}} {cum}",
                        *b as f64 / 1e6
                    );
                }
                let n = s.requests.load(Relaxed);
                let _ = writeln!(out, "bloomgate_request_duration_seconds_bucket{{proto=\"{pname}\",op=\"{oname}\",le=\"+Inf\"}} {n}");
                let _ = writeln!(
                    out,
                    "bloomgate_request_duration_seconds_sum{{proto=\"{pname}\",op=\"{oname}\"}} {}",
                    s.sum_us.load(Relaxed) as f64 / 1e6
                );
                let _ = writeln!(
                    out,
                    "bloomgate_request_duration_seconds_count{{proto=\"{pname}\",op=\"{oname}\"}} {n}"
                );
            }
        }
        let counters: [(&str, &str, &AtomicU64); 16] = [
            (
                "bloomgate_items_checked_total",
                "Items looked up.",
                &self.items_checked,
            ),
            (
                "bloomgate_hits_total",
                "Lookups answered as hits.",
                &self.hits,
            ),
            (
                "bloomgate_whitelisted_total",
                "Lookups that matched but were whitelisted.",
                &self.whitelisted,
            ),
            (
                "bloomgate_items_added_total",
                "Added items that were new.",
                &self.items_added,
            ),
            (
                "bloomgate_wal_records_total",
                "Write-ahead log records written.",
                &self.wal_records,
            ),
            (
                "bloomgate_wal_syncs_total",
                "Write-ahead log group commits (fsyncs).",
                &self.wal_syncs,
            ),
            (
                "bloomgate_wal_replayed_records_total",
                "Log records replayed at startup.",
                &self.wal_records_replayed,
            ),
            (
                "bloomgate_wal_lost_records_total",
                "Log records discarded at startup (torn or corrupt tail).",
                &self.wal_records_lost,
            ),
            (
                "bloomgate_wal_failures_total",
                "Times the log started refusing writes (write, sync or new segment failed).",
                &self.wal_failures,
            ),
            (
                "bloomgate_journal_compactions_total",
                "Live-add journals compacted (each distinct add kept once).",
                &self.journal_compactions,
            ),
            (
                "bloomgate_snapshots_total",
                "Snapshots written.",
                &self.snapshots,
            ),
            (
                "bloomgate_journal_records_total",
                "Add records copied from the log into live-add journals (NAME.live).",
                &self.journal_records,
            ),
            (
                "bloomgate_journal_replayed_total",
                "Live adds re-inserted into reloaded or replaced filter files.",
                &self.journal_replayed,
            ),
            (
                "bloomgate_journal_damaged_total",
                "Live-add journals found with a damaged tail (intact prefix kept).",
                &self.journal_damaged,
            ),
            (
                "bloomgate_journal_lost_bytes_total",
                "Bytes of damaged live-add journal tails discarded.",
                &self.journal_lost_bytes,
            ),
            (
                "bloomgate_unknown_filter_lookups_total",
                "Redis-protocol lookups of a filter that does not exist (answered 0, or an error with --unknown-filter-error).",
                &self.unknown_filter_lookups,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Relaxed)
            );
        }
        out.push_str(
            "# HELP bloomgate_connections Open connections.\n# TYPE bloomgate_connections gauge\n",
        );
        for (p, pname) in PROTOS.iter().enumerate() {
            let _ = writeln!(
                out,
                "bloomgate_connections{{proto=\"{pname}\"}} {}",
                self.connections[p].load(Relaxed)
            );
        }
        out.push_str("# HELP bloomgate_connections_rejected_total Connections refused or dropped by limits.\n# TYPE bloomgate_connections_rejected_total counter\n");
        for (p, pname) in PROTOS.iter().enumerate() {
            let _ = writeln!(
                out,
                "bloomgate_connections_rejected_total{{proto=\"{pname}\"}} {}",
                self.connections_rejected[p].load(Relaxed)
            );
        }
    }

    fn each(&self, out: &mut String, f: impl Fn(&Series) -> u64, name: &str) {
        for (p, pname) in PROTOS.iter().enumerate() {
            for (o, oname) in OPS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{name}{{proto=\"{pname}\",op=\"{oname}\"}} {}",
                    f(&self.series[p][o])
                );
            }
        }
    }
}

/// Escapes a label value for the Prometheus text format.
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the gauges and counters of all clients' buffered input ([`crate::budget`]).
pub fn render_input(input: &InputBudget, out: &mut String) {
    let (evicted, refused) = input.pressure();
    let _ = write!(
        out,
        "# HELP bloomgate_input_buffered_bytes Clients' buffered input now (Redis-protocol read buffers, HTTP bodies in flight).\n# TYPE bloomgate_input_buffered_bytes gauge\nbloomgate_input_buffered_bytes {}\n\
         # HELP bloomgate_input_budget_bytes The budget of all clients' buffered input.\n# TYPE bloomgate_input_budget_bytes gauge\nbloomgate_input_budget_bytes {}\n\
         # HELP bloomgate_input_evictions_total Connections closed because all clients' input passed the budget (the largest first).\n# TYPE bloomgate_input_evictions_total counter\nbloomgate_input_evictions_total {evicted}\n\
         # HELP bloomgate_input_refused_total HTTP bodies refused (503) because they did not fit the input budget.\n# TYPE bloomgate_input_refused_total counter\nbloomgate_input_refused_total {refused}\n",
        input.used(),
        input.limit(),
    );
}

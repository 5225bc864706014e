//! The results: one row per subject and operation (the samples of every
//! repetition, and the paired blocked median), the false-positive checks,
//! and the markdown tables printed at the end.

use bloomgate_bench::median;

use crate::subject::Subject;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Op {
    Insert,
    InsertBatch,
    HitSingle,
    MissSingle,
    HitBatch,
    MissBatch,
}

impl Op {
    pub(crate) const ALL: [Op; 6] = [
        Op::Insert,
        Op::InsertBatch,
        Op::HitSingle,
        Op::MissSingle,
        Op::HitBatch,
        Op::MissBatch,
    ];
    pub(crate) fn title(self) -> &'static str {
        match self {
            Op::Insert => "insert, one at a time",
            Op::InsertBatch => "insert, batched (hash + prefetch pipeline)",
            Op::HitSingle => "lookup hits (inserted keys), one at a time",
            Op::MissSingle => "lookup misses (never-inserted keys), one at a time",
            Op::HitBatch => "lookup hits, batched (hash + prefetch pipeline)",
            Op::MissBatch => "lookup misses, batched",
        }
    }
}

struct Row {
    name: String,
    op: Op,
    /// ns/op of each repetition
    samples: Vec<f64>,
    /// median ns/op of bloomgate-blocked measured alongside (paired), if any
    paired_blocked: Option<f64>,
    /// median over the repetitions of its ns/op ÷ bloomgate-blocked's in
    /// the same repetition, when the two alternated rep by rep
    per_rep: Option<f64>,
}

struct FpRow {
    name: String,
    bits: u64,
    k: String,
    predicted: f64,
    fps: u64,
    queries: u64,
}

pub(crate) struct Report {
    rows: Vec<Row>,
    fp: Vec<FpRow>,
    /// What made the run implausible (the process exits non-zero).
    pub(crate) failures: Vec<String>,
}

impl Report {
    /// An empty report.
    pub(crate) fn new() -> Report {
        Report {
            rows: vec![],
            fp: vec![],
            failures: vec![],
        }
    }

    pub(crate) fn add(&mut self, name: &str, op: Op, samples: Vec<f64>, paired: Option<f64>) {
        eprintln!(
            "    {name:<26} {op:?}: median {:.2} ns/op  (reps {:?})",
            median(&samples),
            samples
                .iter()
                .map(|x| (x * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        );
        self.rows.push(Row {
            name: name.into(),
            op,
            samples,
            paired_blocked: paired,
            per_rep: None,
        });
    }

    /// [`Report::add`] for a subject measured rep by rep alternately with
    /// bloomgate-blocked (`blocked[i]` in the same repetition as
    /// `samples[i]`): its ratio is the median of the per-rep ratios.
    pub(crate) fn add_per_rep(&mut self, name: &str, op: Op, samples: Vec<f64>, blocked: &[f64]) {
        assert_eq!(samples.len(), blocked.len(), "one blocked sample per rep");
        let ratios: Vec<f64> = samples.iter().zip(blocked).map(|(s, b)| s / b).collect();
        self.add(name, op, samples, None);
        let row = self.rows.last_mut().expect("just added");
        row.per_rep = Some(median(&ratios));
    }

    pub(crate) fn check_fp(&mut self, s: &dyn Subject, n: u64, fps: u64, queries: u64) {
        let row = FpRow {
            name: s.name(),
            bits: s.bits(),
            k: s.k(),
            predicted: s.predicted_fp(n),
            fps,
            queries,
        };
        self.check_fp_row(row);
    }

    fn check_fp_row(&mut self, row: FpRow) {
        let expected = row.predicted * row.queries as f64;
        let measured = row.fps as f64;
        // Loud failure for anything a Poisson count cannot explain
        // (6 sigma + 2x slack on the model for peers' approximate formulas).
        let ok = measured <= 2.0 * expected + 6.0 * expected.sqrt() + 10.0
            && measured >= 0.5 * expected - 6.0 * expected.sqrt() - 10.0;
        if !ok {
            self.failures.push(format!(
                "{}: {} false positives in {} queries, predicted {expected:.0}",
                row.name, row.fps, row.queries
            ));
        }
        self.fp.push(row);
    }

    pub(crate) fn print(&self, title: &str, n: u64, bytes: u64) {
        println!(
            "\n### {title}: {n} keys, {:.1} MiB per filter, {:.2} bits/item\n",
            bytes as f64 / (1 << 20) as f64,
            bytes as f64 * 8.0 / n as f64
        );
        println!("| filter | bits | bits/item | k | predicted FP | measured FP | false pos / queries | measured ÷ predicted |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in &self.fp {
            let m = r.fps as f64 / r.queries as f64;
            println!(
                "| {} | {} | {:.2} | {} | {:.3e} | {:.3e} | {} / {} | {:.3} |",
                r.name,
                r.bits,
                r.bits as f64 / n as f64,
                r.k,
                r.predicted,
                m,
                r.fps,
                r.queries,
                m / r.predicted
            );
        }
        let blocked = |op: Op| {
            self.rows
                .iter()
                .filter(|r| r.op == op && r.name == "bloomgate-blocked")
                .flat_map(|r| r.samples.iter().copied())
                .collect::<Vec<_>>()
        };
        for op in Op::ALL {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.op == op).collect();
            if rows.is_empty() {
                continue;
            }
            let b = blocked(op);
            let bmed = if b.is_empty() { f64::NAN } else { median(&b) };
            println!("\n**{title} — {}** (median of reps; ratio = its ns/op ÷ bloomgate-blocked's, >1 means blocked is faster; paired = blocked measured alternately in the same interval)\n", op.title());
            println!("| filter | ns/op (median) | min–max | Mops/s | ratio vs blocked |");
            println!("|---|---:|---:|---:|---:|");
            let mut seen = Vec::new();
            for r in rows {
                if seen.contains(&r.name) {
                    continue;
                }
                seen.push(r.name.clone());
                let med = median(&r.samples);
                let lo = r.samples.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = r.samples.iter().cloned().fold(0.0, f64::max);
                let ratio = match (r.per_rep, r.paired_blocked) {
                    (Some(x), _) => format!("{x:.2}× (paired per rep)"),
                    (None, Some(pb)) => format!("{:.2}× (paired)", med / pb),
                    (None, None) => format!("{:.2}×", med / bmed),
                };
                println!(
                    "| {} | {:.2} | {:.2}–{:.2} | {:.1} | {} |",
                    r.name,
                    med,
                    lo,
                    hi,
                    1e3 / med,
                    ratio
                );
            }
        }
    }
}

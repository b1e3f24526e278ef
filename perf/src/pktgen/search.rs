//! NDR and PDR: the highest rate at which a device loses no packets (or at most a given
//! fraction) over a trial, found by binary search as in RFC 2544 §26.1.

use super::measure::Trial;
use serde::Serialize;

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSpec {
    /// Loss allowed in a passing trial, as a fraction of what was sent: 0 for the
    /// no-drop rate (NDR), e.g. 0.005 for a partial-drop rate (PDR) of 0.5%.
    pub loss_threshold: f64,
    /// Stop when the bracket is narrower than this fraction of its upper end.
    pub resolution: f64,
    /// Trials at most, the first (unlimited) one included.
    pub max_trials: usize,
    /// A trial passes only if the generator sent at least this fraction of the rate
    /// asked for: a port that pushes back (a full virtio ring) must not pass a rate by
    /// refusing to take it.
    pub tx_tolerance: f64,
}

impl Default for SearchSpec {
    fn default() -> Self {
        SearchSpec {
            loss_threshold: 0.0,
            resolution: 0.01,
            max_trials: 20,
            tx_tolerance: 0.99,
        }
    }
}

impl SearchSpec {
    /// Whether `t`, run at `target` packets/s (`None`: unlimited), passes.
    pub fn passes(&self, target: Option<f64>, t: &Trial) -> bool {
        let sent_enough = target.is_none_or(|r| t.tx_pps >= r * self.tx_tolerance);
        t.tx_packets > 0 && sent_enough && t.loss_ratio <= self.loss_threshold
    }
}

/// A finished search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Search {
    /// The highest rate that passed, packets/s (0 when none did).
    pub rate_pps: f64,
    /// The trial that passed at that rate.
    pub at_rate: Option<Trial>,
    /// What the generator sent with no rate limit (the first trial).
    pub ceiling_pps: f64,
    /// The unlimited trial passed and its port never pushed back: the device kept up
    /// with everything the generator could make, so the rate found is the generator's,
    /// not the device's. (Passed with back-pressure: the device took packets only as
    /// fast as it forwarded them, losing none — the rate found is the device's.)
    pub generator_limited: bool,
    /// Every trial in order: rate asked for and whether it passed.
    pub steps: Vec<Step>,
}

/// One trial of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub target_pps: Option<f64>,
    pub tx_pps: f64,
    pub rx_pps: f64,
    pub loss_ratio: f64,
    pub passed: bool,
}

/// Runs the search: one unlimited trial for the ceiling, then halving the bracket
/// [0, ceiling] until it is narrower than the resolution.
pub fn search<E>(
    spec: &SearchSpec,
    mut run: impl FnMut(Option<f64>) -> Result<Trial, E>,
) -> Result<Search, E> {
    let mut steps = Vec::new();
    let mut record = |target: Option<f64>, t: &Trial, passed: bool| {
        steps.push(Step {
            target_pps: target,
            tx_pps: t.tx_pps,
            rx_pps: t.rx_pps,
            loss_ratio: t.loss_ratio,
            passed,
        });
    };
    let first = run(None)?;
    let ceiling = first.tx_pps;
    let passed = spec.passes(None, &first);
    record(None, &first, passed);
    if passed {
        return Ok(Search {
            rate_pps: ceiling,
            generator_limited: first.tx_backpressure == 0,
            at_rate: Some(first),
            ceiling_pps: ceiling,
            steps,
        });
    }
    let (mut lo, mut hi) = (0.0f64, ceiling);
    let mut best = None;
    let mut trials = 1;
    while trials < spec.max_trials && hi - lo > spec.resolution * hi && hi > 0.0 {
        let mid = (lo + hi) / 2.0;
        let t = run(Some(mid))?;
        trials += 1;
        let passed = spec.passes(Some(mid), &t);
        record(Some(mid), &t, passed);
        if passed {
            lo = mid;
            best = Some(t);
        } else {
            hi = mid;
        }
    }
    Ok(Search {
        rate_pps: if best.is_some() { lo } else { 0.0 },
        at_rate: best,
        ceiling_pps: ceiling,
        generator_limited: false,
        steps,
    })
}

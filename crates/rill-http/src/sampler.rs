//! The rate sampler: every [`SAMPLE_INTERVAL`] it reads the per-topic traffic counters
//! of [`Metrics`](crate::Metrics) and the consumer groups' lag, and keeps
//! [`SAMPLES_MAX`] samples (15 minutes) of the server's totals, of at most
//! [`TOPIC_SERIES_MAX`] topics and of at most [`GROUP_SERIES_MAX`] groups, the first
//! met. Rates are computed when asked, from the counter deltas kept, so an interval a
//! little longer or shorter than 5 s is weighed by its real length.
//!
//! Invariant: every series holds at most [`SAMPLES_MAX`] points and there are at most
//! `1 + TOPIC_SERIES_MAX` rate series and `GROUP_SERIES_MAX` lag series, whatever the
//! number of topics and groups; a topic series idle for the whole window is dropped,
//! freeing its place, and a group's series goes when the group does.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde::Serialize;

use crate::TopicTotals;
use crate::app::AppState;

/// Time between samples.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Samples kept per series: 15 minutes.
pub(crate) const SAMPLES_MAX: usize = 180;
/// Topics with a series of their own at most.
pub(crate) const TOPIC_SERIES_MAX: usize = 1_000;
/// Consumer groups with a lag series at most.
pub(crate) const GROUP_SERIES_MAX: usize = 1_000;
/// Samples in the last minute (for a topic's latest rates).
const MINUTE_SAMPLES: usize = 12;

/// The four traffic counters of a topic, or their change over an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    records_in: u64,
    bytes_in: u64,
    records_out: u64,
    bytes_out: u64,
}

impl Counts {
    fn of(t: &TopicTotals) -> Self {
        Counts {
            records_in: t.records_in,
            bytes_in: t.bytes_in,
            records_out: t.records_out,
            bytes_out: t.bytes_out,
        }
    }

    /// `self - before`, counter by counter; a counter never goes down, but a series
    /// that was dropped and comes back starts from zero, never negative.
    fn since(self, before: Counts) -> Counts {
        Counts {
            records_in: self.records_in.saturating_sub(before.records_in),
            bytes_in: self.bytes_in.saturating_sub(before.bytes_in),
            records_out: self.records_out.saturating_sub(before.records_out),
            bytes_out: self.bytes_out.saturating_sub(before.bytes_out),
        }
    }

    fn add(&mut self, other: Counts) {
        self.records_in += other.records_in;
        self.bytes_in += other.bytes_in;
        self.records_out += other.records_out;
        self.bytes_out += other.bytes_out;
    }

    fn is_zero(self) -> bool {
        self == Counts::default()
    }
}

/// Records and bytes per second, in and out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Rates {
    pub(crate) records_in_per_second: f64,
    pub(crate) bytes_in_per_second: f64,
    pub(crate) records_out_per_second: f64,
    pub(crate) bytes_out_per_second: f64,
}

impl Rates {
    fn over(counts: Counts, elapsed_ms: u64) -> Rates {
        if elapsed_ms == 0 {
            return Rates::default();
        }
        let per_second = |n: u64| n as f64 * 1000.0 / elapsed_ms as f64;
        Rates {
            records_in_per_second: per_second(counts.records_in),
            bytes_in_per_second: per_second(counts.bytes_in),
            records_out_per_second: per_second(counts.records_out),
            bytes_out_per_second: per_second(counts.bytes_out),
        }
    }
}

/// One interval of a rate series: when it ended, how long it was, what was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interval {
    at_ms: i64,
    elapsed_ms: u64,
    counts: Counts,
}

/// A rate point as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RatePoint {
    /// When the interval ended, in milliseconds since the Unix epoch.
    pub(crate) at_ms: i64,
    pub(crate) rates: Rates,
}

/// A lag point: when, and the group's lag summed over its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LagPoint {
    pub(crate) at_ms: i64,
    pub(crate) lag: u64,
}

type TopicKey = (String, String);
type GroupKey = (String, String, String);

#[derive(Debug, Default)]
struct Inner {
    /// The previous sample: when, and every topic's counters then.
    last: Option<(i64, HashMap<TopicKey, Counts>)>,
    totals: VecDeque<Interval>,
    topics: HashMap<TopicKey, VecDeque<Interval>>,
    groups: HashMap<GroupKey, VecDeque<LagPoint>>,
}

/// The samples kept (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct Sampler {
    inner: Mutex<Inner>,
}

fn push_bounded<T>(series: &mut VecDeque<T>, item: T) {
    if series.len() == SAMPLES_MAX {
        series.pop_front();
    }
    series.push_back(item);
}

impl Sampler {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes one sample made at `at_ms`: every topic's counters and every group's lag
    /// per partition (`stream, topic, group, partition, lag`).
    pub(crate) fn record(
        &self,
        at_ms: i64,
        totals: &[TopicTotals],
        lags: &[(String, String, String, u32, u64)],
    ) {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let now: HashMap<TopicKey, Counts> = totals
            .iter()
            .map(|t| ((t.stream.clone(), t.topic.clone()), Counts::of(t)))
            .collect();
        if let Some((last_ms, last)) = inner.last.take() {
            let elapsed_ms = u64::try_from(at_ms.saturating_sub(last_ms)).unwrap_or(0);
            let mut total = Counts::default();
            for (key, counts) in &now {
                let delta = counts.since(last.get(key).copied().unwrap_or_default());
                total.add(delta);
                let interval = Interval {
                    at_ms,
                    elapsed_ms,
                    counts: delta,
                };
                let followed = inner.topics.len();
                match inner.topics.get_mut(key) {
                    Some(series) => push_bounded(series, interval),
                    // A topic gets a series when it first moves and there is room.
                    None if !delta.is_zero() && followed < TOPIC_SERIES_MAX => {
                        let mut series = VecDeque::with_capacity(SAMPLES_MAX);
                        series.push_back(interval);
                        inner.topics.insert(key.clone(), series);
                    }
                    None => {}
                }
            }
            // A series idle for the whole window gives its place up.
            inner.topics.retain(|_, series| {
                series.len() < SAMPLES_MAX || series.iter().any(|i| !i.counts.is_zero())
            });
            push_bounded(
                &mut inner.totals,
                Interval {
                    at_ms,
                    elapsed_ms,
                    counts: total,
                },
            );
        }
        inner.last = Some((at_ms, now));

        let mut per_group: HashMap<GroupKey, u64> = HashMap::new();
        for (stream, topic, group, _, lag) in lags {
            let key = (stream.clone(), topic.clone(), group.clone());
            let sum = per_group.entry(key).or_default();
            *sum = sum.saturating_add(*lag);
        }
        inner.groups.retain(|key, _| per_group.contains_key(key));
        for (key, lag) in per_group {
            let point = LagPoint { at_ms, lag };
            let followed = inner.groups.len();
            match inner.groups.get_mut(&key) {
                Some(series) => push_bounded(series, point),
                None if followed < GROUP_SERIES_MAX => {
                    inner.groups.insert(key, VecDeque::from([point]));
                }
                None => {}
            }
        }
    }

    /// The last `samples` points of the totals, or of one topic (none if it has no
    /// series), oldest first.
    pub(crate) fn rates(&self, topic: Option<(&str, &str)>, samples: usize) -> Vec<RatePoint> {
        let inner = self.inner.lock();
        let series = match topic {
            None => Some(&inner.totals),
            Some((s, t)) => inner.topics.get(&(s.to_owned(), t.to_owned())),
        };
        series
            .map(|series| {
                let skip = series.len().saturating_sub(samples);
                series
                    .iter()
                    .skip(skip)
                    .map(|i| RatePoint {
                        at_ms: i.at_ms,
                        rates: Rates::over(i.counts, i.elapsed_ms),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A topic's average rates over the last minute; `None` when it has no series.
    pub(crate) fn last_minute(&self, stream: &str, topic: &str) -> Option<Rates> {
        let inner = self.inner.lock();
        let series = inner.topics.get(&(stream.to_owned(), topic.to_owned()))?;
        let mut counts = Counts::default();
        let mut elapsed_ms = 0;
        for i in series.iter().rev().take(MINUTE_SAMPLES) {
            counts.add(i.counts);
            elapsed_ms += i.elapsed_ms;
        }
        Some(Rates::over(counts, elapsed_ms))
    }

    /// A group's lag history, oldest first (empty when it has no series).
    pub(crate) fn lag_history(&self, stream: &str, topic: &str, group: &str) -> Vec<LagPoint> {
        let inner = self.inner.lock();
        inner
            .groups
            .get(&(stream.to_owned(), topic.to_owned(), group.to_owned()))
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// Milliseconds since the Unix epoch now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Samples every [`SAMPLE_INTERVAL`] until the future is dropped.
pub(crate) async fn run(state: &Arc<AppState>) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let totals = state.metrics.topic_totals();
        let lags = state.broker.group_lags();
        state.sampler.record(now_ms(), &totals, &lags);
    }
}

#[cfg(test)]
mod tests;

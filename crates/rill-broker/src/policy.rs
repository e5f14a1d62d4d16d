//! The automatic split and merge policy of elastic topics (docs/RANGES.md §7).
//!
//! Once a second ([`POLICY_TICK`], from upkeep) the broker samples how many bytes each
//! open range of every elastic topic with a policy has taken, keeps the samples of the
//! last window, and asks [`decide`] — a pure function of those rates — for at most one
//! change per topic per window:
//!
//! - split, at its middle, the hottest open range whose rate stayed above the threshold
//!   over every interval of the whole window;
//! - else merge the coldest pair of neighbouring open ranges that both stayed below a
//!   quarter of the threshold over the whole window and together averaged below half.
//!
//! Neither touches a range younger than the cooldown (ranges present when the broker
//! opened count as old), passes the open-range bound, or merges below the topic's
//! initial range count. The gap between the thresholds is the hysteresis: a range that
//! split had a rate above `T`, so its two children together average above `T`, never
//! below `T / 2`, and they are not merged back while the load holds; and a merged range
//! averages below `T / 2`, so it is not split again.
//!
//! Bounds: samples per open range at most one window's worth at the tick (plus one),
//! for at most [`OPEN_RANGES_MAX`](crate::OPEN_RANGES_MAX) open ranges per topic; a
//! topic's state goes when it or its policy does.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::Broker;

/// How often the policy samples and decides.
pub(crate) const POLICY_TICK: Duration = Duration::from_secs(1);

/// A change the policy asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Split this open range at its middle.
    Split(u32),
    /// Merge these two neighbouring open ranges.
    Merge(u32, u32),
}

/// An open range as the policy sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RangeView {
    pub(crate) id: u32,
    /// Its first hash: the views are in hash order, so neighbours are adjacent.
    pub(crate) lo: u64,
    /// Its write rate (bytes per second) over each interval of the last window, oldest
    /// first; `None` while it has not been watched for a whole window.
    pub(crate) rates: Option<Vec<f64>>,
    /// Younger than the cooldown: not to be touched.
    pub(crate) young: bool,
}

impl RangeView {
    fn mean(&self) -> Option<f64> {
        let rates = self.rates.as_ref()?;
        (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
    }

    fn all(&self, pred: impl Fn(f64) -> bool) -> bool {
        self.rates
            .as_ref()
            .is_some_and(|r| !r.is_empty() && r.iter().all(|&x| pred(x)))
    }
}

/// The policy's decision over a topic's open ranges (`open`, in hash order) with
/// threshold `threshold` bytes per second, `initial` ranges at creation and at most
/// `max_open` open ranges.
pub(crate) fn decide(
    open: &[RangeView],
    threshold: u64,
    initial: usize,
    max_open: usize,
) -> Option<Decision> {
    let t = threshold as f64;
    if open.len() < max_open {
        let hottest = open
            .iter()
            .filter(|r| !r.young && r.all(|x| x > t))
            .max_by(|a, b| {
                a.mean()
                    .partial_cmp(&b.mean())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        if let Some(r) = hottest {
            return Some(Decision::Split(r.id));
        }
    }
    if open.len() <= initial {
        return None;
    }
    open.windows(2)
        .filter(|pair| {
            pair.iter().all(|r| !r.young && r.all(|x| x < t / 4.0))
                && pair.iter().filter_map(RangeView::mean).sum::<f64>() < t / 2.0
        })
        .min_by(|a, b| {
            let sum = |p: &[RangeView]| p.iter().filter_map(RangeView::mean).sum::<f64>();
            sum(a)
                .partial_cmp(&sum(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|pair| Decision::Merge(pair[0].id, pair[1].id))
}

/// What the policy remembers of one topic.
#[derive(Debug, Default)]
struct TopicState {
    /// Per open range: (when, bytes it had taken by then), oldest first.
    samples: HashMap<u32, VecDeque<(Instant, u64)>>,
    /// When each range was first seen in the topic's map, for ranges that appeared
    /// while the broker ran (the others count as old), whoever leads them.
    born: HashMap<u32, Instant>,
    /// The open ranges of the topic's map at the last tick.
    known: std::collections::HashSet<u32>,
    /// Whether the topic was seen by an earlier tick (its ranges then are old).
    seen: bool,
    /// When the policy last changed the topic.
    last_change: Option<Instant>,
    /// Each open range's write rate over the last [`RATE_WINDOW`], bytes/s, as of the
    /// last tick (`describe` shows it).
    rates: HashMap<u32, u64>,
}

/// Over how long `describe` reports a range's write rate.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(10);

/// The policy's memory, per topic.
#[derive(Debug, Default)]
pub(crate) struct RangePolicy {
    topics: Mutex<HashMap<(String, String), TopicState>>,
    /// Splits and merges since the broker opened, per elastic topic: split and merge
    /// asked for by hand, then by the policy. Entries go with their topics (each tick).
    changes: Mutex<HashMap<(String, String), [u64; 4]>>,
}

/// An elastic topic's range as `/metrics` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeStat {
    /// The stream's name.
    pub stream: String,
    /// The topic's name.
    pub topic: String,
    /// The range's id (its partition number).
    pub range: u32,
    /// Open (takes appends), or sealed.
    pub open: bool,
    /// Bytes of batches appended since the broker opened.
    pub bytes_written: u64,
}

/// How many splits or merges an elastic topic had, by kind and by whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeChanges {
    /// The stream's name.
    pub stream: String,
    /// The topic's name.
    pub topic: String,
    /// `split` or `merge`.
    pub kind: &'static str,
    /// `manual` (a request) or `policy`.
    pub by: &'static str,
    /// Changes since the broker opened.
    pub count: u64,
}

impl RangePolicy {
    /// Counts a change of `stream/topic`'s ranges.
    pub(crate) fn count(&self, stream: &str, topic: &str, merge: bool, by_policy: bool) {
        let i = usize::from(merge) + 2 * usize::from(by_policy);
        self.changes
            .lock()
            .entry((stream.to_owned(), topic.to_owned()))
            .or_default()[i] += 1;
    }
}

impl Broker {
    /// The write rate of each open range of an elastic topic, bytes/s over the last
    /// [`RATE_WINDOW`] (ranges not watched for a second yet are missing).
    pub(crate) fn range_rates(&self, stream: &str, topic: &str) -> HashMap<u32, u64> {
        self.range_policy
            .topics
            .lock()
            .get(&(stream.to_owned(), topic.to_owned()))
            .map(|s| s.rates.clone())
            .unwrap_or_default()
    }

    /// Every range of every elastic topic, for `/metrics`.
    pub fn range_stats(&self) -> Vec<RangeStat> {
        let mut out = Vec::new();
        for (stream, topic, t) in self.all_topics() {
            let Some(map) = t.config.range_map() else {
                continue;
            };
            for r in map.ranges() {
                let Some(p) = t.partitions.get(r.id as usize) else {
                    continue;
                };
                out.push(RangeStat {
                    stream: stream.clone(),
                    topic: topic.clone(),
                    range: r.id,
                    open: r.is_open(),
                    bytes_written: p.bytes_written(),
                });
            }
        }
        out
    }

    /// The splits and merges each elastic topic had since the broker opened.
    pub fn range_changes(&self) -> Vec<RangeChanges> {
        let changes = self.range_policy.changes.lock();
        let mut out = Vec::new();
        for ((stream, topic), counts) in changes.iter() {
            for (i, &count) in counts.iter().enumerate() {
                out.push(RangeChanges {
                    stream: stream.clone(),
                    topic: topic.clone(),
                    kind: if i % 2 == 0 { "split" } else { "merge" },
                    by: if i < 2 { "manual" } else { "policy" },
                    count,
                });
            }
        }
        out.sort_by(|a, b| (&a.stream, &a.topic).cmp(&(&b.stream, &b.topic)));
        out
    }
}

impl Broker {
    /// One tick of the policy at `now` (blocking: a change fsyncs). Returns the changes
    /// it made, for tests.
    ///
    /// In a cluster each node watches the ranges it leads (what it appends) and changes
    /// only those: a split of a hot one, a merge of two cold neighbours it both leads
    /// (docs/RANGES.md §9). A range led elsewhere is never judged here; one whose
    /// leadership arrives is watched for a whole window before it is, but keeps its age
    /// (the cooldown counts from when it appeared in the map).
    pub fn range_policy_tick(
        self: &Arc<Self>,
        now: Instant,
    ) -> Vec<(String, String, crate::RangeChange)> {
        if self.check_running().is_err() {
            return Vec::new();
        }
        let clustered = self.is_clustered();
        let mut wanted = Vec::new();
        {
            let mut states = self.range_policy.topics.lock();
            let mut live = std::collections::HashSet::new();
            for (stream, name, topic) in self.all_topics() {
                // Every elastic topic is watched (`describe` shows rates); the policy
                // acts only on those that ask for it.
                let Some(map) = topic.config.range_map() else {
                    continue;
                };
                let auto = topic.config.auto_split;
                let key = (stream.clone(), name.clone());
                live.insert(key.clone());
                let state = states.entry(key).or_default();
                let window = auto.map_or(RATE_WINDOW, |a| Duration::from_millis(a.window_ms));
                let cooldown =
                    auto.map_or(Duration::ZERO, |a| Duration::from_millis(a.cooldown_ms));
                let keep = window.max(RATE_WINDOW);
                state
                    .rates
                    .retain(|id, _| map.get(*id).is_some_and(|r| r.is_open()));
                let first = !state.seen;
                state.seen = true;
                let mut open: Vec<RangeView> = Vec::new();
                let open_ids: std::collections::HashSet<u32> = map.open().map(|r| r.id).collect();
                state.samples.retain(|id, _| open_ids.contains(id));
                state.born.retain(|id, _| open_ids.contains(id));
                // A range that appeared in the map since the topic's first tick (a
                // split's or a merge's child) is new, on every node: its age does not
                // restart when its leadership moves.
                if !first {
                    for &id in open_ids.difference(&state.known) {
                        state.born.insert(id, now);
                    }
                }
                state.known.clone_from(&open_ids);
                for r in map.open() {
                    let Some(p) = topic.partitions.get(r.id as usize) else {
                        continue;
                    };
                    if clustered && p.replica().is_none_or(|r| r.leading().is_none()) {
                        // Led elsewhere: not watched here (watched anew from when it is).
                        state.samples.remove(&r.id);
                        state.rates.remove(&r.id);
                        open.push(RangeView {
                            id: r.id,
                            lo: r.lo,
                            rates: None,
                            young: true,
                        });
                        continue;
                    }
                    let samples = state.samples.entry(r.id).or_default();
                    samples.push_back((now, p.bytes_written()));
                    // Keep one sample at or before the start of the longer of the
                    // policy's window and the rate's, none older.
                    while samples.len() > 2 && samples[1].0 <= now.checked_sub(keep).unwrap_or(now)
                    {
                        samples.pop_front();
                    }
                    // The rate `describe` shows: over the last RATE_WINDOW, or what
                    // was watched of it.
                    let since = samples
                        .iter()
                        .rposition(|&(t, _)| now.duration_since(t) >= RATE_WINDOW)
                        .unwrap_or(0);
                    if let (Some(&(t0, b0)), Some(&(t1, b1))) = (samples.get(since), samples.back())
                        && t1 > t0
                    {
                        let rate =
                            b1.saturating_sub(b0) as f64 / t1.duration_since(t0).as_secs_f64();
                        state.rates.insert(r.id, rate as u64);
                    }
                    if auto.is_none() {
                        continue;
                    }
                    // The policy judges every second of its last whole window: from
                    // the last sample at or before the window's start.
                    let start = samples
                        .iter()
                        .rposition(|&(t, _)| now.duration_since(t) >= window);
                    let rates = start.map(|start| {
                        samples
                            .iter()
                            .skip(start)
                            .zip(samples.iter().skip(start + 1))
                            .map(|(&(t0, b0), &(t1, b1))| {
                                let secs = t1.duration_since(t0).as_secs_f64().max(1e-3);
                                b1.saturating_sub(b0) as f64 / secs
                            })
                            .collect()
                    });
                    let young = state
                        .born
                        .get(&r.id)
                        .is_some_and(|&b| now.duration_since(b) < cooldown);
                    open.push(RangeView {
                        id: r.id,
                        lo: r.lo,
                        rates,
                        young,
                    });
                }
                let Some(auto) = auto else {
                    continue;
                };
                // In a cluster, a change under way is finished first (docs/RANGES.md §9).
                if topic
                    .config
                    .ranges
                    .as_ref()
                    .is_some_and(|r| r.pending.is_some())
                {
                    continue;
                }
                if state
                    .last_change
                    .is_some_and(|t| now.duration_since(t) < window)
                {
                    continue;
                }
                let initial = map.ranges().iter().filter(|r| r.parents.is_empty()).count();
                tracing::debug!(stream, topic = name, ?open, "the range policy's view");
                if let Some(d) = decide(&open, auto.bytes_per_s, initial, crate::OPEN_RANGES_MAX) {
                    wanted.push((stream, name, d));
                }
            }
            states.retain(|k, _| live.contains(k));
            let elastic: std::collections::HashSet<(String, String)> = self
                .all_topics()
                .into_iter()
                .filter(|(_, _, t)| t.config.ranges.is_some())
                .map(|(s, t, _)| (s, t))
                .collect();
            self.range_policy
                .changes
                .lock()
                .retain(|k, _| elastic.contains(k));
        }
        let mut made = Vec::new();
        for (stream, topic, decision) in wanted {
            let result = if clustered {
                // On the blocking pool (upkeep): the change goes through the cluster.
                tokio::runtime::Handle::current().block_on(async {
                    match decision {
                        Decision::Split(id) => {
                            self.cluster_split_range_by(&stream, &topic, Some(id), None, true)
                                .await
                        }
                        Decision::Merge(a, b) => {
                            self.cluster_merge_ranges_by(&stream, &topic, a, b, true)
                                .await
                        }
                    }
                })
            } else {
                match decision {
                    Decision::Split(id) => {
                        self.change_ranges_by(&stream, &topic, true, |map, _| {
                            map.plan_split(id, None, crate::OPEN_RANGES_MAX)
                        })
                    }
                    Decision::Merge(a, b) => {
                        self.change_ranges_by(&stream, &topic, true, |map, _| map.plan_merge(a, b))
                    }
                }
            };
            match result {
                Ok(change) => {
                    tracing::info!(
                        stream,
                        topic,
                        ?decision,
                        epoch = change.epoch,
                        "the range policy changed the topic's ranges"
                    );
                    if let Some(state) = self
                        .range_policy
                        .topics
                        .lock()
                        .get_mut(&(stream.clone(), topic.clone()))
                    {
                        state.last_change = Some(now);
                    }
                    made.push((stream, topic, change));
                }
                // Another change came first (the plan is checked against the map as it
                // is), or the disk failed: the next tick looks again.
                Err(e) => {
                    tracing::warn!(stream, topic, ?decision, error = %e, "the range policy's change failed");
                }
            }
        }
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u32, lo: u64, rates: &[f64]) -> RangeView {
        RangeView {
            id,
            lo,
            rates: Some(rates.to_vec()),
            young: false,
        }
    }

    #[test]
    fn a_range_hot_over_the_whole_window_splits_the_hottest_first() {
        let open = [
            view(0, 0, &[150.0, 120.0, 110.0]),
            view(1, 10, &[500.0, 400.0, 300.0]),
            view(2, 20, &[500.0, 90.0, 900.0]),
        ];
        assert_eq!(decide(&open, 100, 3, 256), Some(Decision::Split(1)));
        // A dip below the threshold in one interval: not hot.
        let open = [view(0, 0, &[150.0, 99.0, 150.0])];
        assert_eq!(decide(&open, 100, 1, 256), None);
        // Not watched for a whole window yet, young, or at the bound: none.
        let mut unwatched = view(0, 0, &[500.0]);
        unwatched.rates = None;
        assert_eq!(decide(&[unwatched], 100, 1, 256), None);
        let mut young = view(0, 0, &[500.0, 500.0]);
        young.young = true;
        assert_eq!(decide(&[young], 100, 1, 256), None);
        assert_eq!(decide(&[view(0, 0, &[500.0])], 100, 1, 1), None);
    }

    #[test]
    fn cold_neighbours_merge_the_coldest_pair_never_below_the_initial_count() {
        let open = [
            view(3, 0, &[10.0, 20.0]),
            view(4, 10, &[5.0, 5.0]),
            view(5, 20, &[1.0, 1.0]),
            view(6, 30, &[90.0, 90.0]),
        ];
        assert_eq!(decide(&open, 100, 2, 256), Some(Decision::Merge(4, 5)));
        assert_eq!(decide(&open, 100, 4, 256), None);
        // Below a quarter over every interval, or not merged.
        let open = [view(0, 0, &[24.0, 24.0]), view(1, 10, &[24.0, 24.9])];
        assert_eq!(decide(&open, 100, 1, 256), Some(Decision::Merge(0, 1)));
        let open = [view(0, 0, &[24.0, 24.0]), view(1, 10, &[1.0, 26.0])];
        assert_eq!(decide(&open, 100, 1, 256), None);
        // A young range is not merged.
        let mut young = view(1, 10, &[1.0, 1.0]);
        young.young = true;
        assert_eq!(decide(&[view(0, 0, &[1.0, 1.0]), young], 100, 1, 256), None);
    }

    #[test]
    fn the_policy_does_not_flap() {
        // A range split at rate r > T: its children share r, so the pair averages above
        // T and is never merged back while the load holds, however it divides.
        for r in [101.0, 150.0, 400.0, 10_000.0] {
            for share in [0.0, 0.1, 0.5, 0.9, 1.0] {
                let open = [
                    view(1, 0, &[r * share, r * share]),
                    view(2, 10, &[r * (1.0 - share), r * (1.0 - share)]),
                ];
                assert_ne!(
                    decide(&open, 100, 1, 256).map(|d| matches!(d, Decision::Merge(..))),
                    Some(true),
                    "rate {r}, share {share}"
                );
            }
        }
        // A merged pair averaged below T/2: its child is not split while that holds.
        let open = [view(3, 0, &[49.0, 49.0])];
        assert_eq!(decide(&open, 100, 1, 256), None);
    }
}

//! The nemesis's fault schedule, drawn from the seed alone (pure, so it is unit-tested
//! and replays exactly): one fault at a time, each held for a while and then healed,
//! with a quiet spell before the next.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// One fault. Nodes are numbered `1..=nodes`, as `--node-id` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL; the node stays down for the hold, then starts again on its data.
    Kill {
        /// The node.
        node: u64,
    },
    /// SIGSTOP for the hold, then SIGCONT: a node that stops and comes back with
    /// stale beliefs (a long pause, a VM migration).
    Pause {
        /// The node.
        node: u64,
    },
    /// Every link to and from the node cut: connections closed, new ones refused.
    Isolate {
        /// The node.
        node: u64,
    },
    /// Every link to and from the node black-holed: connections stay open and no byte
    /// moves, so only timeouts tell.
    Blackhole {
        /// The node.
        node: u64,
    },
    /// The links between two nodes cut both ways; each still reaches the others.
    Sever {
        /// One node.
        a: u64,
        /// The other.
        b: u64,
    },
    /// The link from one node to another black-holed; the other way passes.
    OneWay {
        /// The node whose messages are lost.
        from: u64,
        /// The node they are sent to.
        to: u64,
    },
}

impl Fault {
    /// Its kind's name, as [`Fault::kinds`] lists it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kill { .. } => "kill",
            Self::Pause { .. } => "pause",
            Self::Isolate { .. } => "isolate",
            Self::Blackhole { .. } => "blackhole",
            Self::Sever { .. } => "sever",
            Self::OneWay { .. } => "one-way",
        }
    }

    /// Every kind's name.
    pub fn kinds() -> &'static [&'static str] {
        &["kill", "pause", "isolate", "blackhole", "sever", "one-way"]
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Kill { node } => write!(f, "kill -9 node {node}"),
            Self::Pause { node } => write!(f, "SIGSTOP node {node}"),
            Self::Isolate { node } => write!(f, "cut every link of node {node}"),
            Self::Blackhole { node } => write!(f, "black-hole every link of node {node}"),
            Self::Sever { a, b } => write!(f, "cut the links between nodes {a} and {b}"),
            Self::OneWay { from, to } => write!(f, "black-hole the link {from} -> {to}"),
        }
    }
}

/// One step of the schedule: a quiet spell, then the fault, held, then healed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// How long the cluster runs unharmed first.
    pub quiet: Duration,
    /// The fault.
    pub fault: Fault,
    /// How long it lasts before it is healed.
    pub hold: Duration,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "after {} ms: {} for {} ms",
            self.quiet.as_millis(),
            self.fault,
            self.hold.as_millis()
        )
    }
}

/// What a schedule is drawn from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// Nodes of the cluster (at least 2).
    pub nodes: u64,
    /// The kinds to draw from (names of [`Fault::kinds`]; empty: all).
    pub kinds: Vec<String>,
    /// The range a fault's hold is drawn from, in ms.
    pub hold_ms: (u64, u64),
    /// The range a quiet spell is drawn from, in ms.
    pub quiet_ms: (u64, u64),
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            nodes: 3,
            kinds: Vec::new(),
            hold_ms: (300, 3000),
            quiet_ms: (500, 2000),
        }
    }
}

impl Shape {
    /// Why the shape cannot be drawn from, if it cannot.
    pub fn invalid(&self) -> Option<String> {
        if self.nodes < 2 {
            return Some("a schedule needs at least 2 nodes".into());
        }
        if let Some(k) = self
            .kinds
            .iter()
            .find(|k| !Fault::kinds().contains(&k.as_str()))
        {
            return Some(format!(
                "unknown fault kind {k:?}; one of {}",
                Fault::kinds().join(", ")
            ));
        }
        if self.hold_ms.0 > self.hold_ms.1 || self.quiet_ms.0 > self.quiet_ms.1 {
            return Some("a range's minimum is above its maximum".into());
        }
        None
    }
}

/// The schedule of `seed`: steps until their quiet spells and holds add up to at least
/// `length`, and at least `min_faults` of them. The first steps take each kind once (so
/// a schedule of as many steps as kinds has every kind); the others draw theirs. The
/// same arguments give the same steps.
///
/// # Panics
///
/// If the shape is [invalid](Shape::invalid).
pub fn draw(seed: u64, shape: &Shape, length: Duration, min_faults: u32) -> Vec<Step> {
    assert!(shape.invalid().is_none(), "an invalid shape: {shape:?}");
    let kinds: Vec<&str> = if shape.kinds.is_empty() {
        Fault::kinds().to_vec()
    } else {
        shape.kinds.iter().map(String::as_str).collect()
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6e65_6d65_7369_7300);
    // The first steps take every kind once, in an order of the seed's; the rest draw.
    let mut first: Vec<&str> = kinds.clone();
    first.shuffle(&mut rng);
    let mut steps = Vec::new();
    let mut total = Duration::ZERO;
    while total < length || steps.len() < min_faults as usize {
        let quiet = Duration::from_millis(rng.random_range(shape.quiet_ms.0..=shape.quiet_ms.1));
        let hold = Duration::from_millis(rng.random_range(shape.hold_ms.0..=shape.hold_ms.1));
        let node = rng.random_range(1..=shape.nodes);
        // Another node than `node`, uniformly.
        let mut other = rng.random_range(1..shape.nodes);
        if other >= node {
            other += 1;
        }
        let kind = match first.get(steps.len()) {
            Some(kind) => kind,
            None => kinds[rng.random_range(0..kinds.len())],
        };
        let fault = match kind {
            "kill" => Fault::Kill { node },
            "pause" => Fault::Pause { node },
            "isolate" => Fault::Isolate { node },
            "blackhole" => Fault::Blackhole { node },
            "sever" => Fault::Sever {
                a: node.min(other),
                b: node.max(other),
            },
            _ => Fault::OneWay {
                from: node,
                to: other,
            },
        };
        total += quiet + hold;
        steps.push(Step { quiet, fault, hold });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes_of(f: Fault) -> Vec<u64> {
        match f {
            Fault::Kill { node }
            | Fault::Pause { node }
            | Fault::Isolate { node }
            | Fault::Blackhole { node } => vec![node],
            Fault::Sever { a, b } => vec![a, b],
            Fault::OneWay { from, to } => vec![from, to],
        }
    }

    #[test]
    fn a_seed_replays_its_schedule_and_another_seed_draws_another() {
        let shape = Shape::default();
        let a = draw(7, &shape, Duration::from_secs(60), 0);
        assert_eq!(a, draw(7, &shape, Duration::from_secs(60), 0));
        assert_ne!(a, draw(8, &shape, Duration::from_secs(60), 0));
    }

    #[test]
    fn steps_stay_in_their_ranges_and_name_distinct_existing_nodes() {
        for seed in 0..200 {
            let shape = Shape {
                nodes: 2 + seed % 4,
                ..Shape::default()
            };
            let steps = draw(seed, &shape, Duration::from_secs(30), 5);
            let total: Duration = steps.iter().map(|s| s.quiet + s.hold).sum();
            assert!(total >= Duration::from_secs(30) && steps.len() >= 5);
            // Beyond the fifth, the last step is the one that reached the length.
            let last = steps.last().map(|s| s.quiet + s.hold).unwrap();
            assert!(steps.len() == 5 || total - last < Duration::from_secs(30));
            for s in &steps {
                assert!((300..=3000).contains(&(s.hold.as_millis() as u64)), "{s}");
                assert!((500..=2000).contains(&(s.quiet.as_millis() as u64)), "{s}");
                let ns = nodes_of(s.fault);
                assert!(ns.iter().all(|n| (1..=shape.nodes).contains(n)), "{s}");
                if let [a, b] = ns[..] {
                    assert_ne!(a, b, "{s}");
                }
            }
        }
    }

    #[test]
    fn the_first_steps_take_every_kind_once_and_a_chosen_kind_alone() {
        for seed in 0..50 {
            let steps = draw(seed, &Shape::default(), Duration::ZERO, 6);
            let mut kinds: Vec<&str> = steps.iter().map(|s| s.fault.kind()).collect();
            kinds.sort_unstable();
            let mut all = Fault::kinds().to_vec();
            all.sort_unstable();
            assert_eq!(kinds, all, "seed {seed}");
        }
        // And after them, all kinds are drawn (not the same one over and over).
        let steps = draw(1, &Shape::default(), Duration::ZERO, 300);
        for kind in Fault::kinds() {
            let n = steps[6..]
                .iter()
                .filter(|s| s.fault.kind() == *kind)
                .count();
            assert!(n > 20, "{kind} drawn {n} times of 294");
        }
        let only = Shape {
            kinds: vec!["pause".into(), "sever".into()],
            ..Shape::default()
        };
        let steps = draw(1, &only, Duration::ZERO, 100);
        assert!(
            steps
                .iter()
                .all(|s| matches!(s.fault.kind(), "pause" | "sever"))
        );
        assert!(steps.iter().any(|s| s.fault.kind() == "pause"));
        assert!(steps.iter().any(|s| s.fault.kind() == "sever"));
    }

    #[test]
    fn bad_shapes_are_refused_with_a_reason() {
        let bad = [
            Shape {
                nodes: 1,
                ..Shape::default()
            },
            Shape {
                kinds: vec!["flood".into()],
                ..Shape::default()
            },
            Shape {
                hold_ms: (5, 4),
                ..Shape::default()
            },
        ];
        for shape in bad {
            assert!(shape.invalid().is_some(), "{shape:?}");
        }
        assert_eq!(Shape::default().invalid(), None);
    }
}

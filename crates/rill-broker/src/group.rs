//! The consumer-group coordinator as a pure state machine: events in
//! (join, leave, heartbeat, revocation done, clock), each member's view out. No I/O and
//! no clock of its own, so it is tested exhaustively without a broker.
//!
//! The group assigns a set of partitions: all of a plain topic's, or the ranges of an
//! elastic topic that are ready and not finished for the group (docs/RANGES.md §6.3;
//! the broker works the set out, `groups.rs`). Assignment is balanced — every member
//! gets ⌊P/M⌋ or ⌈P/M⌉ of the P assignable partitions — and sticky:
//! a rebalance keeps each member's partitions up to its quota and moves only the rest.
//! Rebalancing is cooperative: a partition moving from A to B is first revoked from A,
//! and handed to B only once A says it stopped (or A's session expired), so no two
//! members ever own one partition.
//!
//! The broker side of the requests is in `groups.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Why a group request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The member is not (or no longer) in the group: it left or its session expired.
    #[error("member {0:?} is not in the group (left, or its session expired); rejoin")]
    NotMember(String),
    /// The member does not own the partition now.
    #[error("member {member:?} does not own partition {partition}")]
    NotAssigned {
        /// The member.
        member: String,
        /// The partition.
        partition: u32,
    },
    /// The request names a generation the group has not reached, or one from before
    /// the member's current session (a commit sent before the member rejoined, or
    /// before the broker restarted).
    #[error(
        "generation {got} is not of the member's current session (the group is at {current}); rejoin and read the stored offsets again"
    )]
    StaleGeneration {
        /// The generation in the request.
        got: u64,
        /// The group's generation.
        current: u64,
    },
}

/// What a member may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberView {
    /// The group's generation; it grows with every assignment change.
    pub generation: u64,
    /// Partitions the member owns: it may read them and store their offsets.
    pub owned: BTreeSet<u32>,
    /// Owned partitions it must stop reading (after storing their offsets) and report
    /// back with [`Coordinator::revoked`].
    pub revoke: BTreeSet<u32>,
}

#[derive(Debug, Clone)]
struct Member {
    /// Partitions the member owns now.
    owned: BTreeSet<u32>,
    /// Partitions it should own once the rebalance settles.
    target: BTreeSet<u32>,
    last_seen: Instant,
    /// The generation the member joined at: requests of an earlier generation come
    /// from a session before this one.
    joined: u64,
    /// What the member last reported about itself, in name order (opaque here).
    report: Vec<(String, u64)>,
}

/// One group's membership and assignment.
#[derive(Debug, Clone)]
pub(crate) struct Coordinator {
    /// The partitions to assign.
    assignable: BTreeSet<u32>,
    session_timeout: Duration,
    generation: u64,
    members: BTreeMap<String, Member>,
}

impl Coordinator {
    /// A group over `partitions` partitions whose members expire after
    /// `session_timeout` without a heartbeat.
    #[cfg(test)]
    pub(crate) fn new(partitions: u32, session_timeout: Duration) -> Self {
        Self::starting_at((0..partitions).collect(), session_timeout, 0)
    }

    /// A group assigning `assignable`, with generations counting from `generation`. A broker
    /// starts each group's generations at its clock (µs), so a generation never repeats
    /// across restarts: a commit sent to a broker that then died is refused by the next
    /// one instead of landing in a new session that started from an older offset.
    pub(crate) fn starting_at(
        assignable: BTreeSet<u32>,
        session_timeout: Duration,
        generation: u64,
    ) -> Self {
        Self {
            assignable,
            session_timeout,
            generation,
            members: BTreeMap::new(),
        }
    }

    /// How long a member may stay silent.
    pub(crate) fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// The group's generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Member ids, sorted.
    pub(crate) fn members(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// The partitions to assign are `assignable` now: a plain topic grew (an alter added
    /// partitions; no member gives up one it owns, since every quota grows or stays), or
    /// an elastic topic's ready ranges changed (a range the group finished is revoked
    /// from its owner, its children are handed out). Returns whether the set changed.
    pub(crate) fn set_assignable(&mut self, assignable: BTreeSet<u32>) -> bool {
        if assignable == self.assignable {
            return false;
        }
        self.assignable = assignable;
        self.rebalance();
        true
    }

    /// The partitions assigned (or being handed over).
    pub(crate) fn assignable(&self) -> &BTreeSet<u32> {
        &self.assignable
    }

    /// Adds a member (a rejoin of a known member is a heartbeat) and rebalances.
    pub(crate) fn join(&mut self, member: &str, now: Instant) -> MemberView {
        if let Some(m) = self.members.get_mut(member) {
            m.last_seen = now;
        } else {
            self.members.insert(
                member.to_owned(),
                Member {
                    owned: BTreeSet::new(),
                    target: BTreeSet::new(),
                    last_seen: now,
                    joined: u64::MAX,
                    report: Vec::new(),
                },
            );
            let before = self.generation;
            self.rebalance();
            // Every session starts its own generation, even when nothing moved, so a
            // request from an earlier session of this member id can be told apart.
            if self.generation == before {
                self.generation += 1;
            }
            let generation = self.generation;
            if let Some(m) = self.members.get_mut(member) {
                m.joined = generation;
            }
        }
        self.view(member).expect("just joined")
    }

    /// Removes a member that stopped cleanly (its offsets are stored); its partitions
    /// move at once. Returns whether it was a member.
    pub(crate) fn leave(&mut self, member: &str) -> bool {
        let was = self.members.remove(member).is_some();
        if was {
            self.rebalance();
        }
        was
    }

    /// Records a heartbeat and returns the member's view.
    pub(crate) fn heartbeat(
        &mut self,
        member: &str,
        now: Instant,
    ) -> Result<MemberView, GroupError> {
        let m = self
            .members
            .get_mut(member)
            .ok_or_else(|| GroupError::NotMember(member.to_owned()))?;
        m.last_seen = now;
        self.view(member)
    }

    /// The member stopped reading `partitions` (it was asked to revoke them); they go to
    /// their new owners.
    pub(crate) fn revoked(
        &mut self,
        member: &str,
        partitions: &[u32],
    ) -> Result<MemberView, GroupError> {
        let m = self
            .members
            .get_mut(member)
            .ok_or_else(|| GroupError::NotMember(member.to_owned()))?;
        for p in partitions {
            // Only partitions it was asked to give up; a stale report changes nothing.
            if !m.target.contains(p) {
                m.owned.remove(p);
            }
        }
        self.hand_over();
        self.view(member)
    }

    /// Removes members whose session expired by `now`; returns them. Their partitions
    /// move at once: a member that missed its heartbeats is presumed stopped.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<String> {
        let timeout = self.session_timeout;
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| now.saturating_duration_since(m.last_seen) > timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            self.members.remove(id);
        }
        if !expired.is_empty() {
            self.rebalance();
        }
        expired
    }

    /// Whether `member` may store an offset of `partition`: it must be in the group and
    /// own the partition now. A zombie (expired or removed member) is refused.
    pub(crate) fn check_commit(
        &self,
        member: &str,
        generation: u64,
        partition: u32,
    ) -> Result<(), GroupError> {
        let m = self
            .members
            .get(member)
            .ok_or_else(|| GroupError::NotMember(member.to_owned()))?;
        if generation > self.generation || generation < m.joined {
            return Err(GroupError::StaleGeneration {
                got: generation,
                current: self.generation,
            });
        }
        if !m.owned.contains(&partition) {
            return Err(GroupError::NotAssigned {
                member: member.to_owned(),
                partition,
            });
        }
        Ok(())
    }

    /// A member's view.
    /// Replaces what `member` reports about itself (kept until it leaves or expires).
    pub(crate) fn set_report(
        &mut self,
        member: &str,
        report: Vec<(String, u64)>,
    ) -> Result<(), GroupError> {
        let m = self
            .members
            .get_mut(member)
            .ok_or_else(|| GroupError::NotMember(member.to_owned()))?;
        m.report = report;
        Ok(())
    }

    /// What `member` last reported about itself (empty if nothing, or not a member).
    pub(crate) fn report(&self, member: &str) -> &[(String, u64)] {
        self.members.get(member).map_or(&[], |m| &m.report)
    }

    pub(crate) fn view(&self, member: &str) -> Result<MemberView, GroupError> {
        let m = self
            .members
            .get(member)
            .ok_or_else(|| GroupError::NotMember(member.to_owned()))?;
        Ok(MemberView {
            generation: self.generation,
            owned: m.owned.clone(),
            revoke: m.owned.difference(&m.target).copied().collect(),
        })
    }

    /// Who owns each owned partition now (a partition not in it: nobody).
    pub(crate) fn owners(&self) -> BTreeMap<u32, &str> {
        let mut owners = BTreeMap::new();
        for (id, m) in &self.members {
            for &p in &m.owned {
                owners.insert(p, id.as_str());
            }
        }
        owners
    }

    /// Whether every revocation is done: each member owns exactly its target.
    #[cfg(test)]
    pub(crate) fn is_settled(&self) -> bool {
        self.members.values().all(|m| m.owned == m.target)
    }

    /// Recomputes the targets (balanced, sticky), bumps the generation if they changed,
    /// and hands over what is free.
    fn rebalance(&mut self) {
        let count = self.members.len();
        let total = self.assignable.len();
        let before: Vec<BTreeSet<u32>> = self.members.values().map(|m| m.target.clone()).collect();
        if let Some(base) = total.checked_div(count) {
            let extra = total % count;
            // The larger quotas go to the members holding the most now (then by id),
            // so fewer partitions move.
            let mut order: Vec<(&String, usize)> = self
                .members
                .iter()
                .map(|(id, m)| (id, m.target.len().max(m.owned.len())))
                .collect();
            order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let quotas: BTreeMap<String, usize> = order
                .iter()
                .enumerate()
                .map(|(i, (id, _))| ((*id).clone(), base + usize::from(i < extra)))
                .collect();
            let mut taken = BTreeSet::new();
            // Keep what each member has, up to its quota (owned partitions first).
            for (id, m) in &mut self.members {
                let quota = quotas[id];
                let keep: Vec<u32> = m
                    .owned
                    .iter()
                    .chain(m.target.iter())
                    .copied()
                    .filter(|p| self.assignable.contains(p))
                    .collect();
                let mut target = BTreeSet::new();
                for p in keep {
                    if target.len() < quota && !taken.contains(&p) {
                        target.insert(p);
                        taken.insert(p);
                    }
                }
                m.target = target;
            }
            // Give the rest to members below their quota.
            let mut free = self.assignable.iter().filter(|p| !taken.contains(*p));
            for (id, m) in &mut self.members {
                while m.target.len() < quotas[id] {
                    match free.next() {
                        Some(&p) => {
                            m.target.insert(p);
                        }
                        None => break,
                    }
                }
            }
        }
        let after: Vec<BTreeSet<u32>> = self.members.values().map(|m| m.target.clone()).collect();
        if before != after || before.len() != after.len() {
            self.generation += 1;
        }
        self.hand_over();
    }

    /// Gives each member the target partitions that nobody owns now.
    fn hand_over(&mut self) {
        let owned: BTreeSet<u32> = self
            .members
            .values()
            .flat_map(|m| m.owned.iter().copied())
            .collect();
        for m in self.members.values_mut() {
            let grant: Vec<u32> = m.target.difference(&owned).copied().collect();
            m.owned.extend(grant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t0() -> Instant {
        Instant::now()
    }

    /// Acknowledges every pending revocation.
    fn settle(c: &mut Coordinator) {
        let members: Vec<String> = c.members().map(str::to_owned).collect();
        for m in members {
            let revoke: Vec<u32> = c.view(&m).unwrap().revoke.into_iter().collect();
            c.revoked(&m, &revoke).unwrap();
        }
    }

    /// Owner of each of partitions `0..n`, by name.
    fn owner_list(c: &Coordinator, n: u32) -> Vec<Option<String>> {
        let owners = c.owners();
        (0..n)
            .map(|p| owners.get(&p).map(|m| (*m).to_owned()))
            .collect()
    }

    fn sizes(c: &Coordinator) -> Vec<usize> {
        c.members()
            .map(|m| c.view(m).unwrap().owned.len())
            .collect()
    }

    #[test]
    fn a_join_moves_only_what_the_newcomer_needs_and_only_after_revocation() {
        let now = t0();
        let mut c = Coordinator::new(6, Duration::from_secs(10));
        assert_eq!(c.join("a", now).owned.len(), 6);
        let g1 = c.generation();
        let b = c.join("b", now);
        assert!(c.generation() > g1);
        // b gets nothing until a has let go.
        assert!(b.owned.is_empty());
        let a = c.view("a").unwrap();
        assert_eq!(a.revoke.len(), 3);
        assert!(
            c.check_commit("a", c.generation(), *a.revoke.iter().next().unwrap())
                .is_ok()
        );
        c.revoked("a", &a.revoke.iter().copied().collect::<Vec<_>>())
            .unwrap();
        let b = c.view("b").unwrap();
        assert_eq!(b.owned, a.revoke);
        assert_eq!(sizes(&c), vec![3, 3]);
        assert!(c.is_settled());
        // a no longer owns the moved partitions: its commits for them are refused.
        let moved = *b.owned.iter().next().unwrap();
        assert!(matches!(
            c.check_commit("a", c.generation(), moved),
            Err(GroupError::NotAssigned { .. })
        ));
    }

    #[test]
    fn a_leave_or_expiry_moves_only_the_leavers_partitions() {
        let now = t0();
        let mut c = Coordinator::new(12, Duration::from_secs(10));
        for m in ["a", "b", "c"] {
            c.join(m, now);
            settle(&mut c);
        }
        assert_eq!(sizes(&c), vec![4, 4, 4]);
        let a_before = c.view("a").unwrap().owned;
        let c_before = c.view("c").unwrap().owned;
        assert!(c.leave("b"));
        assert_eq!(sizes(&c), vec![6, 6]);
        assert!(a_before.is_subset(&c.view("a").unwrap().owned));
        assert!(c_before.is_subset(&c.view("c").unwrap().owned));
        // c stops heartbeating: after the timeout it is removed and a takes everything.
        c.heartbeat("a", now + Duration::from_secs(9)).unwrap();
        assert_eq!(
            c.expire(now + Duration::from_secs(11)),
            vec!["c".to_owned()]
        );
        assert_eq!(c.view("a").unwrap().owned.len(), 12);
        // The zombie cannot commit, heartbeat or acknowledge.
        assert!(matches!(
            c.check_commit("c", 1, 0),
            Err(GroupError::NotMember(_))
        ));
        assert!(c.heartbeat("c", now).is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join(u8),
        Leave(u8),
        Heartbeat(u8),
        Revoke(u8),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..6u8).prop_map(Op::Join),
            1 => (0..6u8).prop_map(Op::Leave),
            2 => (0..6u8).prop_map(Op::Heartbeat),
            3 => (0..6u8).prop_map(Op::Revoke),
            1 => (0..8u64).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// After every step no partition has two owners and every owned partition is
        /// either the owner's target or pending revocation; once settled, the
        /// assignment is balanced and covers every partition.
        #[test]
        fn random_membership_never_double_assigns(
            partitions in 1..16u32,
            ops in prop::collection::vec(op(), 1..60),
        ) {
            let start = t0();
            let mut now = start;
            let mut c = Coordinator::new(partitions, Duration::from_secs(5));
            for op in ops {
                match op {
                    Op::Join(m) => { c.join(&format!("m{m}"), now); }
                    Op::Leave(m) => { c.leave(&format!("m{m}")); }
                    Op::Heartbeat(m) => { let _ = c.heartbeat(&format!("m{m}"), now); }
                    Op::Revoke(m) => {
                        if let Ok(v) = c.view(&format!("m{m}")) {
                            let r: Vec<u32> = v.revoke.into_iter().collect();
                            c.revoked(&format!("m{m}"), &r).unwrap();
                        }
                    }
                    Op::Advance(s) => { now += Duration::from_secs(s); c.expire(now); }
                }
                // At most one owner per partition.
                let mut seen = BTreeSet::new();
                for m in c.members() {
                    for p in c.view(m).unwrap().owned {
                        prop_assert!(p < partitions);
                        prop_assert!(seen.insert(p), "partition {} owned twice", p);
                    }
                }
            }
            settle(&mut c);
            prop_assert!(c.is_settled());
            let s = sizes(&c);
            if let (Some(min), Some(max)) = (s.iter().min(), s.iter().max()) {
                prop_assert!(max - min <= 1, "unbalanced: {:?}", s);
                prop_assert_eq!(s.iter().sum::<usize>(), partitions as usize);
                prop_assert!(owner_list(&c, partitions).iter().all(Option::is_some));
            }
        }

        /// A leave from a settled group moves only the leaver's partitions.
        #[test]
        fn leaves_are_sticky(partitions in 1..24u32, members in 2..6usize, leaver in 0..6usize) {
            let now = t0();
            let mut c = Coordinator::new(partitions, Duration::from_secs(5));
            for m in 0..members {
                c.join(&format!("m{m}"), now);
                settle(&mut c);
            }
            let leaver = format!("m{}", leaver % members);
            let before = owner_list(&c, partitions);
            c.leave(&leaver);
            settle(&mut c);
            for (b, a) in before.iter().zip(owner_list(&c, partitions)) {
                if b.as_deref() != Some(leaver.as_str()) {
                    prop_assert_eq!(b, &a, "a partition not of the leaver moved");
                }
            }
        }

        /// Adding partitions to a settled group moves no owned partition (nothing is
        /// revoked), hands out every added one at once and stays balanced.
        #[test]
        fn added_partitions_are_assigned_without_moving_any(
            partitions in 1..24u32,
            added in 1..24u32,
            members in 1..6usize,
        ) {
            let now = t0();
            let mut c = Coordinator::new(partitions, Duration::from_secs(5));
            for m in 0..members {
                c.join(&format!("m{m}"), now);
                settle(&mut c);
            }
            let before = owner_list(&c, partitions);
            let generation = c.generation();
            prop_assert!(c.set_assignable((0..partitions + added).collect()));
            prop_assert!(!c.set_assignable((0..partitions + added).collect()), "the same set changes nothing");
            prop_assert!(c.generation() > generation);
            for m in c.members() {
                prop_assert!(c.view(m).unwrap().revoke.is_empty(), "{} must revoke", m);
            }
            prop_assert!(c.is_settled());
            let after = owner_list(&c, partitions + added);
            prop_assert!(after.iter().all(Option::is_some), "an added partition is unassigned");
            for (b, a) in before.iter().zip(&after) {
                prop_assert_eq!(b, a, "an owned partition moved");
            }
            let s = sizes(&c);
            prop_assert!(s.iter().max().unwrap() - s.iter().min().unwrap() <= 1, "unbalanced: {:?}", s);
        }

        /// A join into a settled group moves exactly the partitions the newcomer gets.
        #[test]
        fn joins_are_sticky(partitions in 1..24u32, members in 1..6usize) {
            let now = t0();
            let mut c = Coordinator::new(partitions, Duration::from_secs(5));
            for m in 0..members {
                c.join(&format!("m{m}"), now);
                settle(&mut c);
            }
            let before = owner_list(&c, partitions);
            c.join("new", now);
            settle(&mut c);
            let after = owner_list(&c, partitions);
            let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
            let newcomer = c.view("new").unwrap().owned.len();
            prop_assert_eq!(moved, newcomer);
        }

        /// An elastic topic's assignable ranges change under a group (a range finished
        /// and left the set, its children came in), interleaved with members coming and
        /// going: no range is ever owned twice, a range leaves its owner only by a
        /// revocation (never while it could still be read), nothing outside the set is
        /// handed out, and once settled every assignable range is owned, balanced.
        #[test]
        fn changing_range_sets_are_assigned_safely(
            steps in prop::collection::vec(
                (prop::collection::btree_set(0..32u32, 0..12), 0..4u8, any::<bool>()),
                1..40,
            ),
        ) {
            let now = t0();
            let mut c = Coordinator::starting_at((0..4).collect(), Duration::from_secs(5), 0);
            c.join("m0", now);
            for (set, member, settle_now) in steps {
                let before = c.owners().into_iter().map(|(p, m)| (p, m.to_owned())).collect::<BTreeMap<_, _>>();
                c.set_assignable(set.clone());
                // A range owned before is still owned by the same member until it is
                // revoked: the set changing takes nothing away by itself.
                let owners = c.owners();
                for (p, m) in &before {
                    prop_assert_eq!(owners.get(p).copied(), Some(m.as_str()), "range {} left its owner unrevoked", p);
                }
                // Newly handed-out ranges are in the set.
                for (p, _) in owners.iter().filter(|(p, _)| !before.contains_key(*p)) {
                    prop_assert!(set.contains(p), "range {} outside the set handed out", p);
                }
                // Ranges out of the set are asked back.
                for m in c.members() {
                    let v = c.view(m).unwrap();
                    for p in &v.owned {
                        if !set.contains(p) {
                            prop_assert!(v.revoke.contains(p), "{} keeps {} without revoking", m, p);
                        }
                    }
                }
                match member {
                    0 => { c.join(&format!("m{}", set.len() % 3), now); }
                    1 => { c.leave(&format!("m{}", set.len() % 3)); }
                    _ => {}
                }
                if settle_now {
                    let members = c.members().count();
                    settle(&mut c);
                    prop_assert!(c.is_settled());
                    let owners = c.owners();
                    let owned: BTreeSet<u32> = owners.keys().copied().collect();
                    if members > 0 {
                        prop_assert_eq!(&owned, c.assignable());
                        let s = sizes(&c);
                        prop_assert!(s.iter().max().unwrap() - s.iter().min().unwrap() <= 1, "unbalanced: {:?}", s);
                    } else {
                        prop_assert!(owned.is_empty());
                    }
                }
            }
        }
    }
}

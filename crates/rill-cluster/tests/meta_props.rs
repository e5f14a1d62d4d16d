//! Property tests of the metadata state machine: applying the same commands gives the
//! same state on every node, a snapshot (the state as JSON) restores a state that goes
//! on identically, and no sequence of commands breaks the invariants.

use proptest::prelude::*;
use rill_cluster::{MetaCommand, MetaResponse, MetaState, NodeInfo, OffsetKey, TopicSpec};

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("c".to_owned())
    ]
}

fn key() -> impl Strategy<Value = OffsetKey> {
    (name(), name(), 0u32..4, name()).prop_map(|(stream, topic, partition, consumer)| OffsetKey {
        stream,
        topic,
        partition,
        consumer,
    })
}

fn spec() -> impl Strategy<Value = TopicSpec> {
    (
        proptest::collection::vec(proptest::collection::vec(1u64..4, 0..3), 0..4),
        options(),
        0u64..3,
    )
        .prop_map(|(replicas, options, incarnation)| TopicSpec {
            replicas,
            options,
            incarnation,
        })
}

fn command() -> impl Strategy<Value = MetaCommand> {
    prop_oneof![
        (1u64..4, name()).prop_map(|(id, n)| MetaCommand::RegisterNode {
            id,
            info: NodeInfo {
                peer: format!("{n}:1"),
                client: format!("{n}:2"),
            },
        }),
        name().prop_map(|name| MetaCommand::CreateStream { name }),
        name().prop_map(|name| MetaCommand::DeleteStream { name }),
        (name(), name(), spec()).prop_map(|(stream, topic, spec)| MetaCommand::CreateTopic {
            stream,
            topic,
            spec
        }),
        (name(), name()).prop_map(|(stream, topic)| MetaCommand::DeleteTopic { stream, topic }),
        proptest::collection::vec((key(), any::<u64>()), 0..4)
            .prop_map(|offsets| MetaCommand::StoreOffsets { offsets }),
        key().prop_map(|key| MetaCommand::DeleteOffset { key }),
        (0u64..4, "[a-z]{0,8}").prop_map(|(expected, text)| MetaCommand::ReplaceAuth {
            expected,
            text: text.into(),
        }),
        (
            name(),
            name(),
            options(),
            options(),
            proptest::collection::vec(proptest::collection::vec(1u64..4, 0..3), 0..3),
        )
            .prop_map(
                |(stream, topic, expected, options, add)| MetaCommand::AlterTopic {
                    stream,
                    topic,
                    expected,
                    options,
                    add,
                }
            ),
        (name(), name(), name()).prop_map(|(stream, topic, consumer)| {
            MetaCommand::DeleteConsumer {
                stream,
                topic,
                consumer,
            }
        }),
        proptest::collection::vec((key(), any::<u64>()), 0..4)
            .prop_map(|offsets| MetaCommand::ResetOffsets { offsets }),
    ]
}

/// Options bytes from a small set, so an alter's expected options often match.
fn options() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0u8..2, 0..2)
}

proptest! {
    #[test]
    fn two_nodes_applying_the_same_commands_hold_the_same_state(
        commands in proptest::collection::vec(command(), 0..40),
    ) {
        let (mut a, mut b) = (MetaState::default(), MetaState::default());
        for c in &commands {
            let (ra, rb) = (a.apply(c), b.apply(c));
            prop_assert_eq!(ra, rb);
        }
        prop_assert_eq!(a, b);
    }

    #[test]
    fn a_snapshot_restores_a_state_that_goes_on_the_same(
        before in proptest::collection::vec(command(), 0..30),
        after in proptest::collection::vec(command(), 0..30),
    ) {
        let mut live = MetaState::default();
        for c in &before {
            live.apply(c);
        }
        let snapshot = serde_json::to_vec(&live).unwrap();
        let mut restored: MetaState = serde_json::from_slice(&snapshot).unwrap();
        prop_assert_eq!(&restored, &live);
        for c in &after {
            prop_assert_eq!(live.apply(c), restored.apply(c));
        }
        prop_assert_eq!(restored, live);
    }

    #[test]
    fn no_sequence_leaves_an_offset_of_a_partition_that_does_not_exist(
        commands in proptest::collection::vec(command(), 0..60),
    ) {
        let mut state = MetaState::default();
        for c in &commands {
            let response = state.apply(c);
            if let (MetaCommand::StoreOffsets { offsets }, MetaResponse::Stored { refused }) =
                (c, &response)
            {
                for (i, (k, o)) in offsets.iter().enumerate() {
                    let stored = state.offsets.get(k) == Some(o);
                    // Refused exactly when the partition is not there; a later entry
                    // for the same key may overwrite an earlier one.
                    if refused.contains(&i) {
                        prop_assert!(state.topic(&k.stream, &k.topic).is_none_or(|t| k.partition >= t.partitions()));
                    } else if offsets[i + 1..].iter().all(|(later, _)| later != k) {
                        prop_assert!(stored, "{k:?} not stored");
                    }
                }
            }
            if let MetaCommand::CreateTopic { spec, .. } = c
                && (spec.replicas.is_empty() || spec.replicas.iter().any(Vec::is_empty))
            {
                prop_assert!(matches!(response, MetaResponse::Conflict(_) | MetaResponse::NotFound(_)));
            }
            prop_assert!(state.consistent(), "after {c}: {state:?}");
        }
    }

    /// The operators' commands: an alter applies only against the options it was made
    /// from and never removes a partition; a reset stores every offset or none; a
    /// consumer's delete removes exactly its offsets of the topic.
    #[test]
    fn alters_resets_and_deletes_keep_their_promises(
        commands in proptest::collection::vec(command(), 0..60),
    ) {
        let mut state = MetaState::default();
        for c in &commands {
            let before = state.clone();
            let response = state.apply(c);
            match c {
                MetaCommand::AlterTopic { stream, topic, expected, options, add } => {
                    match before.topic(stream, topic) {
                        Some(old) if old.options == *expected && add.iter().all(|r| !r.is_empty()) => {
                            prop_assert_eq!(&response, &MetaResponse::Done);
                            let new = state.topic(stream, topic).unwrap();
                            prop_assert_eq!(&new.options, options);
                            prop_assert_eq!(new.partitions(), old.partitions() + add.len() as u32);
                            prop_assert_eq!(&new.replicas[..old.replicas.len()], &old.replicas[..]);
                            prop_assert_eq!(new.incarnation, old.incarnation);
                        }
                        _ => {
                            prop_assert!(matches!(response, MetaResponse::Conflict(_) | MetaResponse::NotFound(_)));
                            prop_assert_eq!(&state, &before);
                        }
                    }
                }
                MetaCommand::ResetOffsets { offsets } => {
                    let all_exist = offsets.iter().all(|(k, _)| {
                        before.topic(&k.stream, &k.topic).is_some_and(|t| k.partition < t.partitions())
                    });
                    if all_exist {
                        prop_assert_eq!(&response, &MetaResponse::Done);
                        for (i, (k, o)) in offsets.iter().enumerate() {
                            if offsets[i + 1..].iter().all(|(later, _)| later != k) {
                                prop_assert_eq!(state.offsets.get(k), Some(o));
                            }
                        }
                    } else {
                        prop_assert!(matches!(response, MetaResponse::NotFound(_)));
                        prop_assert_eq!(&state, &before);
                    }
                }
                MetaCommand::DeleteConsumer { stream, topic, consumer } => {
                    let of = |k: &OffsetKey| k.stream == *stream && k.topic == *topic && k.consumer == *consumer;
                    let had = before.offsets.keys().filter(|k| of(k)).count() as u32;
                    prop_assert_eq!(response, MetaResponse::DeletedCount(had));
                    prop_assert!(!state.offsets.keys().any(of));
                    prop_assert_eq!(state.offsets.len(), before.offsets.len() - had as usize);
                }
                _ => {}
            }
            for (stream, topics) in &before.streams {
                for (topic, spec) in topics {
                    if let Some(now) = state.topic(stream, topic)
                        && now.incarnation == spec.incarnation
                    {
                        prop_assert!(now.partitions() >= spec.partitions(), "a partition was removed");
                    }
                }
            }
            prop_assert!(state.consistent(), "after {c}: {state:?}");
        }
    }

    /// The credentials change only by a compare-and-set against their version: each
    /// applied replacement raises it by one, any other leaves text and version alone.
    #[test]
    fn credentials_change_only_against_the_version_they_were_made_from(
        commands in proptest::collection::vec(command(), 0..60),
    ) {
        let mut state = MetaState::default();
        for c in &commands {
            let before = state.auth.clone();
            let response = state.apply(c);
            match c {
                MetaCommand::ReplaceAuth { expected, text } => {
                    let version = before.as_ref().map_or(0, |a| a.version);
                    if *expected == version {
                        prop_assert_eq!(response, MetaResponse::Done);
                        let now = state.auth.as_ref().unwrap();
                        prop_assert_eq!(now.version, version + 1);
                        prop_assert_eq!(&now.text, text);
                    } else {
                        prop_assert!(matches!(response, MetaResponse::Conflict(_)));
                        prop_assert_eq!(&state.auth, &before);
                    }
                }
                _ => prop_assert_eq!(&state.auth, &before),
            }
        }
    }
}

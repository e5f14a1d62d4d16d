//! Typed events against a real broker, over both transports (the `rill` binary on a free
//! port, `tcp::*`, and embedded, `embedded::*`): the acceptance scenarios of
//! docs/EVENTS.md that need a broker — a failing key does not delay another and its
//! retried work folds with what arrived meanwhile (1), exhausted retries dead-letter
//! (2), transient failures retry in place (3), two consumer names keep apart (7) — and a
//! validation test for every start error; fences (4) and reductions (5) as the runtime
//! executes them.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rill_client::{Client, Position, TopicOptions};
use rill_events::{
    Assignment, ConsumerConfig, Context, Event, EventHandler, EventKey, HandleError, Handlers,
    Publisher, Semigroup, StartError, dead_letter_topic, retry_topic,
};
use serde::{Deserialize, Serialize};

over_both_transports!(
    a_failing_key_does_not_delay_another_and_its_retry_folds_what_arrived_meanwhile,
    exhausted_retries_dead_letter_the_event_and_the_key_goes_on,
    a_transient_failure_retries_in_place_then_escalates,
    two_consumer_names_keep_their_own_retry_and_dead_letter_topics,
    start_refuses_every_invalid_configuration_and_creates_nothing,
    fences_order_what_the_contract_requires_also_across_a_retry,
    runs_are_reduced_by_their_algebra,
    a_retry_backlog_past_its_bound_stops_the_main_partition_instead_of_growing,
    records_that_cannot_be_handled_are_dead_lettered_with_why_and_the_rest_goes_on,
    a_key_quarantined_by_one_batch_is_diverted_from_the_next_already_read,
    stores_wait_out_the_commit_interval_and_then_reach_the_last_offset_done,
);

const STREAM: &str = "shop";
const TOPIC: &str = "ledger";

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, EventKey)]
#[event_key(topic = "ledger")]
struct User(String);

/// Associative: a run of one user's `Add`s folds into one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(name = "add", algebra = Associative)]
struct Add {
    #[event(key)]
    user: User,
    amount: u64,
}

impl Semigroup for Add {
    fn combine(self, next: Self) -> Self {
        Self {
            user: self.user,
            amount: self.amount + next.amount,
        }
    }
}

fn add(user: &str, amount: u64) -> Add {
    Add {
        user: User(user.into()),
        amount,
    }
}

/// Records every call, and fails as told.
#[derive(Default)]
struct Ledger {
    /// (user, amounts of the call, succeeded).
    calls: Mutex<Vec<(String, Vec<u64>, bool)>>,
    /// Users whose calls fail retryably.
    failing: Mutex<Vec<String>>,
    /// Users whose calls fail transiently this many more times.
    transient: Mutex<HashMap<String, u32>>,
    /// Users whose calls are unrecoverable.
    poison: Mutex<Vec<String>>,
}

impl Ledger {
    fn calls_of(&self, user: &str) -> Vec<(Vec<u64>, bool)> {
        self.calls
            .lock()
            .iter()
            .filter(|(u, _, _)| u == user)
            .map(|(_, a, ok)| (a.clone(), *ok))
            .collect()
    }

    fn applied(&self, user: &str) -> u64 {
        self.calls_of(user)
            .iter()
            .filter(|(_, ok)| *ok)
            .flat_map(|(a, _)| a.clone())
            .sum()
    }
}

struct Apply(Arc<Ledger>);

impl EventHandler<Add> for Apply {
    const MAX_BATCH: usize = 100;

    async fn handle(&self, ctx: &Context, run: &[Add]) -> Result<(), HandleError> {
        let user = ctx.key::<User>().expect("the key decodes").0;
        let amounts: Vec<u64> = run.iter().map(|a| a.amount).collect();
        let ledger = &self.0;
        let verdict = if ledger.failing.lock().contains(&user) {
            Err(HandleError::retryable(format!("{user} is locked")))
        } else if ledger.poison.lock().contains(&user) {
            Err(HandleError::unrecoverable(format!("{user} is closed")))
        } else {
            let mut t = ledger.transient.lock();
            match t.get_mut(&user) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    Err(HandleError::transient("the database blinked"))
                }
                _ => Ok(()),
            }
        };
        ledger.calls.lock().push((user, amounts, verdict.is_ok()));
        verdict
    }
}

async fn topic(client: &Client, name: &str) {
    client
        .stream(STREAM)
        .topic(name)
        .create_with(&TopicOptions::partitions(1), true)
        .await
        .unwrap();
}

fn config(name: &str) -> ConsumerConfig {
    ConsumerConfig::new(STREAM, name, Assignment::Partitions(vec![0]))
        .retry_delays([Duration::from_millis(100); 4])
        .poll_interval(Duration::from_millis(20))
}

/// Waits until `done` holds, failing after 20 s with `what`.
async fn until<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every record of a topic's partition 0.
async fn records(client: &Client, topic: &str) -> Vec<rill_client::Record> {
    let t = client.stream(STREAM).topic(topic);
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let f = t
            .fetch(Position::new(0, at), 1 << 20, Duration::ZERO)
            .await
            .unwrap();
        if f.records.is_empty() {
            return out;
        }
        at = f.next_offset;
        out.extend(f.records);
    }
}

/// Scenario 1: u1 fails retryably; u2 in the same partition is applied meanwhile; u1's
/// retried work (1 and 2 folded to 3) merges with the 10 published while u1 was
/// quarantined, and succeeds as one call of 13.
async fn a_failing_key_does_not_delay_another_and_its_retry_folds_what_arrived_meanwhile(
    client: &Client,
) {
    topic(client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    ledger.failing.lock().push("u1".into());
    let publisher = Publisher::new(client, STREAM);
    publisher
        .publish_batch(&[add("u1", 1), add("u2", 5), add("u1", 2)])
        .await
        .unwrap();
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(client, config("billing"))
        .await
        .unwrap();
    until("u1 fails with 1 and 2 folded", || async {
        ledger.calls_of("u1").first() == Some(&(vec![3], false))
    })
    .await;
    until("u2 is applied while u1 is quarantined", || async {
        ledger.applied("u2") == 5
    })
    .await;
    publisher.publish(&add("u1", 10)).await.unwrap();
    until("u1's retry merges the 10 published meanwhile", || async {
        ledger.calls_of("u1").contains(&(vec![13], false))
    })
    .await;
    ledger.failing.lock().clear();
    until("u1 succeeds", || async { ledger.applied("u1") == 13 }).await;
    assert_eq!(
        ledger.calls_of("u1").last(),
        Some(&(vec![13], true)),
        "one call with the folded 13"
    );
    assert!(
        ledger.calls_of("u1").iter().all(|(a, _)| a.len() == 1),
        "every call of u1 saw its run folded: {:?}",
        ledger.calls_of("u1")
    );
    let ended = consumer.shutdown(Duration::from_secs(10)).await;
    assert_eq!(ended, [(0, rill_events::Ended::Shutdown)]);
    // Nothing was dead-lettered, and the retry topic ends with u1's work closed.
    assert!(
        records(client, &dead_letter_topic(TOPIC, "billing"))
            .await
            .is_empty()
    );
    assert!(
        !records(client, &retry_topic(TOPIC, "billing"))
            .await
            .is_empty()
    );
}

/// A batch is admitted while the one before it runs; a key that batch quarantines is
/// still diverted from it: u1 fails in the first batch of two records, and its later
/// records (in batches already read) go behind its pending work, never run on their
/// own.
async fn a_key_quarantined_by_one_batch_is_diverted_from_the_next_already_read(client: &Client) {
    topic(client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    ledger.failing.lock().push("u1".into());
    let publisher = Publisher::new(client, STREAM);
    publisher
        .publish_batch(&[
            add("u1", 1),
            add("u2", 5),
            add("u1", 2),
            add("u3", 7),
            add("u1", 4),
            add("u2", 6),
        ])
        .await
        .unwrap();
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(client, config("billing").poll_count(2))
        .await
        .unwrap();
    until("the other keys are applied", || async {
        ledger.applied("u2") == 11 && ledger.applied("u3") == 7
    })
    .await;
    until("u1's retry holds all its work", || async {
        ledger.calls_of("u1").contains(&(vec![7], false))
    })
    .await;
    ledger.failing.lock().clear();
    until("u1 succeeds", || async { ledger.applied("u1") == 7 }).await;
    // Every call of u1 began with its first event: 1, 1+2 or 1+2+4, never 2 or 4 alone.
    let calls = ledger.calls_of("u1");
    assert!(
        calls.iter().all(|(a, _)| matches!(a[..], [1] | [3] | [7])),
        "u1 ran out of order: {calls:?}"
    );
    assert_eq!(calls.first(), Some(&(vec![1], false)));
    assert_eq!(calls.last(), Some(&(vec![7], true)));
    let ended = consumer.shutdown(Duration::from_secs(10)).await;
    assert_eq!(ended, [(0, rill_events::Ended::Shutdown)]);
}

/// Scenario 2: a handler that always fails for [1] is called 1 + len(retry_delays)
/// times; the event is dead-lettered with its reason and attempt count; a later event
/// of the key is then handled.
async fn exhausted_retries_dead_letter_the_event_and_the_key_goes_on(client: &Client) {
    topic(client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    ledger.failing.lock().push("u1".into());
    let publisher = Publisher::new(client, STREAM);
    publisher.publish(&add("u1", 1)).await.unwrap();
    let delays = 4;
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(client, config("billing"))
        .await
        .unwrap();
    let dlq = dead_letter_topic(TOPIC, "billing");
    until("the event is dead-lettered", || async {
        !records(client, &dlq).await.is_empty()
    })
    .await;
    assert_eq!(
        ledger.calls_of("u1"),
        vec![(vec![1], false); 1 + delays],
        "called 1 + len(retry_delays) times"
    );
    let letters = records(client, &dlq).await;
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(
        letter.header(rill_events::DLQ_HEADER),
        Some(&rill_client::Value::U8(
            rill_events::DeadLetterReason::RetriesExhausted.to_byte()
        ))
    );
    let Some(rill_client::Value::Bytes(retry)) = letter.header(rill_events::RETRY_HEADER) else {
        panic!("a dead letter has a retry header");
    };
    let retry = rill_events::RetryHeader::decode(retry).unwrap();
    assert_eq!(retry.attempt as usize, 1 + delays);
    assert_eq!((retry.source_first, retry.source_last), (0, 0));
    assert!(matches!(
        letter.header(rill_events::ERROR_HEADER),
        Some(rill_client::Value::Str(e)) if e.contains("u1 is locked")
    ));
    // The key goes on.
    ledger.failing.lock().clear();
    publisher.publish(&add("u1", 7)).await.unwrap();
    until("a later event of u1 is handled", || async {
        ledger.applied("u1") == 7
    })
    .await;
    consumer.shutdown(Duration::from_secs(10)).await;
}

/// Scenario 3: transient failures call the same chunk again in place, with nothing in
/// the retry topic; past `transient_max` the chunk goes to retry.
async fn a_transient_failure_retries_in_place_then_escalates(client: &Client) {
    topic(client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    ledger.transient.lock().insert("u1".into(), 2);
    let publisher = Publisher::new(client, STREAM);
    publisher.publish(&add("u1", 4)).await.unwrap();
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(client, config("billing").transient_max(2))
        .await
        .unwrap();
    until("u1 is applied after two transient failures", || async {
        ledger.applied("u1") == 4
    })
    .await;
    assert_eq!(
        ledger.calls_of("u1"),
        [(vec![4], false), (vec![4], false), (vec![4], true)]
    );
    let retry = retry_topic(TOPIC, "billing");
    assert!(
        records(client, &retry).await.is_empty(),
        "nothing went to retry"
    );
    // Three transient failures with transient_max 2: the third escalates.
    ledger.transient.lock().insert("u2".into(), 3);
    publisher.publish(&add("u2", 6)).await.unwrap();
    until("u2 is applied from the retry topic", || async {
        ledger.applied("u2") == 6
    })
    .await;
    assert_eq!(ledger.calls_of("u2").len(), 4);
    assert!(
        !records(client, &retry).await.is_empty(),
        "the escalated chunk went to retry"
    );
    consumer.shutdown(Duration::from_secs(10)).await;
}

/// Main offset stores are `commit_interval` apart at least, and the last offset done is
/// stored in a later step even when no more records come (not only at shutdown).
async fn stores_wait_out_the_commit_interval_and_then_reach_the_last_offset_done(client: &Client) {
    topic(client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    let publisher = Publisher::new(client, STREAM);
    // The first store begins after this, the second `interval` after the first.
    let published = Instant::now();
    publisher.publish(&add("u1", 1)).await.unwrap();
    let interval = Duration::from_millis(400);
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(
            client,
            config("billing").poll_count(1).commit_interval(interval),
        )
        .await
        .unwrap();
    let main = client.stream(STREAM).topic(TOPIC);
    until("the first event's offset is stored", || async {
        main.stored_offset("billing", 0).await.unwrap() == Some(0)
    })
    .await;
    publisher
        .publish_batch(&[add("u2", 2), add("u3", 3)])
        .await
        .unwrap();
    until("the later events are handled", || async {
        ledger.applied("u2") == 2 && ledger.applied("u3") == 3
    })
    .await;
    let handled = published.elapsed();
    until(
        "the last offset done is stored without a shutdown",
        || async { main.stored_offset("billing", 0).await.unwrap() == Some(2) },
    )
    .await;
    let waited = published.elapsed();
    assert!(
        waited >= interval,
        "both offsets stored {waited:?} after the first publish, within one {interval:?} commit interval (the last events handled after {handled:?})"
    );
    let ended = consumer.shutdown(Duration::from_secs(10)).await;
    assert_eq!(ended, [(0, rill_events::Ended::Shutdown)]);
}

/// Scenario 7: two consumer names of one topic fail independently: each has its own
/// retry and dead-letter topics, and one's failure is not re-applied by the other.
async fn two_consumer_names_keep_their_own_retry_and_dead_letter_topics(client: &Client) {
    topic(client, TOPIC).await;
    let billing = Arc::new(Ledger::default());
    let audit = Arc::new(Ledger::default());
    billing.poison.lock().push("u1".into());
    let publisher = Publisher::new(client, STREAM);
    publisher.publish(&add("u1", 3)).await.unwrap();
    let a = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&billing)))
        .start(client, config("billing"))
        .await
        .unwrap();
    let b = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&audit)))
        .start(client, config("audit"))
        .await
        .unwrap();
    until("audit applies u1", || async { audit.applied("u1") == 3 }).await;
    until("billing dead-letters u1", || async {
        records(client, &dead_letter_topic(TOPIC, "billing"))
            .await
            .len()
            == 1
    })
    .await;
    a.shutdown(Duration::from_secs(10)).await;
    b.shutdown(Duration::from_secs(10)).await;
    assert!(
        records(client, &dead_letter_topic(TOPIC, "audit"))
            .await
            .is_empty()
    );
    assert_eq!(audit.calls_of("u1"), [(vec![3], true)], "audit saw u1 once");
    assert_eq!(
        billing.calls_of("u1"),
        [(vec![3], false)],
        "unrecoverable: called once"
    );
}

/// Another event type of another topic, for the mixed-topics error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, EventKey)]
#[event_key(topic = "other")]
struct OtherKey(u64);

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(name = "other")]
struct Other {
    #[event(key)]
    key: OtherKey,
}

/// A second type with `Add`'s tag.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(name = "add")]
struct AddAgain {
    #[event(key)]
    user: User,
}

struct Nop;

impl EventHandler<Other> for Nop {
    const MAX_BATCH: usize = 1;
    async fn handle(&self, _: &Context, _: &[Other]) -> Result<(), HandleError> {
        Ok(())
    }
}

impl EventHandler<AddAgain> for Nop {
    const MAX_BATCH: usize = 1;
    async fn handle(&self, _: &Context, _: &[AddAgain]) -> Result<(), HandleError> {
        Ok(())
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Every error of docs/EVENTS.md §8, each leaving the broker without a new topic.
async fn start_refuses_every_invalid_configuration_and_creates_nothing(client: &Client) {
    let ledger = Arc::new(Ledger::default());
    let handlers = || Handlers::new().handle::<Add, _>(Apply(Arc::clone(&ledger)));
    let topics = || async {
        client
            .list_topics(Some(STREAM))
            .await
            .map(|t| t.into_iter().map(|t| t.name).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    // The main topic is missing.
    let e = handlers().start(client, config("c")).await.unwrap_err();
    assert!(matches!(e, StartError::TopicNotFound { .. }), "{e}");
    assert!(topics().await.is_empty());
    topic(client, TOPIC).await;
    type Case = (ConsumerConfig, fn(&StartError) -> bool);
    let cases: Vec<Case> = vec![
        (config("c").retry_delays([]), |e| {
            matches!(e, StartError::NoRetryDelays)
        }),
        (
            ConsumerConfig::new(STREAM, "c", Assignment::Partitions(vec![])),
            |e| matches!(e, StartError::NoPartitions),
        ),
        (
            ConsumerConfig::new(STREAM, "c", Assignment::Partitions(vec![0, 0])),
            |e| matches!(e, StartError::DuplicatePartition(0)),
        ),
        (
            ConsumerConfig::new(STREAM, "c", Assignment::Partitions(vec![0, 3])),
            |e| {
                matches!(
                    e,
                    StartError::PartitionNotFound {
                        partition: 3,
                        partitions: 1,
                        ..
                    }
                )
            },
        ),
        (config("c").poll_count(0), |e| {
            matches!(e, StartError::Zero("poll_count"))
        }),
        (config("c").handler_concurrency(0), |e| {
            matches!(e, StartError::Zero("handler_concurrency"))
        }),
        (config("c").max_pending_retry(0), |e| {
            matches!(e, StartError::Zero("max_pending_retry"))
        }),
        (config("bad/name"), |e| {
            matches!(e, StartError::InvalidName { .. })
        }),
        (config(&"x".repeat(250)), |e| {
            matches!(e, StartError::InvalidName { .. })
        }),
    ];
    for (config, expected) in cases {
        let e = handlers().start(client, config.clone()).await.unwrap_err();
        assert!(expected(&e), "{config:?}: {e}");
    }
    let e = Handlers::new()
        .start(client, config("c"))
        .await
        .unwrap_err();
    assert!(matches!(e, StartError::NoHandlers), "{e}");
    let e = handlers()
        .handle::<Other, _>(Nop)
        .start(client, config("c"))
        .await
        .unwrap_err();
    assert!(matches!(e, StartError::MixedTopics { .. }), "{e}");
    let e = handlers()
        .handle::<AddAgain, _>(Nop)
        .start(client, config("c"))
        .await
        .unwrap_err();
    assert!(matches!(e, StartError::DuplicateTag { .. }), "{e}");
    assert_eq!(topics().await, [TOPIC], "no failed start created a topic");
    // An elastic main topic (its ranges split; retries could not keep key order).
    let elastic_stream = format!("{STREAM}-elastic");
    client
        .stream(elastic_stream.as_str())
        .topic(TOPIC)
        .create_with(
            &TopicOptions {
                elastic: true,
                ..TopicOptions::partitions(2)
            },
            false,
        )
        .await
        .unwrap();
    for assignment in [Assignment::Group, Assignment::Partitions(vec![0])] {
        let e = handlers()
            .start(
                client,
                ConsumerConfig::new(elastic_stream.as_str(), "c", assignment),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, StartError::ElasticTopic { .. }), "{e}");
    }
    let made: Vec<String> = client
        .list_topics(Some(&elastic_stream))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(made, [TOPIC], "no failed start created a topic");
    // A retry topic with another partition count.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("c{n}");
    client
        .stream(STREAM)
        .topic(retry_topic(TOPIC, &name))
        .create_with(&TopicOptions::partitions(2), false)
        .await
        .unwrap();
    let e = handlers().start(client, config(&name)).await.unwrap_err();
    assert!(
        matches!(
            e,
            StartError::PartitionCountMismatch {
                found: 2,
                expected: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        !topics().await.contains(&dead_letter_topic(TOPIC, &name)),
        "the dead-letter topic was not created"
    );
}

// Scenarios 4 and 5 against a broker: fences and reductions as the runtime executes
// them (the planner's exhaustive check is `crates/rill-events/tests/planner.rs`).

/// A clock of call starts and ends, shared by the handlers of one test.
static CLOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// (key, seq) → (call start, call end, index in call), of successful calls only.
type Applied = Arc<Mutex<HashMap<(String, u32), (u64, u64, usize)>>>;

macro_rules! step_event {
    ($name:ident, $tag:literal) => {
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
        #[event(tag = $tag, ordering_with = ordering_of)]
        struct $name {
            #[event(key)]
            key: Seq,
            seq: u32,
            ordering: u8,
        }

        impl $name {
            fn ordering_of(&self) -> rill_events::Ordering {
                rill_events::Ordering::ALL[usize::from(self.ordering)]
            }
        }

        impl EventHandler<$name> for Steps {
            const MAX_BATCH: usize = 2;
            async fn handle(&self, ctx: &Context, run: &[$name]) -> Result<(), HandleError> {
                let key = ctx.key::<Seq>().unwrap().0;
                let seqs: Vec<u32> = run.iter().map(|e| e.seq).collect();
                self.call(key, seqs).await
            }
        }
    };
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, EventKey)]
#[event_key(topic = "steps")]
struct Seq(String);

/// Records successful calls; the first call holding a record of a key in `fail_once`
/// fails retryably.
struct Steps {
    applied: Applied,
    fail_once: Mutex<std::collections::HashSet<String>>,
}

impl Steps {
    async fn call(&self, key: String, seqs: Vec<u32>) -> Result<(), HandleError> {
        let start = CLOCK.fetch_add(1, Ordering::SeqCst);
        // Long enough that calls allowed to overlap do.
        tokio::time::sleep(Duration::from_millis(2)).await;
        if self.fail_once.lock().remove(&key) {
            return Err(HandleError::retryable("the first try of this key fails"));
        }
        let end = CLOCK.fetch_add(1, Ordering::SeqCst);
        let mut applied = self.applied.lock();
        for (i, s) in seqs.into_iter().enumerate() {
            applied.insert((key.clone(), s), (start, end, i));
        }
        Ok(())
    }
}

step_event!(StepA, 1);
step_event!(StepB, 2);
step_event!(StepC, 3);

/// Scenario 4: sequences over 3 tags and 4 orderings on distinct keys, published in one
/// interleaved log; every pair §3.1 requires is applied in order (the earlier call ends
/// before the later starts, or they share a call in slice order), and so it is for keys
/// whose first try fails and whose work is re-planned from the retry topic.
async fn fences_order_what_the_contract_requires_also_across_a_retry(client: &Client) {
    client
        .stream(STREAM)
        .topic("steps")
        .create_with(&TopicOptions::partitions(2), true)
        .await
        .unwrap();
    // The worked examples, then seeded random sequences.
    let mut sequences: Vec<Vec<(u32, u8)>> = vec![
        vec![(1, 0), (2, 0), (1, 0), (3, 0), (2, 0)],
        vec![(1, 0), (2, 1), (1, 0), (2, 0), (3, 0)],
        vec![(1, 0), (2, 0), (3, 2), (1, 0)],
        vec![(1, 0), (2, 0), (1, 2), (2, 0)],
        vec![(1, 0), (2, 3), (3, 0), (2, 2), (3, 0)],
        vec![(1, 1), (1, 2), (2, 0)],
    ];
    let mut seed: u64 = 0x5eed_0004;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..24 {
        let len = 2 + (next() % 5) as usize;
        sequences.push(
            (0..len)
                .map(|_| (1 + (next() % 3) as u32, (next() % 4) as u8))
                .collect(),
        );
    }
    let steps = Arc::new(Steps {
        applied: Arc::default(),
        fail_once: Mutex::new(
            (0..sequences.len())
                .filter(|i| i % 3 == 1)
                .map(|i| format!("s{i}"))
                .collect(),
        ),
    });
    let publisher = Publisher::new(client, STREAM);
    // Interleave the sequences round-robin, each in its own order.
    let longest = sequences.iter().map(Vec::len).max().unwrap();
    for j in 0..longest {
        for (i, s) in sequences.iter().enumerate() {
            let Some(&(tag, ordering)) = s.get(j) else {
                continue;
            };
            let key = Seq(format!("s{i}"));
            let seq = j as u32;
            match tag {
                1 => publisher.publish(&StepA { key, seq, ordering }).await,
                2 => publisher.publish(&StepB { key, seq, ordering }).await,
                _ => publisher.publish(&StepC { key, seq, ordering }).await,
            }
            .unwrap();
        }
    }
    let total: usize = sequences.iter().map(Vec::len).sum();
    let consumer = Handlers::new()
        .handle::<StepA, _>(Arc::clone(&steps))
        .handle::<StepB, _>(Arc::clone(&steps))
        .handle::<StepC, _>(Arc::clone(&steps))
        .start(
            client,
            ConsumerConfig::new(STREAM, "steps", Assignment::Partitions(vec![0, 1]))
                .retry_delays([Duration::from_millis(50)])
                .poll_interval(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    until("every step is applied", || async {
        steps.applied.lock().len() == total
    })
    .await;
    consumer.shutdown(Duration::from_secs(10)).await;
    let applied = steps.applied.lock();
    let ord = |o: u8| rill_events::Ordering::ALL[usize::from(o)];
    for (i, s) in sequences.iter().enumerate() {
        let key = format!("s{i}");
        for x in 0..s.len() {
            for y in x + 1..s.len() {
                let required = s[x].0 == s[y].0 || ord(s[x].1).acquires() || ord(s[y].1).releases();
                if !required {
                    continue;
                }
                let a = applied[&(key.clone(), x as u32)];
                let b = applied[&(key.clone(), y as u32)];
                let in_order = a.1 < b.0 || ((a.0, a.1) == (b.0, b.1) && a.2 < b.2);
                assert!(
                    in_order,
                    "sequence {i} {s:?} (first try fails: {}): {x} must be applied before {y}, calls {a:?} and {b:?}",
                    i % 3 == 1
                );
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, EventKey)]
#[event_key(topic = "flags")]
struct Flag(String);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(name = "set", algebra = Idempotent)]
struct Set {
    #[event(key)]
    flag: Flag,
    value: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Event)]
#[event(name = "tag", algebra = IdempotentCommutative)]
struct Tagged {
    #[event(key)]
    flag: Flag,
    value: u8,
}

/// Calls per key, with their values.
#[derive(Default)]
struct Seen(Mutex<Vec<(String, Vec<u8>)>>);

impl EventHandler<Set> for Seen {
    const MAX_BATCH: usize = 100;
    async fn handle(&self, ctx: &Context, run: &[Set]) -> Result<(), HandleError> {
        let key = ctx.key::<Flag>().unwrap().0;
        self.0
            .lock()
            .push((key, run.iter().map(|e| e.value).collect()));
        Ok(())
    }
}

impl EventHandler<Tagged> for Seen {
    const MAX_BATCH: usize = 100;
    async fn handle(&self, ctx: &Context, run: &[Tagged]) -> Result<(), HandleError> {
        let key = ctx.key::<Flag>().unwrap().0;
        self.0
            .lock()
            .push((key, run.iter().map(|e| e.value).collect()));
        Ok(())
    }
}

/// Scenario 5: an associative run folds (`1` and `2` → one call with `3`), an idempotent
/// run loses adjacent duplicates (`1,1,2,1,1` → `1,2,1`), an idempotent-commutative run
/// every duplicate (→ `1,2`). Each run is published in one batch, so it is polled whole.
async fn runs_are_reduced_by_their_algebra(client: &Client) {
    for t in ["flags", TOPIC] {
        topic(client, t).await;
    }
    let publisher = Publisher::new(client, STREAM);
    let values = [1u8, 1, 2, 1, 1];
    let sets: Vec<Set> = values
        .iter()
        .map(|&value| Set {
            flag: Flag("idem".into()),
            value,
        })
        .collect();
    let tags: Vec<Tagged> = values
        .iter()
        .map(|&value| Tagged {
            flag: Flag("comm".into()),
            value,
        })
        .collect();
    publisher.publish_batch(&sets).await.unwrap();
    publisher.publish_batch(&tags).await.unwrap();
    publisher
        .publish_batch(&[add("u1", 1), add("u1", 2)])
        .await
        .unwrap();
    let seen = Arc::new(Seen::default());
    let ledger = Arc::new(Ledger::default());
    let flags = Handlers::new()
        .handle::<Set, _>(Arc::clone(&seen))
        .handle::<Tagged, _>(Arc::clone(&seen))
        .start(client, config("reduce"))
        .await
        .unwrap();
    let adds = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(client, config("reduce"))
        .await
        .unwrap();
    until("both flags are seen", || async { seen.0.lock().len() == 2 }).await;
    until("the adds are applied", || async {
        ledger.applied("u1") == 3
    })
    .await;
    flags.shutdown(Duration::from_secs(10)).await;
    adds.shutdown(Duration::from_secs(10)).await;
    let mut calls = seen.0.lock().clone();
    calls.sort();
    assert_eq!(
        calls,
        [
            ("comm".to_owned(), vec![1, 2]),
            ("idem".to_owned(), vec![1, 2, 1])
        ]
    );
    assert_eq!(ledger.calls_of("u1"), [(vec![3], true)]);
}

/// `rill` run with `args` against `url`: (exit code, stdout, stderr).
fn rill(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(common::rill_bin())
        .args(args)
        .args(["--server", url])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `rill events dlq` lists dead letters (text and JSON, all or of one key) and `rill
/// events replay` re-publishes them once: a second replay publishes nothing, and the
/// consumer applies each replayed event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_replays_dead_letters_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"));
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    topic(&client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    ledger
        .poison
        .lock()
        .extend(["u1".to_owned(), "u3".to_owned()]);
    let publisher = Publisher::new(&client, STREAM);
    publisher.publish(&add("u1", 3)).await.unwrap();
    publisher.publish(&add("u2", 4)).await.unwrap();
    publisher.publish(&add("u3", 5)).await.unwrap();
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(&client, config("billing"))
        .await
        .unwrap();
    until("u1 and u3 are dead letters", || async {
        records(&client, &dead_letter_topic(TOPIC, "billing"))
            .await
            .len()
            == 2
    })
    .await;
    let spec = format!("{STREAM}/{TOPIC}");
    let (code, out, err) = rill(
        &url,
        &["events", "dlq", &spec, "--consumer", "billing", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let letters: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(letters.len(), 2, "{out}");
    assert_eq!(letters[0]["reason"], "unrecoverable");
    assert_eq!(letters[0]["key"], "u1");
    assert_eq!(letters[0]["source_partition"], 0);
    assert_eq!(letters[0]["source_first_offset"], 0);
    assert_eq!(letters[1]["key"], "u3");
    assert_eq!(letters[1]["source_first_offset"], 2);
    assert!(
        letters[0]["error"]
            .as_str()
            .unwrap()
            .contains("u1 is closed")
    );
    let (code, out, _) = rill(
        &url,
        &[
            "events",
            "dlq",
            &spec,
            "--consumer",
            "billing",
            "--key",
            "u3",
        ],
    );
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "a header and u3's letter: {out}");
    assert!(lines[0].starts_with("partition\toffset\treason"));
    assert!(lines[1].contains("\tu3\t0/2..=2\t"), "{}", lines[1]);
    // Replay u3 only, with the handler fixed: applied once, listed no more.
    ledger.poison.lock().retain(|u| u != "u3");
    let (code, _, err) = rill(
        &url,
        &[
            "events",
            "replay",
            &spec,
            "--consumer",
            "billing",
            "--key",
            "u3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("replayed 1"), "{err}");
    until("u3 is applied from the replay", || async {
        ledger.applied("u3") == 5
    })
    .await;
    let (_, err2) = {
        let (code, _, err) = rill(
            &url,
            &[
                "events",
                "replay",
                &spec,
                "--consumer",
                "billing",
                "--key",
                "u3",
            ],
        );
        (code, err)
    };
    assert!(
        err2.contains("replayed 0"),
        "a second replay publishes nothing: {err2}"
    );
    let (_, out, _) = rill(
        &url,
        &["events", "dlq", &spec, "--consumer", "billing", "--json"],
    );
    assert_eq!(out.lines().count(), 1, "only u1 is left: {out}");
    // Bad arguments are usage errors.
    let (code, _, _) = rill(
        &url,
        &["events", "dlq", "no-slash", "--consumer", "billing"],
    );
    assert_eq!(code, 1);
    let (code, _, _) = rill(&url, &["events", "dlq", &spec]);
    assert_eq!(code, 2, "--consumer is required");
    tokio::time::sleep(Duration::from_millis(200)).await;
    consumer.shutdown(Duration::from_secs(10)).await;
    assert_eq!(
        ledger.applied("u3"),
        5,
        "the replayed event was applied once"
    );
}

/// Backpressure (docs/EVENTS.md §6.4): with every key failing, pending retry work stops
/// at `max_pending_retry` plus one poll and the main partition is no longer polled (its
/// lag stays), rather than the backlog growing or work being dropped.
async fn a_retry_backlog_past_its_bound_stops_the_main_partition_instead_of_growing(
    client: &Client,
) {
    topic(client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    let users: Vec<String> = (0..1000).map(|i| format!("u{i}")).collect();
    ledger.failing.lock().extend(users.iter().cloned());
    let publisher = Publisher::new(client, STREAM);
    let adds: Vec<Add> = users.iter().map(|u| add(u, 1)).collect();
    publisher.publish_batch(&adds).await.unwrap();
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(
            client,
            config("billing")
                .retry_delays([Duration::from_secs(3600)])
                .poll_count(50)
                .max_pending_retry(200),
        )
        .await
        .unwrap();
    let gauges = || {
        consumer
            .metrics()
            .partitions
            .get(&0)
            .copied()
            .unwrap_or_default()
    };
    until("the backlog reaches its bound", || async {
        gauges().pending_retry >= 200
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let first = gauges();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = gauges();
    assert!(
        later.pending_retry <= 200 + 50,
        "pending retry work is bounded by max_pending_retry + poll_count: {later:?}"
    );
    assert_eq!(first, later, "nothing more was polled");
    assert!(
        later.lag >= 1000 - 250,
        "the main partition waits: {later:?}"
    );
    assert_eq!(
        ledger.calls.lock().len() as u64,
        later.pending_retry,
        "every polled key was tried once"
    );
    consumer.shutdown(Duration::from_secs(10)).await;
}

/// A record whose body does not decode, one with no event header and one of a tag no
/// handler takes, among good events of the same key: each is dead-lettered once with
/// its reason and source offset, and the key's good events are applied, each once.
async fn records_that_cannot_be_handled_are_dead_lettered_with_why_and_the_rest_goes_on(
    client: &Client,
) {
    topic(client, TOPIC).await;
    let publisher = Publisher::new(client, STREAM);
    publisher.publish(&add("u1", 1)).await.unwrap();
    // The first record's key and event header, to build the bad ones from.
    let good = records(client, TOPIC).await.remove(0);
    let key = good.key.clone().unwrap();
    let Some(rill_client::Value::Bytes(ev)) = good.header(rill_events::EVENT_HEADER) else {
        panic!("an event carries its header");
    };
    let mut unknown = ev.to_vec();
    unknown[1..5].copy_from_slice(&0xdead_beef_u32.to_le_bytes());
    let topic = client.stream(STREAM).topic(TOPIC);
    let bad = [
        // 1: not JSON of an `Add`.
        rill_client::Message::new(&b"{not json"[..])
            .with_key(key.clone())
            .with_header(
                rill_events::EVENT_HEADER,
                rill_client::Value::Bytes(ev.clone()),
            ),
        // 2: no event header.
        rill_client::Message::new(&b"{}"[..]).with_key(key.clone()),
        // 3: a tag no handler takes.
        rill_client::Message::new(good.value.clone())
            .with_key(key.clone())
            .with_header(
                rill_events::EVENT_HEADER,
                rill_client::Value::Bytes(unknown.into()),
            ),
    ];
    topic.publish_batch(bad).await.unwrap();
    publisher.publish(&add("u1", 10)).await.unwrap();
    let ledger = Arc::new(Ledger::default());
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(client, config("billing"))
        .await
        .unwrap();
    let dlq = dead_letter_topic(TOPIC, "billing");
    until(
        "the bad records are dead-lettered and the good applied",
        || async { records(client, &dlq).await.len() >= 3 && ledger.applied("u1") == 11 },
    )
    .await;
    consumer.shutdown(Duration::from_secs(5)).await;
    let mut reasons: Vec<(u64, u8)> = records(client, &dlq)
        .await
        .iter()
        .map(|letter| {
            let Some(rill_client::Value::Bytes(retry)) = letter.header(rill_events::RETRY_HEADER)
            else {
                panic!("a dead letter carries a retry header");
            };
            let retry = rill_events::RetryHeader::decode(retry).unwrap();
            assert_eq!(retry.source_first, retry.source_last);
            let Some(&rill_client::Value::U8(reason)) = letter.header(rill_events::DLQ_HEADER)
            else {
                panic!("a dead letter carries its reason");
            };
            (retry.source_first, reason)
        })
        .collect();
    reasons.sort_unstable();
    use rill_events::DeadLetterReason as R;
    assert_eq!(
        reasons,
        [
            (1, R::UndecodableBody.to_byte()),
            (2, R::BadHeader.to_byte()),
            (3, R::UnknownTag.to_byte()),
        ],
        "each bad record dead-lettered once, with its reason"
    );
    // `Add` is associative: the good 1 and 10 fold into one call when they share a run.
    assert_eq!(ledger.applied("u1"), 11, "the key's good events, each once");
    assert!(
        ledger.calls_of("u1").iter().all(|(_, ok)| *ok),
        "no good event failed"
    );
}

/// An events consumer in a group reports its numbers with its heartbeats: `rill group
/// describe` shows them on a `reported` line and `/metrics` as
/// `rill_group_member_metric`, with the dead letter and the quarantined key it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_events_consumer_reports_its_numbers_to_describe_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::ServerProcess::start(&dir.path().join("data"));
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    topic(&client, TOPIC).await;
    let ledger = Arc::new(Ledger::default());
    ledger.poison.lock().push("u1".to_owned());
    ledger.failing.lock().push("u2".to_owned());
    let publisher = Publisher::new(&client, STREAM);
    publisher.publish(&add("u1", 3)).await.unwrap();
    publisher.publish(&add("u2", 4)).await.unwrap();
    publisher.publish(&add("u3", 5)).await.unwrap();
    let consumer = Handlers::new()
        .handle::<Add, _>(Apply(Arc::clone(&ledger)))
        .start(
            &client,
            ConsumerConfig::new(STREAM, "billing", Assignment::Group)
                .retry_delays([Duration::from_secs(60)])
                .poll_interval(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    let spec = format!("{STREAM}/{TOPIC}");
    let mut described = String::new();
    until(
        "the member reports its dead letter and quarantined key",
        || {
            let (code, out, err) = rill(&url, &["group", "describe", &spec, "billing"]);
            assert_eq!(code, 0, "{err}");
            described = out;
            let reported = described.contains("events_dead_letters_total=1")
                && described.contains("events_quarantined_keys=1")
                && described.contains("events_retry_backlog=1")
                && described.contains("events_handled_total=1");
            async move { reported }
        },
    )
    .await;
    let line = described
        .lines()
        .find(|l| l.starts_with("reported\t"))
        .unwrap_or_else(|| panic!("{described}"));
    let fields: Vec<&str> = line.split('\t').collect();
    assert_eq!(fields.len(), 3, "{line}");
    assert!(
        described.contains(&format!("member\t{}\t", fields[1])),
        "the report names a member: {described}"
    );
    let names: Vec<&str> = fields[2]
        .split(' ')
        .map(|kv| kv.split('=').next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "in name order");
    for name in [
        "events_lag",
        "events_max_attempt",
        "events_handler_calls_total",
    ] {
        assert!(names.contains(&name), "{name} in {line}");
    }
    let metrics = common::http_get(&server.http, "/metrics");
    let expected = format!(
        "rill_group_member_metric{{stream=\"{STREAM}\",topic=\"{TOPIC}\",group=\"billing\",member=\"{}\",name=\"events_dead_letters_total\"}} 1",
        fields[1]
    );
    assert!(metrics.contains(&expected), "{expected} in {metrics}");
    consumer.shutdown(Duration::from_secs(5)).await;
}

//! Readers whose offsets the broker stores: a consumer-group member (`--group`) and
//! named consumers (`--name`). Offsets are stored only after the records they cover
//! were flushed to stdout, so a crash (or a closed stdout) re-prints rather than loses.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rill_client::{ClientError, CommitPolicy, Consumer, GroupConsumer, Position, StartAt, Topic};

use super::print::Printer;
use super::{ConsumeArgs, Stops};

/// Records printed but not yet stored, per partition, flushed and stored together.
const COMMIT_EVERY_RECORDS: usize = 100;

/// A member of a consumer group. Partitions without a stored group offset start where
/// `--from` says (all of them with `--replay`). Offsets are stored only after the
/// records were flushed to stdout (every 100 records, when the stream goes quiet, and
/// at the end).
pub(super) async fn grouped(
    topic: &Topic,
    group: &str,
    args: &ConsumeArgs,
    out: &mut Printer,
) -> anyhow::Result<()> {
    // Applies to partitions without a stored group offset (`next` resolves as `first`).
    let start = args.from.unwrap_or(StartAt::First);
    if let Some(from) = args.from
        && from != StartAt::Next
        && !args.replay
    {
        say_where_from_does_not_apply(topic, group).await;
    }
    let mut builder = topic
        .consumer_group(group)
        .start_at(start)
        .commit_policy(CommitPolicy::Disabled);
    if args.replay {
        builder = builder.allow_replay();
    }
    if let Some(d) = args.session_timeout {
        builder = builder.session_timeout(d);
    }
    if let Some(id) = &args.member {
        builder = builder.member_id(id);
    }
    let mut consumer = builder.build().await?;
    let mut read = GroupRead {
        stops: Stops::new(args.until),
        printed: BTreeMap::new(),
        touched: BTreeSet::new(),
    };
    let result = read_group(topic, &mut consumer, args, out, &mut read).await;
    if !is_closed_stdout(&result) {
        store_printed(&consumer, out, &mut read.printed).await;
        if result.is_ok() && start == StartAt::End {
            keep_the_end(&consumer, &read).await;
        }
    }
    consumer.shutdown().await?;
    result
}

/// What a member read: where its partitions stop, what it printed and has not stored
/// yet, and every partition it printed from (or reported lost records of).
struct GroupRead {
    stops: Stops,
    printed: BTreeMap<u32, u64>,
    touched: BTreeSet<u32>,
}

/// With `--from end`, a partition the member started at its end without printing
/// anything stores that place (the offset before its position) if the group had none,
/// so the group's next run goes on from there instead of from the first record.
async fn keep_the_end(consumer: &GroupConsumer, read: &GroupRead) {
    for p in consumer.assignment() {
        // A partition that reached its --until stop has handed out a record it did not
        // print: its position is past what was printed.
        if read.touched.contains(&p)
            || read.stops.done.contains(&p)
            || consumer.last_stored_offset(p).is_some()
        {
            continue;
        }
        if let Some(last) = consumer.position(p).and_then(|pos| pos.checked_sub(1))
            && let Err(e) = consumer.store_offset(Position::new(p, last)).await
        {
            tracing::info!(partition = p, error = %e, "offset not stored (the partition moved)");
        }
    }
}

/// `--from` applies only where the group stored no offset (the SDK's rule, as Kafka's
/// `auto.offset.reset`): says so on stderr for the partitions that have one.
async fn say_where_from_does_not_apply(topic: &Topic, group: &str) {
    // A group that does not exist yet has nothing stored: nothing to say.
    let Ok(description) = topic.describe_group(group).await else {
        return;
    };
    let stored: Vec<String> = description
        .partitions
        .iter()
        .filter(|p| p.stored_offset.is_some())
        .map(|p| p.partition.to_string())
        .collect();
    if !stored.is_empty() {
        eprintln!(
            "rill: --from applies only to partitions without a stored offset of group {group}; partitions {} resume after theirs (add --replay to start them at --from too)",
            stored.join(",")
        );
    }
}

fn is_closed_stdout<T>(result: &anyhow::Result<T>) -> bool {
    matches!(result, Err(e) if e.is::<crate::failure::StdoutClosed>())
}

/// Reads as a member until done, keeping in `read` the last offset printed per
/// partition and not stored yet.
async fn read_group(
    topic: &Topic,
    consumer: &mut GroupConsumer,
    args: &ConsumeArgs,
    out: &mut Printer,
    read: &mut GroupRead,
) -> anyhow::Result<()> {
    let GroupRead {
        stops,
        printed,
        touched,
    } = read;
    // Without --follow: stop once nothing has arrived for a while (caught up). What
    // was printed is stored at every pause: a range of an elastic topic is finished
    // for the group, and its children handed out, only once its seal is stored.
    let quiet = Duration::from_millis(1500);
    let pause = Duration::from_millis(200);
    let mut waited = Duration::ZERO;
    let mut since_store = 0usize;
    loop {
        if args.until.is_some() {
            let assigned = consumer.assignment();
            for &p in &assigned {
                if let Some(position) = consumer.position(p) {
                    stops.check_start(topic, p, position).await?;
                }
            }
            if !assigned.is_empty() && stops.all_done(&assigned) {
                return Ok(());
            }
        }
        match consumer.next_within(pause).await {
            Ok(record) => {
                waited = Duration::ZERO;
                if !stops.admits(topic, &record).await? {
                    continue;
                }
                out.print(&record)?;
                printed.insert(record.partition, record.offset);
                touched.insert(record.partition);
                since_store += 1;
                if out.done() {
                    return Ok(());
                }
                if since_store >= COMMIT_EVERY_RECORDS {
                    store_printed(consumer, out, printed).await;
                    since_store = 0;
                }
            }
            Err(ClientError::Timeout(_)) => {
                store_printed(consumer, out, printed).await;
                since_store = 0;
                waited += pause;
                if !args.follow && waited >= quiet {
                    return Ok(());
                }
            }
            Err(e) if e.lost_range().is_some() => {
                // Stored like a printed record, so the next run does not meet it again.
                if let Some((partition, last)) = out.lost(e)? {
                    printed.insert(partition, last);
                    touched.insert(partition);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Flushes stdout, then stores each partition's last printed offset. A partition that
/// moved to another member meanwhile is refused by the broker; that member re-reads
/// from the group's last stored offset (at least once).
async fn store_printed(
    consumer: &GroupConsumer,
    out: &mut Printer,
    printed: &mut BTreeMap<u32, u64>,
) {
    if out.flush().is_err() {
        return;
    }
    for (partition, offset) in std::mem::take(printed) {
        if let Err(e) = consumer
            .store_offset(Position::new(partition, offset))
            .await
        {
            tracing::info!(partition, error = %e, "offset not stored (the partition moved)");
        }
    }
}

/// A named consumer of one partition, with what it printed and where it ends.
struct Named {
    consumer: Consumer,
    /// The partition's end when the command started (where it stops without
    /// `--follow`).
    end: u64,
    /// The last offset printed (or reported lost), to store.
    printed: Option<u64>,
    /// Reached its `--until` stop, or the end without `--follow`.
    finished: bool,
}

/// Named consumers (one per selected partition); offsets are stored after each
/// printed batch. An explicit `--from` applies even where an offset is stored.
pub(super) async fn named(
    topic: &Topic,
    name: &str,
    partitions: &[u32],
    args: &ConsumeArgs,
    out: &mut Printer,
) -> anyhow::Result<()> {
    let start = args.from.unwrap_or(StartAt::Next);
    let wait = Duration::from_millis(200);
    let mut stops = Stops::new(args.until);
    let mut readers = Vec::new();
    for &p in partitions {
        let end = topic.end_offset(p).await?;
        let stored = topic.stored_offset(name, p).await?;
        // Where the consumer starts, as the SDK resolves it below.
        let position = match (start, stored) {
            (StartAt::Next, Some(consumed)) => consumed + 1,
            (start, _) => topic.offset_for(p, start).await?,
        };
        stops.check_start(topic, p, position).await?;
        let consumer = topic
            .consumer(name, p)
            .start_at(start)
            .allow_replay()
            // Stored explicitly, after the printed records were flushed.
            .commit_policy(CommitPolicy::Disabled)
            .max_wait(wait)
            .build()
            .await?;
        readers.push(Named {
            consumer,
            end,
            // With --from end, the place before the end counts as printed: the next
            // run goes on from there even if nothing arrives now.
            printed: match start {
                StartAt::End => position.checked_sub(1),
                _ => None,
            },
            finished: stops.all_done(&[p]) || (!args.follow && position >= end),
        });
    }
    let result = read_named(topic, &mut readers, &mut stops, args, out, wait).await;
    for mut reader in readers {
        if !is_closed_stdout(&result) {
            store_named(&mut reader, out).await?;
        }
        reader.consumer.shutdown().await?;
    }
    result
}

async fn read_named(
    topic: &Topic,
    readers: &mut [Named],
    stops: &mut Stops,
    args: &ConsumeArgs,
    out: &mut Printer,
    wait: Duration,
) -> anyhow::Result<()> {
    loop {
        let mut progressed = false;
        for reader in readers.iter_mut().filter(|r| !r.finished) {
            // Drain what this partition has, then move on.
            let mut since_store = 0usize;
            loop {
                let p = reader.consumer.partition();
                let caught_up = reader
                    .consumer
                    .last_consumed_offset(p)
                    .is_some_and(|o| o + 1 >= reader.end);
                if !args.follow && caught_up {
                    reader.finished = true;
                    break;
                }
                match reader.consumer.next_within(wait * 2).await {
                    Ok(record) => {
                        progressed = true;
                        if !stops.admits(topic, &record).await? {
                            reader.finished = true;
                            break;
                        }
                        out.print(&record)?;
                        reader.printed = Some(record.offset);
                        since_store += 1;
                        if out.done() {
                            return Ok(());
                        }
                        if since_store >= COMMIT_EVERY_RECORDS {
                            store_named(reader, out).await?;
                            since_store = 0;
                        }
                    }
                    Err(ClientError::Timeout(_)) => break,
                    // Stored with the printed records, so the next run does not meet
                    // the range again.
                    Err(e) if e.lost_range().is_some() => {
                        progressed = true;
                        if let Some((_, last)) = out.lost(e)? {
                            reader.printed = Some(last);
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            store_named(reader, out).await?;
        }
        if readers.iter().all(|r| r.finished) || (!args.follow && !progressed) {
            return Ok(());
        }
        out.flush()?;
    }
}

/// A named consumer of an elastic topic: the SDK's consumer of the whole topic reads
/// every range, parents before children (docs/RANGES.md §6.2), and stores per range.
/// Offsets are stored after the records were flushed (every 100 records, when the
/// stream goes quiet, and at the end); without `--follow` it stops once nothing has
/// arrived for a while.
pub(super) async fn named_ranges(
    topic: &Topic,
    name: &str,
    args: &ConsumeArgs,
    out: &mut Printer,
) -> anyhow::Result<()> {
    let start = args.from.unwrap_or(StartAt::Next);
    let mut consumer = topic
        .consumer(name, 0)
        .start_at(start)
        .allow_replay()
        .commit_policy(CommitPolicy::Disabled)
        .max_wait(Duration::from_millis(200))
        .build()
        .await?;
    let mut stops = Stops::new(args.until);
    let mut printed = BTreeMap::new();
    let quiet = Duration::from_millis(1500);
    let mut since_store = 0usize;
    let result = loop {
        match consumer.next_within(quiet).await {
            Ok(record) => {
                if !stops.admits(topic, &record).await? {
                    continue;
                }
                if let Err(e) = out.print(&record) {
                    break Err(e);
                }
                printed.insert(record.partition, record.offset);
                since_store += 1;
                if out.done() {
                    break Ok(());
                }
                if since_store >= COMMIT_EVERY_RECORDS {
                    store_ranges(&mut consumer, out, &mut printed).await?;
                    since_store = 0;
                }
            }
            Err(ClientError::Timeout(_)) => {
                store_ranges(&mut consumer, out, &mut printed).await?;
                since_store = 0;
                if !args.follow {
                    break Ok(());
                }
            }
            Err(e) if e.lost_range().is_some() => match out.lost(e) {
                Ok(Some((partition, last))) => {
                    printed.insert(partition, last);
                }
                Ok(None) => {}
                Err(e) => break Err(e),
            },
            Err(e) => break Err(e.into()),
        }
    };
    if !is_closed_stdout(&result) {
        store_ranges(&mut consumer, out, &mut printed).await?;
    }
    consumer.shutdown().await?;
    result
}

/// Flushes stdout, then stores each range's last printed offset.
async fn store_ranges(
    consumer: &mut Consumer,
    out: &mut Printer,
    printed: &mut BTreeMap<u32, u64>,
) -> anyhow::Result<()> {
    if printed.is_empty() {
        return Ok(());
    }
    out.flush()?;
    for (partition, offset) in std::mem::take(printed) {
        consumer
            .store_offset(Position::new(partition, offset))
            .await?;
    }
    Ok(())
}

/// Flushes stdout, then stores the consumer's last printed offset, if it moved.
async fn store_named(reader: &mut Named, out: &mut Printer) -> anyhow::Result<()> {
    out.flush()?;
    let p = reader.consumer.partition();
    if let Some(last) = reader.printed
        && reader.consumer.last_stored_offset(p) != Some(last)
    {
        reader.consumer.store_offset(Position::new(p, last)).await?;
    }
    Ok(())
}

//! Crash test with a real process: a child appends under `fsync=always` and prints each
//! acknowledged batch; the parent kills it with SIGKILL at random moments, reopens the
//! log and checks that every acknowledged batch is present and intact. Prints its seed;
//! replay with `RILL_SEED=<seed>`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rill_storage::{LogConfig, PartitionLog};
use rill_testkit::{Ack, crash_value};

const ROUNDS: u64 = 24;
const THREADS: u32 = 3;

#[test]
fn sigkill_never_loses_an_acknowledged_batch() {
    let seed: u64 = std::env::var("RILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("crash test seed: RILL_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile_dir();
    let mut acked: Vec<Ack> = Vec::new();
    for round in 0..ROUNDS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash-appender"))
            .arg(&dir)
            .arg(THREADS.to_string())
            // Each round's sequence numbers are distinct, so values identify a round.
            .arg((round * 1_000_000).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn crash-appender");
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| Ack::parse(&l))
                .collect::<Vec<_>>()
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(30..250)));
        child.kill().expect("SIGKILL the child");
        child.wait().unwrap();
        let round_acks = reader.join().unwrap();
        acked.extend(round_acks);

        let log = PartitionLog::open(&dir, LogConfig::default()).expect("reopen after kill");
        verify(&log, &acked, seed, round);
    }
    assert!(
        acked.len() > 100,
        "the child acknowledged only {} batches",
        acked.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn verify(log: &PartitionLog, acked: &[Ack], seed: u64, round: u64) {
    let next = log.next_offset();
    for ack in acked {
        let ctx = format!("seed {seed}, round {round}, {ack:?}");
        assert!(
            ack.base_offset + u64::from(ack.count) <= next,
            "lost batch: {ctx}"
        );
        let read = log
            .read(ack.base_offset, 1)
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let batch = read.batches().next().expect(&ctx).expect(&ctx);
        assert_eq!(batch.base_offset(), ack.base_offset, "{ctx}");
        assert_eq!(batch.record_count(), ack.count, "{ctx}");
        for (i, record) in batch.records().enumerate() {
            assert_eq!(
                record.value,
                crash_value(ack.thread, ack.seq, i as u32),
                "{ctx}"
            );
        }
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rill-crash-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

//! Appends to a partition log under `fsync=always` from several threads, printing one
//! `ACK base thread seq count` line per acknowledged batch, until it is killed.
//!
//! Usage: `crash-appender DIR THREADS FIRST_SEQ`

use std::io::Write;
use std::sync::Arc;

use rill_format::{BatchBuilder, NewRecord};
use rill_storage::{Durability, LogConfig, PartitionLog};
use rill_testkit::{Ack, crash_batch_len, crash_value};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, threads, first_seq] = args.as_slice() else {
        eprintln!("usage: crash-appender DIR THREADS FIRST_SEQ");
        std::process::exit(2);
    };
    let threads: u32 = threads.parse().expect("THREADS is a number");
    let first_seq: u64 = first_seq.parse().expect("FIRST_SEQ is a number");
    let config = LogConfig {
        durability: Durability::Always,
        segment_bytes_max: 64 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let log = Arc::new(PartitionLog::open(dir, config).expect("open the log"));
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let stdout = std::io::stdout();
                for seq in first_seq.. {
                    let count = crash_batch_len(seq);
                    let mut builder = BatchBuilder::new();
                    for i in 0..count {
                        let value = crash_value(thread, seq, i);
                        builder.push(NewRecord::value(&value)).expect("push");
                    }
                    let batch = builder.finish().expect("finish");
                    let appended = log.append(&batch).expect("append");
                    let ack = Ack {
                        base_offset: appended.base_offset,
                        thread,
                        seq,
                        count,
                    };
                    let mut out = stdout.lock();
                    writeln!(out, "{}", ack.line()).expect("stdout");
                    out.flush().expect("stdout");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }
}

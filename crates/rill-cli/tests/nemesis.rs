//! A short nemesis run with the real binary (`rill_testkit::nemesis`, the tool behind
//! `cargo run -p rill-testkit --bin nemesis`): three `rill serve` nodes whose links all
//! pass through fault proxies, an idempotent keyed producer, a named consumer per
//! partition and two consumer-group members, and about ninety seconds of a seeded schedule of kill -9, SIGSTOP, cut and
//! black-holed links. Then every acknowledged record must be stored once, at its
//! acknowledged position, in per-key order; no reader may have seen a record that later
//! went, nor skipped one; the group must hand out every stored record; no stored offset
//! (the readers' or the group's) may have moved backward; the replicas must
//! hold identical logs up to the high watermark, and every node must stop cleanly.
//! Prints its seed and schedule; replay with `RILL_SEED=<seed>`. Long runs are the
//! tool's job (README.md, "Nemesis").

use std::time::Duration;

use rill_testkit::nemesis::{Options, schedule::Fault};

#[test]
fn a_seeded_schedule_of_kills_pauses_and_partitions_loses_nothing() {
    let mut options = Options::new(env!("CARGO_BIN_EXE_rill"), Duration::from_secs(90));
    // The first steps of a schedule take every kind of fault once.
    options.min_faults = 12;
    // Smaller sends than the tool's (32 records at most): the same faults over fewer
    // records, so that the readers and the group, debug builds sharing two cores with
    // the nodes, read everything back well within the test's time. Before, a seed
    // whose group caught up slowly after the faults could run past it.
    options.batch_max = 4;
    let summary = rill_testkit::nemesis::run(&options).expect("the nemesis runs to its verdict");
    eprintln!("{summary}\n{}", summary.details());
    assert!(
        summary.passed(),
        "seed {}: {}\n{}",
        summary.seed,
        summary.line(),
        summary.problems.join("\n")
    );
    assert!(
        summary.acked > 0 && summary.delivered > 0 && summary.group_delivered > 0,
        "{summary}"
    );
    for kind in Fault::kinds() {
        assert!(
            summary.faults.contains_key(kind),
            "seed {}: no {kind} fault was drawn ({summary})",
            summary.seed
        );
    }
}

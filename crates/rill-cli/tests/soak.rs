//! A short soak with the real binary (`rill_testkit::soak`, the tool behind `cargo run
//! -p rill-testkit --bin soak`): `rill serve` is killed with SIGKILL five times under an
//! idempotent keyed producer and two consumer-group members, then every acknowledged
//! record must be stored once, at its acknowledged position, in per-key order, and no
//! stored group offset may have moved backward. Prints its seed; replay with
//! `RILL_SEED=<seed>`. Long runs are the tool's job (README.md, "Soak").

use rill_testkit::soak::{self, Options};

#[test]
fn five_sigkills_lose_duplicate_and_reorder_nothing() {
    let mut options = Options::new(env!("CARGO_BIN_EXE_rill"), 5);
    // Pinned rather than drawn from the seed, so CI checks automatic policies that store
    // as records are handled (`each`, `every`) beside the explicit one: members crash
    // with the server's restarts, and at least once means none may skip a record.
    // (A commit in flight across a restart can still move the group's offset backward,
    // a known defect: rare at 5 cycles; the failure names the seed and keeps the data
    // and the history for the post-mortem.)
    options.members = 3;
    options.policies = ["disabled", "each", "every"]
        .iter()
        .map(|name| soak::policy_by_name(name).expect("a known policy"))
        .collect();
    let summary = soak::run(&options).expect("the soak runs to its verdict");
    eprintln!("{summary}\n{}", summary.details());
    assert!(
        summary.passed(),
        "seed {}: {}\n{}",
        summary.seed,
        summary.line(),
        summary.problems.join("\n")
    );
    assert!(summary.acked > 0 && summary.delivered > 0, "{summary}");
}

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
    // Pinned rather than drawn from the seed: the per-record automatic policies
    // (`each`, `every`, `all`, `interval-every`) drop a record when its store fails after
    // a restart (`StaleGeneration`), a known rill-client defect the tool reports; CI
    // checks the server side with the two policies that do not store on hand-out.
    options.policies = ["disabled", "polling"]
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

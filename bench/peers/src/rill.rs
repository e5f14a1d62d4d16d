//! Rill: `rill serve` on a fresh data directory, driven by `rill bench --json`.

use crate::Ctx;
use crate::measure::RunResult;
use crate::workload::{Durability, Workload};

/// The topic durability a class runs with.
pub(crate) fn setting(durability: Durability) -> String {
    match durability {
        Durability::Buffered => "durability interval:1000".into(),
        Durability::Fsync => "durability always".into(),
    }
}

pub(crate) async fn run(ctx: &Ctx, workload: &Workload) -> anyhow::Result<RunResult> {
    anyhow::bail!(
        "rill runner not written yet ({}, {:?})",
        workload.name,
        ctx.rill_bin
    )
}

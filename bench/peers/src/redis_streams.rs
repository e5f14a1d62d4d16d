//! Redis Streams driver: XADD pipelines, XREADGROUP readers, AOF durability.

use crate::measure::RunResult;
use crate::workload::{Durability, Workload};

/// The AOF setting a durability class runs with.
pub(crate) fn setting(durability: Durability) -> String {
    match durability {
        Durability::Buffered => "AOF appendfsync everysec".into(),
        Durability::Fsync => "AOF appendfsync always".into(),
    }
}

pub(crate) async fn run(workload: &Workload) -> anyhow::Result<RunResult> {
    anyhow::bail!("redis driver not written yet ({})", workload.name)
}

//! `rill bench` — not yet implemented.

use clap::Args;

use crate::target::Target;

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// produce | consume | e2e
    workload: String,
}

pub(crate) async fn run(args: BenchArgs, _target: &Target) -> anyhow::Result<()> {
    anyhow::bail!("rill bench {} is not implemented yet", args.workload)
}

//! `rill-peers compare`: every workload on every system, in alternation, for several
//! rounds; then the report.

#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {}

pub(crate) async fn run(args: CompareArgs) -> anyhow::Result<()> {
    anyhow::bail!("compare not written yet ({args:?})")
}

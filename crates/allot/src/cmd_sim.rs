//! `allot sim` (in progress).
#[derive(clap::Args)]
pub struct SimArgs {}
pub fn run(_a: SimArgs) -> anyhow::Result<()> {
    anyhow::bail!("allot sim is not built yet")
}

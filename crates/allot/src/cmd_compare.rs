//! `allot compare` (in progress).
#[derive(clap::Args)]
pub struct CompareArgs {}
pub fn run(_a: CompareArgs) -> anyhow::Result<()> {
    anyhow::bail!("allot compare is not built yet")
}

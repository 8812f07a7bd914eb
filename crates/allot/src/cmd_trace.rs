//! `allot trace …` (in progress).
#[derive(clap::Subcommand)]
pub enum TraceCommand {}
pub fn run(c: TraceCommand) -> anyhow::Result<()> {
    match c {}
}

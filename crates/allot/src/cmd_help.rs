//! `allot completions SHELL` and `allot man`: shell completions and man
//! pages generated from the command line's own definitions, so they name
//! every command and option there is and nothing else.

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh or fish. Load them with e.g. `source <(allot completions bash)`, or write them
    /// where the shell looks (`allot completions fish > ~/.config/fish/completions/allot.fish`).
    #[arg(value_enum)]
    shell: Shell,
}

/// The shells completions are written for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(clap::Args)]
pub struct ManArgs {
    /// Write a page per command into this directory (allot.1, allot-submit.1, allot-token-create.1, …)
    /// instead of allot.1 on standard output.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Writes the completions of `cmd` for the shell to standard output.
pub fn completions(a: CompletionsArgs, mut cmd: clap::Command) -> Result<()> {
    use clap_complete::Shell as S;
    let shell = match a.shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
    };
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout().lock());
    Ok(())
}

/// Writes the man page of `cmd` to standard output, or a page per command
/// into `--dir`.
pub fn man(a: ManArgs, cmd: clap::Command) -> Result<()> {
    match a.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("failed to write the pages into {}", dir.display()))
        }
        None => {
            clap_mangen::Man::new(cmd).render(&mut std::io::stdout().lock()).context("failed to write the man page")
        }
    }
}

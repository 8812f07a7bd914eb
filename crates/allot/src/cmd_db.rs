//! `allot db init`: creates a store (schema and identity) and records it
//! in the data directory. `allot serve` never replaces a deleted, emptied
//! or swapped database by itself (see docs/server.md, "Store identity").

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Subcommand)]
pub enum DbCommand {
    /// Create the store if it does not exist (an existing one is kept as it is) and make the data directory
    /// belong to it; this is how a new, empty store replaces a lost one.
    Init(DbInitArgs),
}

#[derive(clap::Args)]
pub struct DbInitArgs {
    /// The store, as given to `allot serve --db`.
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// The data directory, as given to `allot serve --data-dir`.
    #[arg(long, default_value = "allot-data")]
    data_dir: PathBuf,
}

pub fn run(c: DbCommand) -> Result<()> {
    let DbCommand::Init(a) = c;
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    let (id, before) = rt
        .block_on(allot_server::store::instance::init(&a.db, &a.data_dir))
        .with_context(|| format!("failed to initialise the store {}", a.db))?;
    match before {
        Some(old) => eprintln!(
            "store {} is {id}; the data directory {} belonged to store {old} and now belongs to this one",
            a.db,
            a.data_dir.display()
        ),
        None => eprintln!("store {} is {id}; the data directory {} belongs to it", a.db, a.data_dir.display()),
    }
    println!("{id}");
    Ok(())
}

//! `jobq scale`: how many workers supervisors keep, changed while they run.

use clap::Args;

use super::Format;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("change").args(["workers", "reset"])))]
pub struct ScaleArgs {
    /// Workers each supervisor keeps from now on (0 stops them all; the supervisors stay up). Without
    /// -n or --reset: show the stored counts.
    #[arg(short = 'n', long = "workers", value_name = "N")]
    pub workers: Option<u32>,

    /// Only the supervisors of this host (as `jobq stats` lists hosts); a host's count wins over the
    /// count for every host.
    #[arg(long)]
    pub host: Option<String>,

    /// Forget stored counts. With --host, that host's count only (its supervisors then follow the
    /// count for every host, if one is stored). Without, every stored count (the one for every host and
    /// each host's): every supervisor goes back to its own -n.
    #[arg(long)]
    pub reset: bool,

    #[command(flatten)]
    pub format: Format,
}

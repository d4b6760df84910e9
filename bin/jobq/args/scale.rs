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

    /// Forget the stored count (of --host, or for every host): supervisors go back to their own -n.
    #[arg(long)]
    pub reset: bool,

    #[command(flatten)]
    pub format: Format,
}

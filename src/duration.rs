//! Durations as people write them in `jobq.toml`: `"500ms"`, `"30s"`, `"5m"`, `"7d"`.
//!
//! A leaf of its own because both the configuration file ([`crate::config`]) and the schedule sections
//! in it ([`crate::schedule::ScheduleSection`]) read them.

use std::time::Duration;

use serde::Deserialize;

/// A duration written the human way: `"500ms"`, `"30s"`, `"5m"`, `"7d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(HumanDuration)
            .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct T {
        d: HumanDuration,
    }

    #[test]
    fn reads_human_durations_and_names_bad_ones() {
        let t: T = toml::from_str("d = \"1m 30s\"").unwrap();
        assert_eq!(t.d, HumanDuration(Duration::from_secs(90)));
        let e = toml::from_str::<T>("d = \"soon\"").unwrap_err().to_string();
        assert!(e.contains("invalid duration \"soon\""), "{e}");
    }
}

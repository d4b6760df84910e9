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

/// An age or a wait as people read it: `4.2s`, `3m 5s`, `1h 0m`, `2d 3h`.
pub fn human_age(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    if secs < 60.0 {
        return format!("{secs:.1}s");
    }
    let s = secs as u64;
    if s < 3_600 {
        format!("{}m {}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h {}m", s / 3_600, s % 3_600 / 60)
    } else {
        format!("{}d {}h", s / 86_400, s % 86_400 / 3_600)
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

#[cfg(test)]
mod age_tests {
    use super::human_age as age;

    #[test]
    fn ages_read_as_people_write_them() {
        assert_eq!(age(4.24), "4.2s");
        assert_eq!(age(185.0), "3m 5s");
        assert_eq!(age(3606.5), "1h 0m");
        assert_eq!(age(2.0 * 86_400.0 + 3.0 * 3_600.0 + 59.0), "2d 3h");
        assert_eq!(age(-1.0), "-");
    }
}

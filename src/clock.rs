//! hookgate's one clock. Nothing else reads the system's clocks (clippy
//! refuses `std::time::Instant` and `SystemTime::now` elsewhere): elapsed
//! time is `tokio::time::Instant`, which tests pause and advance
//! (`#[tokio::test(start_paused = true)]`), and wall time is [`Clock`] or,
//! for a signature's timestamp, [`wall`].
//!
//! [`Clock`] is Unix milliseconds that never step: the engine's, and the
//! store time of the backends that keep their own (memory, embedded).
//!
//! The clock reads the wall clock once, at start, and moves on from there
//! with the monotonic clock, so a forward step of the system clock (NTP, an
//! operator) cannot expire a live lease, and a backward step cannot stretch
//! one. Across a restart it re-anchors to the wall clock; the leases it
//! stamped before belonged to the process that died. Tests move it forward
//! with [`Clock::advance`] instead of sleeping until a lease runs out.
//!
//! Redis keeps its own clock (`TIME` in every script), so that every gateway
//! of a fleet judges leases by one clock.
//!
//! Time as text is here too: RFC 3339, as operators write a search's
//! bounds and senders an event's time (`stale_by`), and durations as
//! configs write them (`"30s"`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// A shared handle: clones read (and advance) the same time.
#[derive(Clone, Debug)]
pub struct Clock(Arc<Anchor>);

#[derive(Debug)]
struct Anchor {
    /// Wall-clock Unix milliseconds at `started`.
    unix_ms: u64,
    started: Instant,
    /// Added by [`Clock::advance`].
    advanced_ms: AtomicU64,
}

/// The wall clock, now: for what is judged against a sender's own clock
/// (a signature's timestamp), and to anchor a [`Clock`].
#[allow(clippy::disallowed_methods)] // the one read of the system clock
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// The wall clock now, in Unix milliseconds: for a one-off "now" (a
/// listing's horizon, a command-line window), where no [`Clock`] is kept.
pub fn unix_ms() -> u64 {
    wall()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Clock {
    /// Anchored to the wall clock now: a process's one clock, made where
    /// the process starts (the binary's `main`, a test's or benchmark's
    /// support) and handed to everything that keeps time. Clippy refuses
    /// any other call (`clippy.toml`).
    pub fn system() -> Self {
        let unix_ms = wall()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self::anchored(unix_ms, Instant::now())
    }

    /// A clock for a unit test.
    #[cfg(test)]
    #[allow(clippy::disallowed_methods)] // a test is its own process's start
    pub(crate) fn for_test() -> Self {
        Self::system()
    }

    /// This clock's time as a `SystemTime`.
    pub fn system_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now_ms())
    }

    fn anchored(unix_ms: u64, started: Instant) -> Self {
        Self(Arc::new(Anchor {
            unix_ms,
            started,
            advanced_ms: AtomicU64::new(0),
        }))
    }

    /// Unix milliseconds.
    pub fn now_ms(&self) -> u64 {
        let anchor = &self.0;
        anchor.unix_ms
            + anchor.started.elapsed().as_millis() as u64
            + anchor.advanced_ms.load(Ordering::Relaxed)
    }

    /// Move this clock (and its clones) forward: leases and retentions run
    /// out as if `by` had passed.
    pub fn advance(&self, by: Duration) {
        self.0
            .advanced_ms
            .fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }
}

// Wall time as text: RFC 3339, as operators and senders write it.

/// Why text is not an RFC 3339 time after 1970.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rfc3339Error {
    NotATime,
    NoZone,
    Before1970,
}

/// An RFC 3339 time (`2026-12-02T14:02:00Z`, with an offset or `Z`) as
/// Unix ms.
pub fn rfc3339_ms(text: &str) -> Result<u64, Rfc3339Error> {
    let at: toml::value::Datetime = text.trim().parse().map_err(|_| Rfc3339Error::NotATime)?;
    let (Some(date), Some(time), Some(offset)) = (at.date, at.time, at.offset) else {
        return Err(Rfc3339Error::NoZone);
    };
    let days = days_from_civil(i64::from(date.year), date.month.into(), date.day.into());
    let seconds = days * 86_400
        + i64::from(time.hour) * 3_600
        + i64::from(time.minute) * 60
        + i64::from(time.second);
    let offset_minutes = match offset {
        toml::value::Offset::Z => 0,
        toml::value::Offset::Custom { minutes } => i64::from(minutes),
    };
    let ms = (seconds - offset_minutes * 60) * 1_000 + i64::from(time.nanosecond / 1_000_000);
    u64::try_from(ms).map_err(|_| Rfc3339Error::Before1970)
}

/// Unix ms as RFC 3339 in UTC, to the millisecond
/// (`2026-12-02T14:02:00.250Z`): what `parse_time` reads back.
pub fn rfc3339(ms: u64) -> String {
    let (days, rest) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (rest / 3_600_000, rest / 60_000 % 60);
    let (second, milli) = (rest / 1_000 % 60, rest % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z")
}

/// The date of a day since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Parse `"250ms"`, `"30s"`, `"5m"`, `"72h"` or `"30d"`.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let text = input.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{input:?} has no unit (use ms, s, m, h or d)"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{input:?} is not a duration like \"30s\""))?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "{input:?}: unknown unit {unit:?} (use ms, s, m, h or d)"
            ))
        }
    };
    n.checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{input:?} is too long"))
}

/// [`humanize`], or rounded to its largest unit with a `≈` when it is not a
/// whole number of it (`≈27m` for 1623 s).
pub fn roughly(d: Duration) -> String {
    let ms = d.as_millis();
    match UNITS[..3].iter().find(|(_, size)| ms >= *size) {
        Some((unit, size)) if !ms.is_multiple_of(*size) => {
            format!("≈{}{unit}", (ms + size / 2) / size)
        }
        _ => humanize(d),
    }
}

/// The units a duration is written in, largest first, in milliseconds.
const UNITS: [(&str, u128); 4] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
];

/// A duration the way a config writes it, the inverse of
/// [`parse_duration`]: `3d`, `4h`, `90s`, `250ms`.
pub fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    match UNITS
        .iter()
        .find(|(_, size)| ms >= *size && ms.is_multiple_of(*size))
    {
        Some((unit, size)) => format!("{}{unit}", ms / size),
        None => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_duration("72h").unwrap(),
            Duration::from_secs(72 * 3600)
        );
        assert_eq!(
            parse_duration("30d").unwrap(),
            Duration::from_secs(30 * 86400)
        );
        for bad in ["30", "s", "3.5s", "10x", "-1s", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn moves_with_the_monotonic_clock_from_its_anchor() {
        let started = Instant::now();
        let clock = Clock::anchored(1_000_000, started);
        let now = clock.now_ms();
        assert!((1_000_000..1_000_000 + 1_000).contains(&now), "{now}");
        let copy = clock.clone();
        copy.advance(Duration::from_secs(30));
        assert!(clock.now_ms() >= now + 30_000, "clones share the time");
        assert!(clock.now_ms() < now + 31_000);
    }
}

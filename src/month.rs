//! UTC calendar months and days, the windows of every allowance and marker.
//!
//! A [`Month`] is the half-open interval `[start, end)` of one UTC calendar month. All
//! month arithmetic in the crate goes through here so that the boundaries (the last
//! millisecond of a month, 00:00 UTC on the 1st) are decided in exactly one place.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};

/// One UTC calendar month.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    year: i32,
    month: u32,
}

impl Month {
    /// The month containing `instant`.
    pub fn containing(instant: DateTime<Utc>) -> Self {
        Self {
            year: instant.year(),
            month: instant.month(),
        }
    }

    /// `None` unless `month` is 1–12 and the year is representable.
    pub fn new(year: i32, month: u32) -> Option<Self> {
        NaiveDate::from_ymd_opt(year, month, 1)?;
        // The month after must exist too, so `end` never fails.
        let (ny, nm) = if month == 12 {
            (year.checked_add(1)?, 1)
        } else {
            (year, month + 1)
        };
        NaiveDate::from_ymd_opt(ny, nm, 1)?;
        Some(Self { year, month })
    }

    /// First instant of the month (inclusive).
    pub fn start(self) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(self.year, self.month, 1, 0, 0, 0)
            .single()
            .expect("validated month")
    }

    /// First instant of the next month (exclusive end).
    pub fn end(self) -> DateTime<Utc> {
        self.next().start()
    }

    pub fn next(self) -> Self {
        if self.month == 12 {
            Self {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Self {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    pub fn contains(self, instant: DateTime<Utc>) -> bool {
        Self::containing(instant) == self
    }

    /// The instant at which a month's state is judged: `now` inside it, its last
    /// microsecond for a past month, its first instant for a future one.
    pub fn judged_at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        let last = self.end() - chrono::Duration::microseconds(1);
        now.clamp(self.start(), last)
    }

    /// Unix seconds of the start, as used in marker keys.
    pub fn start_unix(self) -> i64 {
        self.start().timestamp()
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

/// Why a `month` parameter was refused; the text is shown to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseMonthError {
    #[error("month must be YYYY-MM")]
    Format,
    #[error("month {0:02} is not 01–12")]
    MonthOfYear(u32),
    #[error("month must be between {} and {}", Month::EARLIEST, Month::LATEST)]
    OutOfRange,
}

impl Month {
    /// The first month a parameter may name: marker keys count Unix seconds from here.
    pub const EARLIEST: Month = Month {
        year: 1970,
        month: 1,
    };
    /// The last month a parameter may name: its end, 10000-01-01, has no RFC 3339 form.
    pub const LATEST: Month = Month {
        year: 9999,
        month: 11,
    };
}

impl FromStr for Month {
    type Err = ParseMonthError;

    /// `YYYY-MM` exactly (no sign, no spaces, two-digit month) within
    /// [`EARLIEST`](Month::EARLIEST)..=[`LATEST`](Month::LATEST).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use ParseMonthError::*;
        let (y, m) = s.split_once('-').ok_or(Format)?;
        if y.len() != 4 || m.len() != 2 || !(y.bytes().chain(m.bytes())).all(|b| b.is_ascii_digit())
        {
            return Err(Format);
        }
        let year = y.parse().map_err(|_| Format)?;
        let month = m.parse().map_err(|_| Format)?;
        if !(1..=12).contains(&month) {
            return Err(MonthOfYear(month));
        }
        let parsed = Month::new(year, month).ok_or(OutOfRange)?;
        if !(Month::EARLIEST..=Month::LATEST).contains(&parsed) {
            return Err(OutOfRange);
        }
        Ok(parsed)
    }
}

/// One UTC calendar day, the window of daily allowances: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(NaiveDate);

impl Day {
    /// The day containing `instant`.
    pub fn containing(instant: DateTime<Utc>) -> Self {
        Self(instant.date_naive())
    }

    /// First instant of the day (inclusive).
    pub fn start(self) -> DateTime<Utc> {
        Utc.from_utc_datetime(&self.0.and_time(chrono::NaiveTime::MIN))
    }

    /// First instant of the next day (exclusive end).
    pub fn end(self) -> DateTime<Utc> {
        self.start() + chrono::Duration::days(1)
    }

    /// Unix seconds of the start, as used in daily marker keys.
    pub fn start_unix(self) -> i64 {
        self.start().timestamp()
    }

    pub fn month(self) -> Month {
        Month::containing(self.start())
    }
}

/// Whole seconds from `now` until `end`, rounded up, at least 1: a `Retry-After` or a
/// quota header's reset never says 0 while the window still runs.
pub fn seconds_until(end: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    let ms = (end - now).num_milliseconds();
    ((ms + 999) / 1000).max(1)
}

/// Whether PostgreSQL (and RFC 3339 with four-digit years) can hold `at` as given: a
/// leap second (`23:59:60`, which chrono keeps as a fraction past `:59`) or a year
/// outside 1–9999 cannot be.
pub fn storable(at: DateTime<Utc>) -> bool {
    at.timestamp_subsec_nanos() < 1_000_000_000 && (1..=9999).contains(&at.year())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_runs_from_midnight_to_midnight_utc() {
        let last_ms: DateTime<Utc> = "2026-11-30T23:59:59.999Z".parse().unwrap();
        let day = Day::containing(last_ms);
        assert_eq!(
            day.start(),
            "2026-11-30T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            day.end(),
            "2026-12-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(day.month(), "2026-11".parse().unwrap());
        assert_eq!(Day::containing(day.end()).start(), day.end());
    }

    #[test]
    fn seconds_until_round_up_and_never_reach_zero() {
        let end: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            seconds_until(end, "2026-11-30T23:59:59.001Z".parse().unwrap()),
            1
        );
        assert_eq!(
            seconds_until(end, "2026-11-30T23:59:58Z".parse().unwrap()),
            2
        );
        assert_eq!(seconds_until(end, end), 1);
    }

    #[test]
    fn leap_seconds_and_five_digit_years_are_not_storable() {
        let leap: DateTime<Utc> = "2016-12-31T23:59:60Z".parse().unwrap();
        assert!(!storable(leap));
        assert!(storable("2016-12-31T23:59:59.999Z".parse().unwrap()));
        assert!(storable("9999-12-31T23:59:59Z".parse().unwrap()));
        let far = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        assert!(!storable(far));
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn last_millisecond_belongs_to_its_month_and_midnight_to_the_next() {
        let nov = Month::containing(at("2026-11-30T23:59:59.999Z"));
        assert_eq!(nov.to_string(), "2026-11");
        assert_eq!(nov.end(), at("2026-12-01T00:00:00Z"));
        assert_eq!(
            Month::containing(at("2026-12-01T00:00:00Z")).to_string(),
            "2026-12"
        );
    }

    #[test]
    fn december_rolls_into_the_next_year() {
        let dec: Month = "2026-12".parse().unwrap();
        assert_eq!(dec.end(), at("2027-01-01T00:00:00Z"));
        assert_eq!(dec.next().to_string(), "2027-01");
    }

    #[test]
    fn start_unix_matches_the_marker_key_suffix() {
        let dec: Month = "2026-12".parse().unwrap();
        assert_eq!(dec.start_unix(), 1_796_083_200);
    }

    #[test]
    fn malformed_months_are_refused() {
        for bad in [
            "2026-13", "2026-00", "26-01", "2026-1", "2026/01", "abcd-ef", "",
        ] {
            assert!(bad.parse::<Month>().is_err(), "{bad}");
        }
    }

    fn refusal(text: &str) -> String {
        text.parse::<Month>().unwrap_err().to_string()
    }

    #[test]
    fn months_from_1970_01_to_9999_11_are_accepted() {
        let first: Month = "1970-01".parse().unwrap();
        assert_eq!(first.start_unix(), 0);
        let last: Month = "9999-11".parse().unwrap();
        assert_eq!(last.end(), at("9999-12-01T00:00:00Z"));
    }

    #[test]
    fn months_outside_1970_01_to_9999_11_are_refused_as_out_of_range() {
        for outside in ["1969-12", "9999-12", "0000-01"] {
            assert_eq!(
                refusal(outside),
                "month must be between 1970-01 and 9999-11",
                "{outside}"
            );
        }
    }

    #[test]
    fn a_month_of_year_outside_01_to_12_is_named() {
        assert_eq!(refusal("2026-13"), "month 13 is not 01–12");
        assert_eq!(refusal("2026-00"), "month 00 is not 01–12");
    }

    #[test]
    fn anything_but_yyyy_mm_is_refused_as_malformed() {
        for bad in [
            "2026-1",
            " 2026-01",
            "2026-01 ",
            "+2026-01",
            "2026-+1",
            "2026-01-01",
        ] {
            assert_eq!(refusal(bad), "month must be YYYY-MM", "{bad:?}");
        }
    }

    #[test]
    fn a_month_is_judged_at_now_inside_it_and_at_its_edges_outside() {
        let nov: Month = "2026-11".parse().unwrap();
        let now = at("2026-11-15T12:00:00Z");
        assert_eq!(nov.judged_at(now), now);
        let oct: Month = "2026-10".parse().unwrap();
        assert_eq!(oct.judged_at(now), at("2026-10-31T23:59:59.999999Z"));
        let dec: Month = "2026-12".parse().unwrap();
        assert_eq!(dec.judged_at(now), dec.start());
    }
}

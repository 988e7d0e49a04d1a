//! The console's bar chart of calls per UTC day, as inline SVG made here: no script,
//! no image request, and a page that prints and reads the same offline.
//!
//! One bar per day so far, in a slot per day of the whole month, so bars keep their
//! width as the month fills. Each bar carries its figures as `data-day`, `data-calls`
//! and `data-units`, and a `<title>` (the tooltip); the scale rounds up to 1, 2 or 5
//! times a power of ten.

use maud::{Markup, html};

use super::page::grouped;
use crate::month::Month;
use crate::usage::series::DayUsage;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 26.0;

/// The chart of calls in `days` (the month's days up to today) in a month of `slots`
/// days.
pub fn daily_calls(days: &[DayUsage], slots: usize, label: &str) -> Markup {
    bars(days, slots, label, |d| d.calls, "calls")
}

/// [`daily_calls`] with bars of units (the customer portal's chart).
pub fn daily_units(days: &[DayUsage], slots: usize, label: &str) -> Markup {
    bars(days, slots, label, |d| d.cost, "units")
}

/// One bar of `value` per day, the total captioned in `noun`.
fn bars(
    days: &[DayUsage],
    slots: usize,
    label: &str,
    value: fn(&DayUsage) -> i64,
    noun: &str,
) -> Markup {
    let slots = slots.max(days.len()).max(1);
    let top = nice_ceiling(days.iter().map(value).max().unwrap_or(0));
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot_w = plot_w / slots as f64;
    let bar_w = (slot_w * 0.7).max(1.0);
    let y_of = |v: i64| TOP + plot_h - plot_h * (v as f64 / top as f64);
    let total: i64 = days.iter().map(value).sum();
    html! {
        figure.chart {
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(label)
                data-days=(days.len()) data-total=(total) {
                @for tick in [0, top / 2, top] {
                    line.grid x1=(LEFT) x2=(WIDTH - RIGHT) y1=(fmt(y_of(tick))) y2=(fmt(y_of(tick))) {}
                    text.axis x=(LEFT - 6.0) y=(fmt(y_of(tick) + 4.0)) text-anchor="end" { (grouped(tick)) }
                }
                @for (i, day) in days.iter().enumerate() {
                    @let x = LEFT + slot_w * i as f64 + (slot_w - bar_w) / 2.0;
                    @let y = y_of(value(day));
                    rect.bar x=(fmt(x)) y=(fmt(y)) width=(fmt(bar_w)) height=(fmt(TOP + plot_h - y))
                        data-day=(day.day) data-calls=(day.calls) data-units=(day.cost) {
                        title { (day.day) ": " (grouped(day.calls)) " calls, " (grouped(day.cost)) " units" }
                    }
                }
                @for i in (0..slots).filter(|i| *i == 0 || (*i + 1) % 5 == 0) {
                    text.axis x=(fmt(LEFT + slot_w * (i as f64 + 0.5))) y=(fmt(HEIGHT - 8.0)) text-anchor="middle" {
                        (i + 1)
                    }
                }
            }
            figcaption { (label) ": " (grouped(total)) " " (noun) }
        }
    }
}

/// Days in `month`: the chart's slots.
pub fn days_in(month: Month) -> usize {
    (month.end() - month.start()).num_days() as usize
}

/// The smallest 1, 2 or 5 times a power of ten that is at least `max` (at least 10).
pub fn nice_ceiling(max: i64) -> i64 {
    let mut step = 10i64;
    loop {
        for factor in [1, 2, 5] {
            if let Some(candidate) = step.checked_mul(factor)
                && candidate >= max
            {
                return candidate;
            }
        }
        match step.checked_mul(10) {
            Some(next) => step = next,
            None => return max.max(1),
        }
    }
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    fn day(d: u32, calls: i64) -> DayUsage {
        DayUsage {
            day: NaiveDate::from_ymd_opt(2026, 11, d).unwrap(),
            calls,
            cost: calls * 2,
        }
    }

    #[test]
    fn the_scale_rounds_up_to_one_two_or_five() {
        assert_eq!(nice_ceiling(0), 10);
        assert_eq!(nice_ceiling(10), 10);
        assert_eq!(nice_ceiling(11), 20);
        assert_eq!(nice_ceiling(21), 50);
        assert_eq!(nice_ceiling(51), 100);
        assert_eq!(nice_ceiling(123_456), 200_000);
        assert_eq!(nice_ceiling(i64::MAX), i64::MAX);
    }

    #[test]
    fn one_bar_per_day_with_its_figures() {
        let svg = daily_calls(&[day(1, 0), day(2, 40), day(3, 20)], 30, "Calls").into_string();
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 3);
        assert!(
            svg.contains(r#"data-day="2026-11-02" data-calls="40" data-units="80""#),
            "{svg}"
        );
        assert!(svg.contains(r#"data-days="3" data-total="60""#), "{svg}");
        // The tallest bar fills the plot up to the scale's top (50).
        assert!(svg.contains(">2026-11-02: 40 calls, 80 units<"), "{svg}");
        assert!(svg.contains(">50<"), "{svg}");
    }

    #[test]
    fn the_units_chart_draws_units() {
        let svg = daily_units(&[day(1, 30)], 30, "Units").into_string();
        // 60 units: the scale's top is 100, and the caption counts units.
        assert!(svg.contains(">100<"), "{svg}");
        assert!(svg.contains("Units: 60 units"), "{svg}");
    }

    #[test]
    fn an_empty_month_draws_no_bars() {
        let svg = daily_calls(&[], 31, "Calls").into_string();
        assert_eq!(svg.matches("<rect").count(), 0);
    }
}

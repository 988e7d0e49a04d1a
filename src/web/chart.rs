//! The page faces' charts per UTC day, as inline SVG made here: no script, no image
//! request, and a page that prints and reads the same offline.
//!
//! Bars of calls or units ([`daily_calls`], [`daily_units`]): one bar per day so far, in
//! a slot per day of the whole month, so bars keep their width as the month fills. Each
//! bar carries its figures as `data-day`, `data-calls` and `data-units`, and a `<title>`
//! (the tooltip); the scale rounds up to 1, 2 or 5 times a power of ten.
//!
//! Lines of latency ([`daily_latency`]): p50, p95 and p99 in the same slots, a gap on
//! days without a measured latency (a zero would read as a fast day), a dot per day that
//! has one (so a lone day shows), a legend, and a scale in milliseconds. Colours and
//! dashes are SVG attributes, which the pages' policy allows (it forbids `style`).

use chrono::NaiveDate;
use maud::{Markup, html};

use super::page::grouped;
use crate::month::Month;
use crate::usage::analytics::report::{AnalyticsRow, Percentiles};
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

/// The latency chart's height, its margins (room for the legend above the plot and the
/// millisecond labels left of it), and its three series: name, colour, dashes. The
/// colours are Okabe and Ito's, told apart by colour-blind readers; p99 is also dashed.
const LINES_HEIGHT: f64 = 250.0;
const LINES_LEFT: f64 = 64.0;
const LINES_TOP: f64 = 34.0;
const SERIES: [(&str, &str, &str); 3] = [
    ("p50", "#0072b2", "none"),
    ("p95", "#e69f00", "none"),
    ("p99", "#d55e00", "6 4"),
];

/// The latency percentiles per day of `days` (the range's days in order, from the
/// month's first) in a month of `slots` days, in milliseconds.
pub fn daily_latency(days: &[AnalyticsRow], slots: usize, label: &str) -> Markup {
    let slots = slots.max(days.len()).max(1);
    let points: Vec<(NaiveDate, &Percentiles)> = days
        .iter()
        .filter_map(|row| Some((row.day?, &row.latency_ms)))
        .collect();
    let highest = points
        .iter()
        .flat_map(|(_, p)| [p.p50, p.p95, p.p99])
        .flatten()
        .fold(0.0, f64::max);
    let (top, step) = ms_scale(highest);
    let plot_w = WIDTH - LINES_LEFT - RIGHT;
    let plot_h = LINES_HEIGHT - LINES_TOP - BOTTOM;
    let slot_w = plot_w / slots as f64;
    let x_of = |i: usize| LINES_LEFT + slot_w * (i as f64 + 0.5);
    let y_of = |ms: f64| LINES_TOP + plot_h - plot_h * (ms / top).min(1.0);
    let ticks = (top / step).round() as usize;
    let measured = points.iter().filter(|(_, p)| p.p50.is_some()).count();
    html! {
        figure.chart.latency {
            svg viewBox=(format!("0 0 {WIDTH} {LINES_HEIGHT}")) role="img" aria-label=(label)
                data-days=(points.len()) data-measured=(measured) {
                @for i in 0..=ticks {
                    @let ms = step * i as f64;
                    line.grid x1=(LINES_LEFT) x2=(WIDTH - RIGHT) y1=(fmt(y_of(ms))) y2=(fmt(y_of(ms))) {}
                    text.axis x=(LINES_LEFT - 6.0) y=(fmt(y_of(ms) + 4.0)) text-anchor="end" { (ms_text(ms)) }
                }
                text.axis x=(LINES_LEFT - 6.0) y=(fmt(LINES_TOP - 12.0)) text-anchor="end" { "ms" }
                @for (n, (name, colour, dashes)) in SERIES.iter().enumerate() {
                    @let x = WIDTH - RIGHT - 64.0 * (SERIES.len() - n) as f64;
                    g.legend {
                        line x1=(fmt(x)) x2=(fmt(x + 22.0)) y1="14" y2="14" stroke=(colour)
                            stroke-width="2.5" stroke-dasharray=(dashes) {}
                        text.axis x=(fmt(x + 27.0)) y="18" { (name) }
                    }
                }
                @for (name, colour, dashes) in SERIES {
                    @let value = |p: &Percentiles| match name { "p50" => p.p50, "p95" => p.p95, _ => p.p99 };
                    g.series data-series=(name) {
                        @for run in runs(&points, value) {
                            @if run.len() > 1 {
                                polyline fill="none" stroke=(colour) stroke-width="2" stroke-linejoin="round"
                                    stroke-dasharray=(dashes)
                                    points=(run.iter().map(|(i, ms)| format!("{},{}", fmt(x_of(*i)), fmt(y_of(*ms)))).collect::<Vec<_>>().join(" ")) {}
                            }
                        }
                        @for (i, (day, p)) in points.iter().enumerate() {
                            @if let Some(ms) = value(p) {
                                circle cx=(fmt(x_of(i))) cy=(fmt(y_of(ms))) r="2.5" fill=(colour)
                                    data-day=(day) data-ms=(ms) {
                                    title { (day) " " (name) ": " (ms_text(ms)) " ms" }
                                }
                            }
                        }
                    }
                }
                @for i in (0..slots).filter(|i| *i == 0 || (*i + 1) % 5 == 0) {
                    text.axis x=(fmt(x_of(i))) y=(fmt(LINES_HEIGHT - 8.0)) text-anchor="middle" {
                        (i + 1)
                    }
                }
            }
            figcaption {
                (label) ", in ms"
                @if measured == 0 { ": none measured yet" } @else { "; days without calls are left blank" }
            }
        }
    }
}

/// The runs of consecutive days with a value: `(slot, ms)` each.
fn runs(
    points: &[(NaiveDate, &Percentiles)],
    value: impl Fn(&Percentiles) -> Option<f64>,
) -> Vec<Vec<(usize, f64)>> {
    let mut runs: Vec<Vec<(usize, f64)>> = vec![Vec::new()];
    for (i, (_, p)) in points.iter().enumerate() {
        match value(p) {
            Some(ms) => runs.last_mut().expect("one run at least").push((i, ms)),
            None if runs.last().is_some_and(|r| !r.is_empty()) => runs.push(Vec::new()),
            None => {}
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

/// The scale's top and its step for latencies up to `max` ms: the smallest 1, 2 or 5
/// times a power of ten (at least 1 ms), in five, four or five steps.
fn ms_scale(max: f64) -> (f64, f64) {
    let mut power = 1.0;
    loop {
        for (factor, steps) in [(1.0, 5.0), (2.0, 4.0), (5.0, 5.0)] {
            let top = factor * power;
            if top >= max || !top.is_finite() {
                return (top, top / steps);
            }
        }
        power *= 10.0;
    }
}

/// A latency as the chart and the tables write it: thousands grouped from 1,000 ms,
/// whole from 100, one decimal from 10, else two, trailing zeros dropped.
pub fn ms_text(ms: f64) -> String {
    let text = match ms {
        ms if ms >= 1_000.0 => return grouped(ms.round() as i64),
        ms if ms >= 100.0 => format!("{ms:.0}"),
        ms if ms >= 10.0 => format!("{ms:.1}"),
        ms => format!("{ms:.2}"),
    };
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_owned(),
        false => text,
    }
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

    fn latency(d: u32, p50: Option<f64>) -> AnalyticsRow {
        AnalyticsRow {
            day: NaiveDate::from_ymd_opt(2026, 11, d),
            route: None,
            key_id: None,
            calls: i64::from(p50.is_some()),
            units: 0,
            errors: 0,
            latency_ms: Percentiles {
                p50,
                p95: p50.map(|ms| ms * 2.0),
                p99: p50.map(|ms| ms * 4.0),
            },
        }
    }

    #[test]
    fn three_lines_with_gaps_on_days_without_latency() {
        let days = [
            latency(1, Some(10.0)),
            latency(2, Some(12.0)),
            latency(3, None),
            latency(4, Some(11.0)),
        ];
        let svg = daily_latency(&days, 30, "Latency").into_string();
        for name in ["p50", "p95", "p99"] {
            assert!(svg.contains(&format!(r#"data-series="{name}""#)), "{svg}");
        }
        // Days 1–2 make one line per series; day 4 stands alone, a dot.
        assert_eq!(svg.matches("<polyline").count(), 3, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 9, "{svg}");
        assert!(svg.contains(r#"data-days="4" data-measured="3""#), "{svg}");
        // The highest p99 is 48 ms: the scale's top is 50, in steps of 10.
        assert!(svg.contains(">50<") && svg.contains(">40<"), "{svg}");
        assert!(svg.contains(">2026-11-02 p99: 48 ms<"), "{svg}");
    }

    #[test]
    fn latencies_read_in_a_few_digits() {
        assert_eq!(ms_text(0.0), "0");
        assert_eq!(ms_text(0.4), "0.4");
        assert_eq!(ms_text(1.234), "1.23");
        assert_eq!(ms_text(12.34), "12.3");
        assert_eq!(ms_text(123.4), "123");
        assert_eq!(ms_text(1234.5), "1,235");
        assert_eq!(ms_scale(0.3), (1.0, 0.2));
        assert_eq!(ms_scale(48.0), (50.0, 10.0));
        assert_eq!(ms_scale(150.0), (200.0, 50.0));
    }

    #[test]
    fn an_empty_month_draws_no_bars() {
        let svg = daily_calls(&[], 31, "Calls").into_string();
        assert_eq!(svg.matches("<rect").count(), 0);
    }
}

//! The worker's tick: renew (or take) the fleet's lister lease and, while this process
//! holds it and a listing is due, list KV once for the whole fleet.
//!
//! The listing is the only way markers written outside the fleet reach it (markers the
//! fleet writes are in `fleet_marker` already). Its result goes to the table in one
//! transaction with the lease's schedule and the `listed:` notification, so every
//! replica's view follows and counts as fresh from then on. The next listing is planned
//! [`lease::listing_interval`] ahead: the refresh interval, stretched so the listing's
//! ⌈markers/1000⌉ pages stay within their share of the fleet's call budget.

use std::sync::atomic::Ordering;

use chrono::Utc;

use super::core::Inner;
use super::fleet::{MarkerKind, lease, table};
use super::settle::{failed, retry_rechecks};
use super::store::{StoreError, parse_daily_marker_key, parse_marker_key};
use crate::month::{Day, Month};

pub(super) async fn tick(inner: &Inner) {
    retry_rechecks(inner).await;
    let settings = &inner.settings;
    let fleet = &inner.fleet;
    let today = Day::containing(Utc::now());
    let renewed = lease::renew(
        &fleet.db,
        fleet.process,
        lease::lease_ttl(settings.refresh_interval),
        settings.refresh_interval,
        today.start_unix(),
    )
    .await;
    let lease = match renewed {
        Ok(lease) => lease,
        Err(e) => {
            metrics::counter!("tollgate_fleet_marker_errors_total", "op" => "lease").increment(1);
            tracing::warn!(error = %e, "lister lease cannot be renewed; not listing");
            None
        }
    };
    let holds = lease.is_some();
    if inner.lister.swap(holds, Ordering::Relaxed) != holds {
        if holds {
            tracing::info!("this process now lists KV for the fleet");
        } else {
            tracing::info!("another process lists KV for the fleet now");
        }
        metrics::gauge!("tollgate_marker_lister").set(if holds { 1.0 } else { 0.0 });
    }
    match lease {
        Some(lease) if lease.due => list(inner, &lease).await,
        _ => {}
    }
}

/// One listing of the month's (and, when the fleet has daily markers, the day's)
/// markers, written to the fleet's table.
async fn list(inner: &Inner, lease: &lease::Lease) {
    let settings = &inner.settings;
    let now = Utc::now();
    let (month, day) = (Month::containing(now), Day::containing(now));
    let daily = inner.daily_in_use.load(Ordering::Relaxed) || lease.daily_markers;
    let listed = async {
        let keys = inner.store.list().await?;
        let mut pages = lease::pages(keys.len());
        let mut found = vec![table::Listed {
            kind: MarkerKind::Month,
            period_start_unix: month.start_unix(),
            accounts: keys
                .iter()
                .filter_map(|k| parse_marker_key(k, month))
                .collect(),
        }];
        if daily {
            let keys = inner.store.list_daily().await?;
            pages += lease::pages(keys.len());
            found.push(table::Listed {
                kind: MarkerKind::Day,
                period_start_unix: day.start_unix(),
                accounts: keys
                    .iter()
                    .filter_map(|k| parse_daily_marker_key(k, day))
                    .collect(),
            });
        }
        Ok::<_, StoreError>((found, pages))
    }
    .await;
    let interval = |pages| {
        lease::listing_interval(
            pages,
            settings.kv_call_budget,
            settings.kv_budget_window,
            settings.refresh_interval,
        )
    };
    let fleet = &inner.fleet;
    match listed {
        Ok((found, pages)) => {
            inner.listings.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("tollgate_marker_listings_total", "result" => "ok").increment(1);
            let next = interval(pages);
            metrics::gauge!("tollgate_marker_listing_interval_seconds").set(next.as_secs_f64());
            let recorded = async {
                let mut tx = fleet.db.begin().await?;
                for listed in &found {
                    table::follow_listing(&mut tx, listed, lease.db_now).await?;
                }
                table::forget_old(&mut tx, month.start_unix(), day.start_unix()).await?;
                lease::listed(&mut tx, fleet.process, lease.db_now, pages, next).await?;
                tx.commit().await
            }
            .await;
            if let Err(e) = recorded {
                super::settle::fleet_failed("listing", &e);
            }
        }
        Err(e) => {
            metrics::counter!("tollgate_marker_listings_total", "result" => "failed").increment(1);
            failed(inner, "refresh", &e);
            let retry = interval(lease.pages).max(settings.refresh_interval);
            if let Err(e) = lease::listing_failed(&fleet.db, fleet.process, retry).await {
                super::settle::fleet_failed("lease", &e);
            }
        }
    }
}

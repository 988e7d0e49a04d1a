//! What every portal page shares: the HTML shell with its navigation, the one-line
//! notice a form leaves, and the error page. The stylesheet, the security headers, the
//! number format and the error mapping are the page faces' common ones ([`crate::web::page`]):
//! no script, nothing loaded from elsewhere.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::error::ApiError;
use crate::web::page::{Problem, csrf_field, html_response};

/// Where the portal serves the console's stylesheet.
pub const STYLESHEET: &str = "/portal/portal.css";

/// The portal's sections, for the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Keys,
    Plans,
}

/// A signed-in page's frame: its section, the sign-out form's token, and the notice.
pub struct Frame<'a> {
    pub section: Section,
    pub csrf: &'a str,
    pub notice: Option<&'a str>,
}

/// A whole page: the document, the navigation when signed in, and `content`.
pub fn shell(title: &str, frame: Option<Frame<'_>>, content: Markup) -> Markup {
    let current = |s: Section| {
        frame
            .as_ref()
            .and_then(|f| (f.section == s).then_some("page"))
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · tollgate" }
                link rel="stylesheet" href=(STYLESHEET);
            }
            body {
                header.top {
                    a.brand href="/portal/" { "tollgate" span { "portal" } }
                    @if let Some(frame) = &frame {
                        nav {
                            a href="/portal/" aria-current=[current(Section::Overview)] { "Overview" }
                            a href="/portal/keys" aria-current=[current(Section::Keys)] { "API keys" }
                            a href="/portal/plans" aria-current=[current(Section::Plans)] { "Plans" }
                        }
                        form.signout method="post" action="/portal/sign-out" {
                            (csrf_field(frame.csrf))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    @if let Some(notice) = frame.as_ref().and_then(|f| f.notice) {
                        p.flash.done role="status" { (notice) }
                    }
                    (content)
                }
            }
        }
    }
}

/// The notice named by a redirect's `?done=`: a fixed text, never the query's.
pub fn notice(done: Option<&str>) -> Option<&'static str> {
    Some(match done? {
        "revoked" => "The key is revoked.",
        "limit" => "The key's monthly limit is saved.",
        "redeemed" => "The code is redeemed: your new plan is active.",
        _ => return None,
    })
}

/// A portal page that could not be shown: the console's problem, in the portal's frame.
#[derive(Debug)]
pub struct PortalProblem(pub Problem);

impl PortalProblem {
    /// A form whose CSRF token is missing or not this session's.
    pub fn forged() -> Self {
        let mut problem = Problem::forged();
        problem.message =
            "This form was not sent from this portal session. Reload the page and try again."
                .into();
        Self(problem)
    }

    pub fn not_found() -> Self {
        let mut problem = Problem::not_found();
        problem.message = "There is no such page in the portal.".into();
        Self(problem)
    }

    pub fn bad_form(rejection: &axum::extract::rejection::FormRejection) -> Self {
        Self(Problem::bad_form(rejection))
    }

    /// The same problem, shown with a way back to `href` (see [`Problem::back_to`]).
    pub fn back_to(self, href: impl Into<String>, csrf: Option<&str>) -> Self {
        Self(self.0.back_to(href, csrf))
    }
}

impl From<ApiError> for PortalProblem {
    fn from(err: ApiError) -> Self {
        Self(err.into())
    }
}

impl From<sqlx::Error> for PortalProblem {
    fn from(err: sqlx::Error) -> Self {
        Self(err.into())
    }
}

impl IntoResponse for PortalProblem {
    fn into_response(self) -> Response {
        let problem = self.0;
        let frame = problem.signed_in().map(|(csrf, href)| Frame {
            section: match href {
                "/portal/keys" => Section::Keys,
                "/portal/plans" => Section::Plans,
                _ => Section::Overview,
            },
            csrf,
            notice: None,
        });
        let page = shell(
            problem.title,
            frame,
            problem.content("/portal/", "Back to the portal"),
        );
        problem.respond(page)
    }
}

/// Anything else under `/portal/`.
pub async fn unknown() -> PortalProblem {
    PortalProblem::not_found()
}

/// An HTML page with status 200.
pub fn ok(page: Markup) -> Response {
    html_response(StatusCode::OK, page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_fixed_texts() {
        assert_eq!(notice(Some("revoked")), Some("The key is revoked."));
        assert_eq!(notice(Some("<script>")), None);
        assert_eq!(notice(None), None);
    }
}

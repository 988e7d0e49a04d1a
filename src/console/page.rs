//! What every console page shares: the HTML shell with its navigation and one-time
//! message, and the error page in it. The stylesheet, security headers, problem type and
//! number format are the page faces' common ones ([`crate::web::page`]).

use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

pub use crate::web::page::{
    Problem, csrf_field, grouped, html_response, security_headers, stylesheet, wait_in_words,
};

/// Where the console serves the stylesheet.
pub const STYLESHEET: &str = "/console/console.css";

/// The one-time message shown on the page a form redirects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flash {
    pub kind: FlashKind,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlashKind {
    Done,
    Error,
}

impl FlashKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FlashKind::Done => "done",
            FlashKind::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Self {
        if text == "error" {
            FlashKind::Error
        } else {
            FlashKind::Done
        }
    }
}

/// The console's sections, for the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Accounts,
}

/// What a signed-in page shows around its content: the section, the token its sign-out
/// form carries and the pending message.
pub struct Frame<'a> {
    pub section: Section,
    pub csrf: &'a str,
    pub flash: Option<&'a Flash>,
}

/// A whole page: the document, the navigation when signed in, and `content`.
pub fn shell(title: &str, frame: Option<Frame<'_>>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · tollgate console" }
                link rel="stylesheet" href=(STYLESHEET);
            }
            body {
                header.top {
                    a.brand href="/console/" { "tollgate" span { "console" } }
                    @if let Some(frame) = &frame {
                        nav {
                            a href="/console/" aria-current=[current(frame, Section::Overview)] { "Overview" }
                            a href="/console/accounts" aria-current=[current(frame, Section::Accounts)] { "Accounts" }
                        }
                        form.signout method="post" action="/console/sign-out" {
                            (csrf_field(frame.csrf))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    @if let Some(flash) = frame.as_ref().and_then(|f| f.flash) {
                        p class={ "flash " (flash.kind.as_str()) } role="status" { (flash.text) }
                    }
                    (content)
                }
            }
        }
    }
}

fn current(frame: &Frame<'_>, section: Section) -> Option<&'static str> {
    (frame.section == section).then_some("page")
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let frame = self.signed_in().map(|(csrf, href)| Frame {
            section: if href.starts_with("/console/accounts") {
                Section::Accounts
            } else {
                Section::Overview
            },
            csrf,
            flash: None,
        });
        let page = shell(
            self.title,
            frame,
            self.content("/console/", "Back to the console"),
        );
        self.respond(page)
    }
}

/// Anything else under `/console/`.
pub async fn unknown() -> Problem {
    Problem::not_found()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolated_text_is_escaped() {
        let flash = Flash {
            kind: FlashKind::Done,
            text: "<script>alert(1)</script>".into(),
        };
        let page = shell(
            "<b>",
            Some(Frame {
                section: Section::Overview,
                csrf: "\"><x",
                flash: Some(&flash),
            }),
            html! {},
        )
        .into_string();
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;"), "{page}");
        assert!(!page.contains("\"><x"), "{page}");
        assert!(
            page.contains(r#"<p class="flash done" role="status">"#),
            "{page}"
        );
    }
}

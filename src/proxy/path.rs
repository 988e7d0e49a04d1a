//! Which paths are proxied, and refusal of paths that try to leave their prefix.
//!
//! The upstream (or anything between) may decode percent-escapes and resolve dot
//! segments, so a path is judged on every decoding of it: if any of them holds a `.`
//! or `..` segment, a backslash or a NUL, it is refused before anything is forwarded.

use percent_encoding::percent_decode_str;

/// The proxied API prefixes (SPEC §3.1), each with the route label it has in logs and
/// metrics.
const PROXIED: [(&str, &str); 2] = [
    ("/vedic/v1/", "/vedic/v1/*"),
    ("/western/v1/", "/western/v1/*"),
];

fn proxied(path: &str) -> Option<&'static (&'static str, &'static str)> {
    PROXIED
        .iter()
        .find(|(p, _)| path.starts_with(p) || path == &p[..p.len() - 1])
}

/// The proxied prefix of a path, or `None` when it is not proxied. A prefix's root
/// without its trailing slash (`/vedic/v1`) belongs to it too.
pub fn prefix_of(path: &str) -> Option<&'static str> {
    proxied(path).map(|(prefix, _)| *prefix)
}

/// The route label of a proxied path (`/vedic/v1/*`), or `None` when it is not proxied.
pub fn route_label(path: &str) -> Option<&'static str> {
    proxied(path).map(|(_, label)| *label)
}

/// How many rounds of percent-decoding are examined.
const DECODE_ROUNDS: usize = 3;

/// Whether `path` stays inside its prefix on every decoding.
pub fn is_contained(path: &str) -> bool {
    let mut current = path.to_owned();
    for _ in 0..=DECODE_ROUNDS {
        if has_escape_segments(&current) {
            return false;
        }
        let decoded = match percent_decode_str(&current).decode_utf8() {
            Ok(d) => d.into_owned(),
            // Bytes that are not UTF-8 cannot name a segment we forward.
            Err(_) => return false,
        };
        if decoded == current {
            return true;
        }
        current = decoded;
    }
    // Still changing after several decodings: refuse rather than guess.
    false
}

/// A segment is judged by what precedes any `;` (servlet containers read `..;x` as `..`).
fn has_escape_segments(path: &str) -> bool {
    path.contains('\\')
        || path.contains('\0')
        || path.split('/').any(|segment| {
            let name = segment.split(';').next().unwrap_or_default();
            name == "." || name == ".."
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_paths_stay_inside() {
        assert!(is_contained("/vedic/v1/horoscope/daily"));
        assert!(is_contained("/western/v1/chart/natal.json"));
        assert!(is_contained("/vedic/v1/place/S%C3%A3o%20Paulo"));
    }

    #[test]
    fn dot_segments_in_any_spelling_are_refused() {
        for path in [
            "/vedic/v1/../admin",
            "/vedic/v1/./x",
            "/vedic/v1/%2e%2e/admin",
            "/vedic/v1/%2E%2E/admin",
            "/vedic/v1/.%2e/admin",
            "/vedic/v1/..%2fadmin",
            "/vedic/v1/..%2Fadmin",
            "/vedic/v1/%252e%252e/admin",
            "/vedic/v1/..%5cadmin",
            "/vedic/v1/..\\admin",
            "/vedic/v1/%00",
            "/vedic/v1/..;/admin",
            "/vedic/v1/.;x/y",
            "/vedic/v1/%2e%2e;jsessionid=1/admin",
        ] {
            assert!(!is_contained(path), "{path}");
        }
    }

    #[test]
    fn only_the_two_prefixes_are_proxied() {
        assert_eq!(prefix_of("/vedic/v1/x"), Some("/vedic/v1/"));
        assert_eq!(prefix_of("/western/v1/"), Some("/western/v1/"));
        assert_eq!(prefix_of("/vedic/v2/x"), None);
        assert_eq!(prefix_of("/vedic/v1"), Some("/vedic/v1/"));
        assert_eq!(prefix_of("/vedic/v10"), None);
        assert_eq!(prefix_of("/admin/v1/x"), None);
    }
}
